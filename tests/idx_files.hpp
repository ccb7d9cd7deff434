// Helpers shared by the data tests (test_data, test_data_stream): temporary
// directories, whole-file reads and writes (raw or gzip), and small IDX
// files built in memory.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace memfit::testing {

// A fresh directory under the system temp dir, removed (permissions
// restored first) at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "data") {
    std::string t = (std::filesystem::temp_directory_path() / ("memfit_test_" + tag + "_XXXXXX")).string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), {});
}
inline void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
inline void write_gz(const std::string& p, const std::vector<uint8_t>& b) {
  gzFile g = gzopen(p.c_str(), "wb");
  gzwrite(g, b.data(), unsigned(b.size()));
  gzclose(g);
}

inline void append_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
// An IDX labels file (magic 0x801) holding `labels`.
inline std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  append_be32(b, 0x801);
  append_be32(b, uint32_t(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}
// An IDX images file (magic 0x803) of n rows x cols images whose i-th pixel
// byte (over the whole file) is pixel(i).
inline std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols,
                                       const std::function<uint8_t(uint32_t)>& pixel) {
  std::vector<uint8_t> b;
  append_be32(b, 0x803);
  append_be32(b, n);
  append_be32(b, rows);
  append_be32(b, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(pixel(i));
  return b;
}

}  // namespace memfit::testing
