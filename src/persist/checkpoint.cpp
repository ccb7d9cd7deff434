#include "persist/checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <vector>

#include "io/safetensors.hpp"
#include "kernels/bf16.hpp"
#include "memfit/rng.hpp"
#include "runtime/device.hpp"
#include "runtime/tier_store.hpp"
#include "compile/step_graph.hpp"

namespace memfit::train {
namespace {

// Format 2: the checksum covers the metadata as well as the tensor bytes.
// Format 1 (tensor bytes only) still loads; its metadata is validated all the
// same, it is just not covered by the checksum.
constexpr const char* kFormat = "memfit-checkpoint-2";
constexpr const char* kFormatV1 = "memfit-checkpoint-1";

// Folds every metadata entry but the checksum itself into the checksum, in
// key order, each key and value followed by a NUL (which neither contains:
// the JSON writer and reader keep them as strings, NUL would be escaped
// text, never a terminator of ours).
uint64_t fold_metadata(uint64_t sum, const std::map<std::string, std::string>& meta) {
  const char nul = '\0';
  for (const auto& [k, v] : meta) {
    if (k == "checksum") continue;
    sum = rng::fnv1a(sum, k.data(), k.size());
    sum = rng::fnv1a(sum, &nul, 1);
    sum = rng::fnv1a(sum, v.data(), v.size());
    sum = rng::fnv1a(sum, &nul, 1);
  }
  return sum;
}

// A decimal integer in [0, max]: digits only (no sign, space or suffix), at
// most 20 of them, no overflow. Throws naming the file and the key.
uint64_t parse_count(const std::string& path, const std::string& key, const std::string& text, uint64_t max) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (size_t i = 0; ok && i < text.size(); ++i) {
    const char c = text[i];
    ok = c >= '0' && c <= '9' && !__builtin_mul_overflow(v, 10u, &v) && !__builtin_add_overflow(v, uint64_t(c - '0'), &v);
  }
  if (!ok || v > max)
    throw std::runtime_error(path + " is corrupted: metadata '" + key + "' is '" + text.substr(0, 64) +
                             "', expected an integer from 0 to " + std::to_string(max));
  return v;
}

// Passes a tensor's bytes to fn(bytes, offset, n) a chunk at a time and
// drops each chunk's pages after it, so reading a checkpoint adds about one
// chunk of resident memory, not the file: the file is not in the memory plan.
template <class F>
void stream(const io::SafetensorsFile& f, const io::TensorInfo& t, F&& fn) {
  constexpr size_t kChunk = size_t(1) << 20;
  const auto* p = static_cast<const unsigned char*>(f.data(t));
  for (size_t off = 0; off < t.nbytes(); off += kChunk) {
    const size_t n = std::min(kChunk, t.nbytes() - off);
    fn(p + off, off, n);
    f.drop_pages(t, off, off + n);
  }
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The file type of a value as the CPU and the f32 reference store it.
io::DType file_dtype(DType t) {
  switch (t) {
    case DType::f32: return io::DType::F32;
    case DType::bf16: return io::DType::BF16;
    case DType::f16: return io::DType::F16;
    case DType::i32: return io::DType::I32;
    case DType::u8: return io::DType::U8;
  }
  return io::DType::F32;
}

bool is_state(const Value& v) {
  return (v.cls == VClass::Param || v.cls == VClass::Buffer || v.cls == VClass::OptState) && !v.constant;
}

void require_f32_storage(Executor& ex) {
  if (ex.device().wide_floats())  // (a double oracle)
    throw std::runtime_error("checkpoints are written from f32 storage only");
}

// Host bytes of the values a checkpoint writes: the arenas themselves on a
// host device; else (a GPU's memory, the offload file) pieces of at most
// 1 MiB read through the executor (read_range), once for the checksum and
// once as the file is written (the plan's "checkpoint staging" row).
class StateBytes {
 public:
  explicit StateBytes(Executor& ex) : ex_(ex) {}
  // Null where the host cannot read the value in place: tensor_view reads it in pieces.
  void* at(ValueId v) {
    if (!ex_.device().host_addressable()) return nullptr;
    if (ex_.plan().values.at(static_cast<size_t>(v)).arena == Arena::Tier) return nullptr;
    return ex_.data(v);
  }
  // Value v as a file tensor, and its bytes folded into the checksum `sum`.
  io::TensorView tensor_view(ValueId v, io::DType dt, uint64_t& sum) {
    const Value& val = ex_.graph().value(v);
    io::TensorView t{val.name, dt, val.shape, at(v), {}};
    if (t.data) {
      sum = rng::fnv1a(sum, t.data, val.bytes());
      return t;
    }
    Executor* ex = &ex_;
    t.read = [ex, v](size_t off, void* dst, size_t n) { ex->read_range(v, off, dst, n); };
    std::vector<unsigned char> piece(std::min<size_t>(val.bytes(), size_t(1) << 20));
    for (size_t off = 0; off < val.bytes(); off += piece.size()) {
      const size_t n = std::min(piece.size(), val.bytes() - off);
      ex_.read_range(v, off, piece.data(), n);
      sum = rng::fnv1a(sum, piece.data(), n);
    }
    return t;
  }

 private:
  Executor& ex_;
};

// A checkpoint's (or shard's) metadata: the run's settings, the position,
// and the checksum over the tensors' bytes (`sum`) and the metadata.
std::map<std::string, std::string> state_metadata(const TrainState& st, uint64_t sum) {
  std::map<std::string, std::string> meta = st.extra;
  meta["format"] = kFormat;
  meta["model"] = st.model;
  meta["step"] = std::to_string(st.step);
  meta["epoch"] = std::to_string(st.epoch);
  meta["sample"] = std::to_string(st.sample);
  meta["seed"] = std::to_string(st.seed);
  meta["checksum"] = hex(fold_metadata(sum, meta));
  return meta;
}

}  // namespace

void save_checkpoint(const std::string& dir, Executor& ex, const TrainState& st) {
  require_f32_storage(ex);
  const Graph& g = ex.graph();
  ::mkdir(dir.c_str(), 0755);
  std::vector<io::TensorView> all, weights;
  uint64_t sum = rng::kFnvOffset;
  std::vector<int64_t> batches_tracked;  // one value per batch-norm layer
  batches_tracked.reserve(g.num_values());
  StateBytes bytes(ex);
  for (size_t i = 0; i < g.num_values(); ++i) {
    const Value& v = g.value(static_cast<ValueId>(i));
    if (!is_state(v)) continue;
    // Optimizer state as stored: f32, bf16, or 8-bit codes (U8) and their f32 scales.
    io::TensorView t = bytes.tensor_view(static_cast<ValueId>(i), file_dtype(v.dtype), sum);
    all.push_back(t);
    if (v.cls != VClass::OptState) weights.push_back(t);
  }
  // PyTorch's BatchNorm keeps a step counter next to its running statistics.
  for (const auto& w : std::vector<io::TensorView>(weights)) {
    const std::string suffix = ".running_mean";
    if (w.name.size() > suffix.size() && w.name.compare(w.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      batches_tracked.push_back(st.step);
  }
  size_t bi = 0;
  for (const auto& w : std::vector<io::TensorView>(weights)) {
    const std::string suffix = ".running_mean";
    if (w.name.size() > suffix.size() && w.name.compare(w.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      weights.push_back({w.name.substr(0, w.name.size() - suffix.size()) + ".num_batches_tracked", io::DType::I64, {},
                         &batches_tracked[bi++], {}});
  }
  const std::map<std::string, std::string> meta = state_metadata(st, sum);
  // The resume file first: a failure in between leaves a newer resume file
  // beside the previous weights file, each of them whole.
  io::write_safetensors(dir + "/checkpoint.safetensors", all, meta);
  io::write_safetensors(dir + "/model.safetensors", weights, {{"format", "pt"}, {"model", st.model}});
}

namespace {

// The values a file holds: all state (a checkpoint), the optimizer state
// alone (a rank's shard), or the state kept in memory (a step record: the
// rest is in the offload file).
enum class FileKind { Checkpoint, Shard, StepRecord };
bool in_file(const Executor& ex, ValueId id, FileKind kind) {
  const Value& v = ex.graph().value(id);
  switch (kind) {
    case FileKind::Checkpoint: return is_state(v);
    case FileKind::Shard: return v.cls == VClass::OptState;
    case FileKind::StepRecord: return is_state(v) && ex.plan().values.at(static_cast<size_t>(id)).arena != Arena::Tier;
  }
  return false;
}

// A step record's tensors besides the values: which copy of each offloaded
// value is the step's (U8, in the store's block order) and the offload
// file's sector checksums (U64).
constexpr const char* kRecordSlots = "memfit.offload.slots";
constexpr const char* kRecordSums = "memfit.offload.sector_sums";

// The offload file as a record names it: its name alone where it lies in
// the record's directory (the run directory can move), else its path.
std::string recorded_name(const std::string& dir, const std::string& file) {
  const size_t slash = file.rfind('/');
  if (slash != std::string::npos && file.compare(0, slash, dir) == 0 && slash == dir.size()) return file.substr(slash + 1);
  return file;
}
std::string resolve_recorded(const std::string& dir, const std::string& name) {
  return name.find('/') == std::string::npos ? dir + "/" + name : name;
}

std::string layout_key(const TierStore& t) {
  const std::string l = t.layout();
  return hex(rng::fnv1a(rng::kFnvOffset, l.data(), l.size()));
}

TrainState load_file(const std::string& path, Executor& ex, FileKind kind) {
  require_f32_storage(ex);
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0)
    throw std::runtime_error("no checkpoint to resume from: " + path + " does not exist");
  io::SafetensorsFile f = io::SafetensorsFile::load(path);
  const auto& meta = f.metadata();
  auto get = [&](const std::string& k) -> std::string {
    auto it = meta.find(k);
    if (it == meta.end()) throw std::runtime_error(path + ": not a memfit checkpoint (no '" + k + "' in its metadata)");
    return it->second;
  };
  // All metadata is parsed and checked before a byte is copied into ex.
  const std::string format = get("format");
  if (format != kFormat && format != kFormatV1)
    throw std::runtime_error(path + ": unsupported checkpoint format '" + format.substr(0, 64) + "' (this memfit reads " +
                             kFormat + " and " + kFormatV1 + ")");
  const Graph& g = ex.graph();
  TrainState st;
  st.model = get("model");
  if (!g.model_name.empty() && st.model != g.model_name)
    throw std::runtime_error(path + " is a checkpoint of model '" + st.model + "', but this run trains '" + g.model_name + "'");
  st.step = static_cast<int64_t>(parse_count(path, "step", get("step"), uint64_t(INT64_MAX)));
  st.epoch = parse_count(path, "epoch", get("epoch"), UINT64_MAX);
  st.sample = parse_count(path, "sample", get("sample"), UINT64_MAX);
  st.seed = parse_count(path, "seed", get("seed"), UINT64_MAX);
  const std::string checksum = get("checksum");
  for (auto& [k, val] : meta)
    if (k != "format" && k != "model" && k != "step" && k != "epoch" && k != "sample" && k != "seed" && k != "checksum")
      st.extra[k] = val;
  // Verify every tensor and the checksum, then copy: a bad file changes nothing.
  uint64_t sum = rng::kFnvOffset;
  std::vector<std::pair<ValueId, const io::TensorInfo*>> todo;
  for (size_t i = 0; i < g.num_values(); ++i) {
    const Value& v = g.value(static_cast<ValueId>(i));
    if (!in_file(ex, static_cast<ValueId>(i), kind)) continue;
    const io::TensorInfo* t = f.find(v.name);
    if (!t) throw std::runtime_error(path + " has no tensor '" + v.name + "' (checkpoint of a different model or optimizer)");
    if (t->dtype != file_dtype(v.dtype) || t->shape != v.shape)
      throw std::runtime_error(path + ": tensor '" + v.name + "' is " + std::string(io::dtype_name(t->dtype)) + " " +
                               shape_str(t->shape) + " but this run has " +
                               std::string(io::dtype_name(file_dtype(v.dtype))) + " " + shape_str(v.shape));
    stream(f, *t, [&](const unsigned char* p, size_t, size_t n) { sum = rng::fnv1a(sum, p, n); });
    todo.push_back({static_cast<ValueId>(i), t});
  }
  TierStore::Committed committed;
  if (kind == FileKind::StepRecord) {
    TierStore* tier = ex.tier().get();
    if (!tier || !tier->kept()) throw std::logic_error("a step record loads into a kept offload store only");
    const io::TensorInfo* slots = f.find(kRecordSlots);
    const io::TensorInfo* sums = f.find(kRecordSums);
    if (!slots || !sums || slots->dtype != io::DType::U8 || sums->dtype != io::DType::U64 || slots->shape.size() != 1 ||
        sums->shape.size() != 1)
      throw std::runtime_error(path + " is not an offload step record (no " + kRecordSlots + " and " + kRecordSums + ")");
    committed.slots.resize(slots->nbytes());
    committed.sums.resize(sums->nbytes() / sizeof(uint64_t));
    stream(f, *slots, [&](const unsigned char* p, size_t off, size_t n) {
      sum = rng::fnv1a(sum, p, n);
      std::memcpy(committed.slots.data() + off, p, n);
    });
    stream(f, *sums, [&](const unsigned char* p, size_t off, size_t n) {
      sum = rng::fnv1a(sum, p, n);
      std::memcpy(reinterpret_cast<unsigned char*>(committed.sums.data()) + off, p, n);
    });
  }
  if (format == kFormat) sum = fold_metadata(sum, meta);
  if (hex(sum) != checksum)
    throw std::runtime_error(path + " is corrupted: its checksum does not match its contents");
  if (kind == FileKind::StepRecord) {
    TierStore& tier = *ex.tier();
    const std::string dir = path.substr(0, path.rfind('/'));
    if (st.extra["offload_layout"] != layout_key(tier) || resolve_recorded(dir, st.extra["offload_file"]) != tier.path())
      throw std::runtime_error(path + " records the offload file " + st.extra["offload_file"] +
                               " laid out for another plan than this run's");
    tier.adopt(committed);
    st.extra.erase("offload_layout");
    st.extra.erase("offload_file");
  }
  for (auto& [v, t] : todo)
    stream(f, *t, [&](const unsigned char* p, size_t off, size_t n) { ex.write_range(v, off, p, n); });
  return st;
}

}  // namespace

TrainState load_checkpoint(const std::string& dir, Executor& ex) {
  return load_file(dir + "/checkpoint.safetensors", ex, FileKind::Checkpoint);
}

void save_step_record(const std::string& dir, Executor& ex, const TrainState& st) {
  require_f32_storage(ex);
  TierStore* tier = ex.tier().get();
  if (!tier || !tier->kept()) throw std::logic_error("a step record needs a kept offload store");
  const TierStore::Committed c = tier->sync();  // the step's writes are on the disk
  const Graph& g = ex.graph();
  std::vector<ValueId> mem;
  for (size_t i = 0; i < g.num_values(); ++i)
    if (in_file(ex, static_cast<ValueId>(i), FileKind::StepRecord)) mem.push_back(static_cast<ValueId>(i));
  StateBytes bytes(ex);
  uint64_t sum = rng::kFnvOffset;
  std::vector<io::TensorView> all;
  for (ValueId v : mem) all.push_back(bytes.tensor_view(v, file_dtype(g.value(v).dtype), sum));
  all.push_back({kRecordSlots, io::DType::U8, {static_cast<int64_t>(c.slots.size())}, c.slots.data(), {}});
  sum = rng::fnv1a(sum, c.slots.data(), c.slots.size());
  all.push_back({kRecordSums, io::DType::U64, {static_cast<int64_t>(c.sums.size())}, c.sums.data(), {}});
  sum = rng::fnv1a(sum, c.sums.data(), c.sums.size() * sizeof(uint64_t));
  TrainState r = st;
  r.extra["offload_file"] = recorded_name(dir, tier->path());
  r.extra["offload_layout"] = layout_key(*tier);
  io::write_safetensors(dir + "/" + kStepRecordName, all, state_metadata(r, sum));
  tier->commit();  // recorded: the next step writes the other copies
}

namespace {
// A safetensors file's metadata; none where it is missing or unreadable.
std::map<std::string, std::string> file_metadata(const std::string& path) {
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0) return {};
  try {
    return io::SafetensorsFile::load(path).metadata();
  } catch (const std::exception&) {
    return {};
  }
}
}  // namespace

std::string step_record_file(const std::string& dir, bool any_step) {
  auto rec = file_metadata(dir + "/" + kStepRecordName);
  if (rec.empty() || !rec.count("offload_file")) return {};
  const std::string file = resolve_recorded(dir, rec["offload_file"]);
  if (any_step) return file;
  auto ck = file_metadata(dir + "/checkpoint.safetensors");
  if (ck.empty()) return file;
  // Whichever holds the later step; the checkpoint where they are the same
  // (it needs no offload file). Unreadable numbers: the loader says so.
  try {
    if (std::stoll(rec["step"]) <= std::stoll(ck["step"])) return {};
  } catch (const std::exception&) {
    return {};
  }
  return file;
}

std::map<std::string, std::string> resume_metadata(const std::string& dir) {
  if (!step_record_file(dir).empty()) return file_metadata(dir + "/" + kStepRecordName);
  return checkpoint_metadata(dir);
}

TrainState load_step_record(const std::string& dir, Executor& ex) {
  return load_file(dir + "/" + kStepRecordName, ex, FileKind::StepRecord);
}

void remove_step_record(const std::string& dir, const std::string& keep_file) {
  const std::string file = step_record_file(dir, true);
  ::unlink((dir + "/" + kStepRecordName).c_str());
  if (!file.empty() && file != keep_file) ::unlink(file.c_str());
}

std::string shard_checkpoint_path(const std::string& dir, int rank, int64_t step) {
  return dir + "/checkpoint.rank" + std::to_string(rank) + ".step" + std::to_string(step) + ".safetensors";
}

void save_state_shard(const std::string& path, Executor& ex, const TrainState& st) {
  require_f32_storage(ex);
  const Graph& g = ex.graph();
  std::vector<io::TensorView> all;
  uint64_t sum = rng::kFnvOffset;
  StateBytes bytes(ex);
  for (size_t i = 0; i < g.num_values(); ++i) {
    const Value& v = g.value(static_cast<ValueId>(i));
    if (v.cls != VClass::OptState) continue;
    io::TensorView t = bytes.tensor_view(static_cast<ValueId>(i), file_dtype(v.dtype), sum);
    all.push_back(t);
  }
  const std::map<std::string, std::string> meta = state_metadata(st, sum);
  io::write_safetensors(path, all, meta);
}

TrainState load_state_shard(const std::string& path, Executor& ex) { return load_file(path, ex, FileKind::Shard); }

void remove_other_shards(const std::string& dir, int rank, int64_t keep_step) {
  namespace fs = std::filesystem;
  const std::string prefix = "checkpoint.rank" + std::to_string(rank) + ".step";
  const std::string keep = fs::path(shard_checkpoint_path(dir, rank, keep_step)).filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name != keep && name.size() > 12 &&
        name.compare(name.size() - 12, 12, ".safetensors") == 0)
      fs::remove(e.path(), ec);
  }
}

std::map<std::string, std::string> checkpoint_metadata(const std::string& dir) {
  return file_metadata(dir + "/checkpoint.safetensors");
}

// The file's tensor `name`, or else the one tensor named "<prefix>." + name:
// a model saved inside a wrapper (Hugging Face's BertForSequenceClassification
// keeps its encoder under "bert.", a module wrapped by the user under its
// attribute's name). Two such tensors are ambiguous: an error naming both.
static const io::TensorInfo* find_prefixed(const io::SafetensorsFile& f, const std::string& path, const std::string& name) {
  if (const io::TensorInfo* t = f.find(name)) return t;
  const std::string tail = "." + name;
  std::string found;
  for (const auto& n : f.names()) {
    if (n.size() <= tail.size() || n.compare(n.size() - tail.size(), tail.size(), tail) != 0) continue;
    if (!found.empty())
      throw std::runtime_error(path + " has no tensor '" + name + "' but two that end in it ('" + found + "', '" + n +
                               "'): which one is meant is not known");
    found = n;
  }
  return found.empty() ? nullptr : f.find(found);
}

size_t load_weights(const std::string& path, Executor& ex, const std::vector<std::string>& keep) {
  require_f32_storage(ex);
  io::SafetensorsFile f = io::SafetensorsFile::load(path);
  const Graph& g = ex.graph();
  std::vector<std::pair<ValueId, const io::TensorInfo*>> todo;
  for (size_t i = 0; i < g.num_values(); ++i) {
    const Value& v = g.value(static_cast<ValueId>(i));
    if ((v.cls != VClass::Param && v.cls != VClass::Buffer) || v.constant) continue;
    bool kept = false;
    for (const auto& k : keep) kept = kept || name_matches(k, v.name);
    if (kept) continue;
    const io::TensorInfo* t = find_prefixed(f, path, v.name);
    if (!t)
      throw std::runtime_error(path + " has no tensor '" + v.name +
                               "' (weights of another architecture? --reinit PATTERN keeps a layer's fresh weights)");
    // F32 or BF16 in the file, into f32 or bf16 weights (--master-weights):
    // f32 into bf16 rounds to nearest, bf16 into f32 widens exactly.
    const bool float_file = t->dtype == io::DType::F32 || t->dtype == io::DType::BF16;
    const bool float_value = v.dtype == DType::f32 || v.dtype == DType::bf16;
    if (!float_file || !float_value || (v.cls == VClass::Buffer && t->dtype != io::DType::F32) || t->shape != v.shape)
      throw std::runtime_error(path + ": tensor '" + v.name + "' is " + std::string(io::dtype_name(t->dtype)) + " " +
                               shape_str(t->shape) + " but the model expects F32 " + shape_str(v.shape) +
                               " (--reinit " + v.name.substr(0, v.name.rfind('.')) + " keeps this layer's fresh weights)");
    todo.push_back({static_cast<ValueId>(i), t});
  }
  for (auto& [v, t] : todo) {
    const DType to = g.value(v).dtype;
    if (file_dtype(to) == t->dtype) {
      stream(f, *t, [&](const unsigned char* p, size_t off, size_t n) { ex.write_range(v, off, p, n); });
      continue;
    }
    // Converted through small aligned buffers (the file's bytes may sit at
    // any alignment); chunks hold whole elements.
    const bool narrow = to == DType::bf16;
    stream(f, *t, [&](const unsigned char* p, size_t off, size_t n) {
      constexpr size_t kBlock = 1024;
      float x[kBlock];
      kernels::bf16_t h[kBlock];
      const size_t in_size = narrow ? 4 : 2, count = n / in_size, first = off / in_size;
      for (size_t i = 0; i < count; i += kBlock) {
        const size_t m = std::min(kBlock, count - i);
        if (narrow) {
          std::memcpy(x, p + i * 4, m * 4);
          kernels::f32_to_bf16(x, h, m);
          ex.write_range(v, (first + i) * 2, h, m * 2);
        } else {
          std::memcpy(h, p + i * 2, m * 2);
          kernels::bf16_to_f32(h, x, m);
          ex.write_range(v, (first + i) * 4, x, m * 4);
        }
      }
    });
  }
  return todo.size();
}

}  // namespace memfit::train
