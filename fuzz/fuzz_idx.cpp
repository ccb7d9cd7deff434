// IDX files as they come (raw, or gzip when the bytes start with 1f 8b): read
// as images, as labels, and copied as the dataset cache does.
#include <fcntl.h>
#include <unistd.h>

#include "data/idx.hpp"
#include "fuzz/harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const std::string& path = memfit::fuzz::input_file(data, size);
  memfit::fuzz::run_one([&] { memfit::data::read_idx_images(path); });
  memfit::fuzz::run_one([&] { memfit::data::read_idx_labels(path); });
  memfit::fuzz::run_one([&] { memfit::data::copy_idx_images(path, null_fd, "/dev/null"); });
  return 0;
}
