#include "data/token_cache.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "data/cache_file.hpp"
#include "memfit/rng.hpp"

namespace memfit::data {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the token cache is written little-endian as it is in memory");

constexpr char kMagic[8] = {'M', 'F', 'T', 'O', 'K', 'C', 'A', '\0'};
constexpr uint32_t kVersion = 2;
// magic, version, header bytes, then 9 u64 fields.
constexpr uint32_t kHeaderBytes = 8 + 4 + 4 + 9 * 8;

constexpr const char* kCacheHint = " (pass --cache-dir DIR or set MEMFIT_CACHE_DIR to a writable directory)";

struct Header {
  uint64_t key = 0, train = 0, held_out = 0, files = 0, documents = 0, held_out_documents = 0, tokenizer = 0,
           checksum = 0, slot = 0;
};

void put32(unsigned char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t payload_checksum(const std::string& tokenizer, const std::vector<int32_t>& train,
                          const std::vector<int32_t>& held_out) {
  uint64_t h = rng::kFnvOffset;
  h = rng::fnv1a(h, tokenizer.data(), tokenizer.size());
  h = rng::fnv1a(h, train.data(), train.size() * sizeof(int32_t));
  return rng::fnv1a(h, held_out.data(), held_out.size() * sizeof(int32_t));
}

// The other caches of key's slot beside `path` (header: this format, the
// slot, another key), deleted; their paths.
std::vector<std::string> remove_stale(const std::string& path, const TokenCacheKey& key) {
  std::vector<std::string> removed;
  std::error_code ec;
  const fs::path keep(path);
  const std::string prefix = key.name + "-";
  for (fs::directory_iterator it(keep.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string file = p.filename().string();
    if (p == keep || file.rfind(prefix, 0) != 0 || p.extension() != ".tokens") continue;
    if (std::error_code e2; !it->is_regular_file(e2)) continue;
    unsigned char h[kHeaderBytes];
    std::ifstream in(p, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(h), kHeaderBytes)) continue;
    if (std::memcmp(h, kMagic, 8) != 0 || get32(h + 8) != kVersion || get32(h + 12) != kHeaderBytes) continue;
    if (get64(h + 16 + 8 * 8) != key.slot || get64(h + 16) == key.hash) continue;
    in.close();
    if (std::error_code e3; fs::remove(p, e3)) removed.push_back(p.string());
  }
  return removed;
}

}  // namespace

TokenCacheKey token_cache_key(const std::string& corpus, const std::string& tokenizer_identity, double val_fraction,
                              uint64_t seed) {
  const FileStamp root = stamp_of(corpus);
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(corpus, ec)) {
    for (fs::directory_iterator it(corpus, ec), end; !ec && it != end; it.increment(ec))
      if (std::error_code e2; it->is_regular_file(e2)) files.push_back(it->path().string());
    if (ec) throw std::runtime_error(corpus + ": cannot list the directory: " + ec.message());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(corpus);
  }
  uint64_t h = rng::kFnvOffset, slot = rng::kFnvOffset;
  auto add = [&h](const void* p, size_t n) { h = rng::fnv1a(h, p, n); };
  auto both = [&](const void* p, size_t n) {
    add(p, n);
    slot = rng::fnv1a(slot, p, n);
  };
  both("memfit token cache v1", 22);
  both(root.path.data(), root.path.size() + 1);
  const uint64_t n = files.size();
  add(&n, sizeof n);
  for (const std::string& f : files) {
    const FileStamp s = stamp_of(f);
    add(s.path.data(), s.path.size() + 1);
    add(&s.size, sizeof s.size);
    add(&s.mtime_ns, sizeof s.mtime_ns);
  }
  both(tokenizer_identity.data(), tokenizer_identity.size() + 1);
  both(&val_fraction, sizeof val_fraction);
  both(&seed, sizeof seed);
  std::string name = fs::path(root.path).filename().string();
  if (name.empty()) name = "corpus";
  return {h, slot, name};
}

std::string token_cache_path(const TokenCacheKey& key, const std::string& cache_dir) {
  const std::string dir = cache_dir.empty() ? fallback_cache_dir() : cache_dir;
  return (fs::path(dir) / (key.name + "-" + hex16(key.hash) + ".tokens")).string();
}

std::optional<TokenCacheData> read_token_cache(const std::string& path, const TokenCacheKey& key, std::string& why) {
  why.clear();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = "cannot open it";
    return std::nullopt;
  }
  const uint64_t size = fs::file_size(path, ec);
  if (ec) {
    why = "cannot read its size: " + ec.message();
    return std::nullopt;
  }
  unsigned char h[kHeaderBytes];
  if (size < kHeaderBytes || !in.read(reinterpret_cast<char*>(h), kHeaderBytes)) {
    why = "it is " + std::to_string(size) + " bytes, shorter than its header";
    return std::nullopt;
  }
  if (std::memcmp(h, kMagic, 8) != 0) {
    why = "bad magic (not a memfit token cache)";
    return std::nullopt;
  }
  if (get32(h + 8) != kVersion || get32(h + 12) != kHeaderBytes) {
    why = "format version " + std::to_string(get32(h + 8)) + ", this memfit writes " + std::to_string(kVersion);
    return std::nullopt;
  }
  Header hd;
  uint64_t* fields[] = {&hd.key,       &hd.train,    &hd.held_out, &hd.files, &hd.documents, &hd.held_out_documents,
                        &hd.tokenizer, &hd.checksum, &hd.slot};
  for (size_t i = 0; i < 9; ++i) *fields[i] = get64(h + 16 + 8 * i);
  if (hd.key != key.hash) {
    why = "it was written for another corpus, tokenizer or split";
    return std::nullopt;
  }
  // Sizes checked before anything is allocated: the counts must add up to the file.
  const uint64_t limit = size;
  if (hd.tokenizer > limit || hd.train > limit / 4 || hd.held_out > limit / 4 ||
      kHeaderBytes + hd.tokenizer + 4 * (hd.train + hd.held_out) != size) {
    why = "it is " + std::to_string(size) + " bytes, not what its header declares (truncated or corrupt)";
    return std::nullopt;
  }
  TokenCacheData d;
  d.files = hd.files;
  d.documents = hd.documents;
  d.held_out_documents = hd.held_out_documents;
  d.tokenizer.resize(hd.tokenizer);
  d.train = std::make_shared<std::vector<int32_t>>(hd.train);
  d.held_out = std::make_shared<std::vector<int32_t>>(hd.held_out);
  in.read(d.tokenizer.data(), std::streamsize(hd.tokenizer));
  in.read(reinterpret_cast<char*>(d.train->data()), std::streamsize(hd.train * 4));
  in.read(reinterpret_cast<char*>(d.held_out->data()), std::streamsize(hd.held_out * 4));
  if (!in) {
    why = "a read error";
    return std::nullopt;
  }
  if (payload_checksum(d.tokenizer, *d.train, *d.held_out) != hd.checksum) {
    why = "its checksum does not match (corrupt)";
    return std::nullopt;
  }
  return d;
}

std::vector<std::string> write_token_cache(const std::string& path, const TokenCacheKey& key,
                                           const TokenCacheData& data) {
  ensure_cache_dir(fs::path(path).parent_path().string(), "token cache", kCacheHint);
  static const std::vector<int32_t> none;
  const std::vector<int32_t>& train = data.train ? *data.train : none;
  const std::vector<int32_t>& held = data.held_out ? *data.held_out : none;
  unsigned char h[kHeaderBytes];
  std::memcpy(h, kMagic, 8);
  put32(h + 8, kVersion);
  put32(h + 12, kHeaderBytes);
  const uint64_t fields[] = {key.hash,       train.size(),           held.size(),
                             data.files,     data.documents,         data.held_out_documents,
                             data.tokenizer.size(), payload_checksum(data.tokenizer, train, held), key.slot};
  for (size_t i = 0; i < 9; ++i) put64(h + 16 + 8 * i, fields[i]);
  AtomicFile out(path, "token cache", kCacheHint);
  out.write(h, sizeof h);
  out.write(data.tokenizer.data(), data.tokenizer.size());
  out.write(train.data(), train.size() * sizeof(int32_t));
  out.write(held.data(), held.size() * sizeof(int32_t));
  out.commit();
  return remove_stale(path, key);
}

}  // namespace memfit::data
