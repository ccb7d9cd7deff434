// IDX content through gzip: the input is the decompressed content, which the
// harness compresses first, so mutations reach the IDX header behind zlib.
#include <zlib.h>

#include <vector>

#include "data/idx.hpp"
#include "fuzz/harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A gzip stream (windowBits 15 + 16) of the input.
  std::vector<uint8_t> gz(compressBound(uLong(size)) + 64);
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return 0;
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = uInt(size);
  z.next_out = gz.data();
  z.avail_out = uInt(gz.size());
  const int rc = deflate(&z, Z_FINISH);
  gz.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return 0;
  const std::string& path = memfit::fuzz::input_file(gz.data(), gz.size());
  memfit::fuzz::run_one([&] { memfit::data::read_idx_images(path); });
  memfit::fuzz::run_one([&] { memfit::data::read_idx_labels(path); });
  return 0;
}
