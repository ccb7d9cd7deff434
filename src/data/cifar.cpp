#include "data/cifar.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>

#include "data/pickle.hpp"
#include "data/regular_file.hpp"

namespace memfit::data {
namespace {

namespace fs = std::filesystem;

int classes_of(CifarKind kind, bool coarse) { return kind == CifarKind::Cifar10 ? 10 : coarse ? 20 : 100; }

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// One batch file, scanned: its image count and where its pixels are; a
// pickle's labels (a binary file's come with its records).
struct Part {
  std::string path;
  bool binary = false;
  CifarKind kind = CifarKind::Cifar10;
  size_t count = 0;
  uint64_t data_offset = 0;  // pickle: the array's bytes
  std::vector<uint8_t> fine, coarse;
};

size_t record_bytes(CifarKind kind) { return (kind == CifarKind::Cifar10 ? 1 : 2) + kCifarImageBytes; }

using Fd = RegularFile;

// A list of ints in [0, classes), as bytes.
std::vector<uint8_t> int_list(const pickle::Tree& t, const std::string& key, int classes) {
  const int64_t id = t.find(t.root, key);
  if (id < 0) throw std::runtime_error(t.path + ": no '" + key + "' entry: not a CIFAR batch");
  if (t.at(uint32_t(id)).kind != pickle::Kind::List)
    throw std::runtime_error(t.path + ": '" + key + "' is not a list: not a CIFAR batch");
  const std::vector<uint32_t>& items = t.items(uint32_t(id));
  std::vector<uint8_t> out(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    const pickle::Value& v = t.at(items[k]);
    if (v.kind != pickle::Kind::Int)
      throw std::runtime_error(t.path + ": '" + key + "' entry " + std::to_string(k) + " is not an integer");
    if (v.i < 0 || v.i >= classes)
      throw std::runtime_error(t.path + ": '" + key + "' entry " + std::to_string(k) + " is label " +
                               std::to_string(v.i) + ", outside the " + std::to_string(classes) +
                               " classes (corrupt file, or not this dataset)");
    out[k] = uint8_t(v.i);
  }
  return out;
}

Part scan_pickle(const std::string& path, CifarKind kind) {
  const pickle::Tree t = pickle::read(path);
  if (t.at(t.root).kind != pickle::Kind::Dict) throw std::runtime_error(path + ": the pickle is not a dict: not a CIFAR batch");
  const int64_t data = t.find(t.root, "data");
  if (data < 0) throw std::runtime_error(path + ": no 'data' entry: not a CIFAR batch");
  const pickle::Value& a = t.at(uint32_t(data));
  if (a.kind != pickle::Kind::Array || !a.built)
    throw std::runtime_error(path + ": 'data' is not a numpy array: not a CIFAR batch");
  const std::vector<uint32_t>& shape = t.lists[t.at(a.sub).sub];
  if (shape.size() != 2 || t.at(shape[1]).i != int64_t(kCifarImageBytes))
    throw std::runtime_error(path + ": 'data' is not an array of N x 3072 bytes (32x32 RGB images): not a CIFAR batch");
  Part p;
  p.path = path;
  p.kind = kind;
  p.count = size_t(t.at(shape[0]).i);
  p.data_offset = a.off;
  if (p.count == 0) throw std::runtime_error(path + ": 'data' holds no images");
  if (kind == CifarKind::Cifar10) {
    p.fine = int_list(t, "labels", 10);
  } else {
    p.fine = int_list(t, "fine_labels", 100);
    p.coarse = int_list(t, "coarse_labels", 20);
  }
  for (const std::vector<uint8_t>* l : {&p.fine, &p.coarse})
    if (!l->empty() && l->size() != p.count)
      throw std::runtime_error(path + ": " + std::to_string(l->size()) + " labels for " + std::to_string(p.count) +
                               " images: corrupt file");
  return p;
}

Part scan_binary(const std::string& path, CifarKind kind) {
  const Fd f(path);
  const size_t rec = record_bytes(kind);
  const char* what = kind == CifarKind::Cifar10 ? "1 label byte + 3072 pixels" : "coarse and fine label bytes + 3072 pixels";
  if (f.size() == 0) throw std::runtime_error(path + ": empty file");
  if (f.size() % rec)
    throw std::runtime_error(path + ": " + std::to_string(f.size()) + " bytes is not a whole number of " +
                             std::to_string(rec) + "-byte records (" + what + "); the last record is cut at byte " +
                             std::to_string(f.size() - f.size() % rec) + ": truncated, or not " +
                             (kind == CifarKind::Cifar10 ? "CIFAR-10" : "CIFAR-100") + " binary");
  Part p;
  p.path = path;
  p.binary = true;
  p.kind = kind;
  p.count = size_t(f.size() / rec);
  return p;
}

Part scan(const std::string& path, CifarKind kind, bool binary) {
  return binary ? scan_binary(path, kind) : scan_pickle(path, kind);
}

// The part's pixels (count x 3072) and labels into place.
void load(const Part& p, uint8_t* pixels, uint8_t* fine, uint8_t* coarse) {
  const Fd f(p.path);
  if (!p.binary) {
    f.pread_all(pixels, p.count * kCifarImageBytes, p.data_offset);
    std::copy(p.fine.begin(), p.fine.end(), fine);
    if (coarse) std::copy(p.coarse.begin(), p.coarse.end(), coarse);
    return;
  }
  const size_t rec = record_bytes(p.kind), per_read = 64;
  const bool c100 = p.kind == CifarKind::Cifar100;
  std::vector<uint8_t> buf(rec * per_read);
  for (size_t first = 0; first < p.count; first += per_read) {
    const size_t n = std::min(per_read, p.count - first);
    f.pread_all(buf.data(), n * rec, uint64_t(first) * rec);
    for (size_t k = 0; k < n; ++k) {
      const uint8_t* r = buf.data() + k * rec;
      const size_t i = first + k;
      const uint8_t fl = c100 ? r[1] : r[0];
      const int fine_classes = c100 ? 100 : 10;
      auto bad = [&](const char* which, int v, int classes, size_t byte) {
        return std::runtime_error(p.path + ": record " + std::to_string(i) + " (byte " + std::to_string(byte) + "): " +
                                  which + " " + std::to_string(v) + " is outside the " + std::to_string(classes) +
                                  " classes: corrupt file, or not this dataset");
      };
      if (c100 && r[0] >= 20) throw bad("coarse label", r[0], 20, uint64_t(i) * rec);
      if (fl >= fine_classes) throw bad("label", fl, fine_classes, uint64_t(i) * rec + (c100 ? 1 : 0));
      fine[i] = fl;
      if (coarse) coarse[i] = r[0];
      std::memcpy(pixels + i * kCifarImageBytes, r + (c100 ? 2 : 1), kCifarImageBytes);
    }
  }
}

std::vector<std::string> text_lines(const std::string& path) {
  const Fd f(path);  // a regular file
  if (f.size() > (1 << 20)) throw std::runtime_error(path + ": " + std::to_string(f.size()) + " bytes: not a list of class names");
  std::string s(size_t(f.size()), '\0');
  f.pread_all(s.data(), s.size(), 0);
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    std::string line = s.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    start = end + 1;
  }
  while (!out.empty() && out.back().empty()) out.pop_back();  // batches.meta.txt ends in blank lines
  return out;
}

std::vector<std::string> pickle_names(const std::string& path, const std::string& key) {
  const pickle::Tree t = pickle::read(path);
  const int64_t id = t.find(t.root, key);
  if (id < 0 || t.at(uint32_t(id)).kind != pickle::Kind::List)
    throw std::runtime_error(path + ": no '" + key + "' list: not CIFAR's meta file");
  std::vector<std::string> out;
  for (uint32_t v : t.items(uint32_t(id))) {
    const std::string* s = t.text(v);
    if (!s) throw std::runtime_error(path + ": '" + key + "' entry " + std::to_string(out.size()) + " is not a short string");
    out.push_back(*s);
  }
  return out;
}

}  // namespace

std::string CifarLayout::describe() const {
  return std::string(kind == CifarKind::Cifar10 ? "CIFAR-10" : "CIFAR-100") +
         (binary ? " (binary records)" : " (python pickles)");
}

std::optional<CifarLayout> find_cifar(const std::string& data) {
  const fs::path d(data);
  auto here = [](const fs::path& p) -> std::optional<CifarLayout> {
    if (is_file(p / "data_batch_1")) return CifarLayout{p.string(), CifarKind::Cifar10, false};
    if (is_file(p / "data_batch_1.bin")) return CifarLayout{p.string(), CifarKind::Cifar10, true};
    if (is_file(p / "train") && is_file(p / "test")) return CifarLayout{p.string(), CifarKind::Cifar100, false};
    if (is_file(p / "train.bin")) return CifarLayout{p.string(), CifarKind::Cifar100, true};
    return std::nullopt;
  };
  if (auto l = here(d)) return l;
  std::optional<CifarLayout> c10, c100;
  for (const char* sub : {"cifar-10-batches-py", "cifar-10-batches-bin"})
    if (!c10 && (c10 = here(d / sub)) && c10->kind != CifarKind::Cifar10) c10.reset();
  for (const char* sub : {"cifar-100-python", "cifar-100-binary"})
    if (!c100 && (c100 = here(d / sub)) && c100->kind != CifarKind::Cifar100) c100.reset();
  if (c10 && c100)
    throw std::runtime_error(data + " holds both CIFAR-10 (" + c10->dir + ") and CIFAR-100 (" + c100->dir +
                             "): pass --data with the one to train on");
  return c10 ? c10 : c100;
}

std::vector<std::string> cifar_files(const CifarLayout& l, const std::string& split) {
  if (split != "train" && split != "test") throw std::invalid_argument("CIFAR split must be train or test, got " + split);
  std::vector<std::string> names;
  const std::string ext = l.binary ? ".bin" : "";
  if (l.kind == CifarKind::Cifar10) {
    if (split == "train")
      for (int k = 1; k <= 5; ++k) names.push_back("data_batch_" + std::to_string(k) + ext);
    else
      names.push_back("test_batch" + ext);
  } else {
    names.push_back(split + ext);
  }
  std::vector<std::string> out;
  for (const std::string& n : names) {
    const fs::path p = fs::path(l.dir) / n;
    if (!is_file(p))
      throw std::runtime_error(l.describe() + " at " + l.dir + " is incomplete: " + p.string() +
                               " is missing (the archive's files: " +
                               (l.kind == CifarKind::Cifar10 ? "data_batch_1..5" + ext + ", test_batch" + ext
                                                              : "train" + ext + ", test" + ext) +
                               "); unpack it again");
    out.push_back(p.string());
  }
  return out;
}

Normalize cifar10_normalize() { return {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}}; }
Normalize cifar100_normalize() { return {{0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f}}; }

CifarBatch read_cifar_batch(const std::string& path, CifarKind kind, bool binary) {
  const Part p = scan(path, kind, binary);
  CifarBatch b;
  b.pixels.resize(p.count * kCifarImageBytes);  // the count is bounded by the file's size
  b.labels.resize(p.count);
  if (kind == CifarKind::Cifar100) b.coarse.resize(p.count);
  load(p, b.pixels.data(), b.labels.data(), kind == CifarKind::Cifar100 ? b.coarse.data() : nullptr);
  return b;
}

std::vector<std::string> read_cifar_class_names(const CifarLayout& l, bool coarse) {
  const fs::path d(l.dir);
  const int classes = classes_of(l.kind, coarse);
  std::string file, key;
  if (l.kind == CifarKind::Cifar10) {
    file = l.binary ? "batches.meta.txt" : "batches.meta";
    key = "label_names";
  } else {
    key = coarse ? "coarse_label_names" : "fine_label_names";
    file = l.binary ? key + ".txt" : "meta";
  }
  const fs::path p = d / file;
  if (!is_file(p)) return {};
  std::vector<std::string> names = l.binary ? text_lines(p.string()) : pickle_names(p.string(), key);
  if (names.size() != size_t(classes))
    throw std::runtime_error(p.string() + ": " + std::to_string(names.size()) + " class names, " +
                             std::to_string(classes) + " expected: corrupt file, or not this dataset");
  return names;
}

CifarDataset CifarDataset::open(const CifarLayout& l, const std::string& split, const CifarOptions& opt) {
  if (opt.coarse && l.kind != CifarKind::Cifar100)
    throw std::invalid_argument("coarse labels are CIFAR-100's; " + l.dir + " is CIFAR-10");
  const std::vector<std::string> files = cifar_files(l, split);
  std::vector<Part> parts;
  size_t total = 0;
  for (const std::string& f : files) {
    parts.push_back(scan(f, l.kind, l.binary));
    total += parts.back().count;  // each bounded by its file's size
  }
  CifarDataset d;
  d.classes_ = classes_of(l.kind, opt.coarse);
  d.names_ = read_cifar_class_names(l, opt.coarse);
  try {
    d.pixels_.resize(total * kCifarImageBytes);
    d.labels_.resize(total);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(l.dir + ": cannot allocate " + std::to_string(total * kCifarImageBytes) + " bytes for " +
                             std::to_string(total) + " images");
  }
  // CIFAR-100's labels not trained on (fine or coarse), one part at a time.
  std::vector<uint8_t> other(l.kind == CifarKind::Cifar100 ? std::max_element(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
                                                               return a.count < b.count;
                                                             })->count
                                                           : 0);
  size_t at = 0;
  for (const Part& p : parts) {
    uint8_t* mine = d.labels_.data() + at;
    uint8_t* fine = opt.coarse ? other.data() : mine;
    uint8_t* coarse = l.kind == CifarKind::Cifar100 ? (opt.coarse ? mine : other.data()) : nullptr;
    load(p, d.pixels_.data() + at * kCifarImageBytes, fine, coarse);
    at += p.count;
  }
  const Normalize n = l.kind == CifarKind::Cifar10 ? cifar10_normalize() : cifar100_normalize();
  for (int c = 0; c < 3; ++c) {
    const float m = n.mean_at(c), inv = 1.0f / n.std_at(c);
    for (int v = 0; v < 256; ++v) d.lut_[c][v] = (float(v) / 255.0f - m) * inv;
  }
  return d;
}

void CifarDataset::get(size_t i, float* out_chw, int32_t* label) const {
  if (i >= labels_.size())
    throw std::out_of_range("CifarDataset: index " + std::to_string(i) + " >= size " + std::to_string(labels_.size()));
  const uint8_t* src = pixels_.data() + i * kCifarImageBytes;
  for (int c = 0; c < 3; ++c)
    for (size_t k = 0; k < 1024; ++k) out_chw[size_t(c) * 1024 + k] = lut_[c][src[size_t(c) * 1024 + k]];
  *label = int32_t(labels_[i]);
}

float CifarDataset::fill_value(int c) const { return lut_[std::clamp(c, 0, 2)][0]; }

size_t CifarDataset::resident_bytes() const {
  size_t names = 0;
  for (const std::string& s : names_) names += sizeof(std::string) + (s.size() > 15 ? s.capacity() + 1 : 0);
  return pixels_.capacity() + labels_.capacity() + sizeof(lut_) + names;
}

}  // namespace memfit::data
