// memfit fuzz harnesses: one LLVMFuzzerTestOneInput per parser (fuzz_*.cpp).
//
// Each harness feeds the bytes to one parser. The parser may accept them or
// throw std::runtime_error (memfit's error type for bad input: it names the
// file and the position, GraphError and ModelFileError are kinds of it);
// anything else (another exception, a crash, a sanitizer report, a hang) is a
// bug. Built two ways:
//   - with clang -fsanitize=fuzzer,address,undefined (make fuzz): libFuzzer
//     drives the function;
//   - with the normal build (fuzz/replay_main.cpp supplies main): replays the
//     committed seeds and regressions under CTest.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace memfit::fuzz {

// The input as a file path: one memfd per process, rewritten for each input
// (no disk I/O; "/proc/self/fd/N" is a regular file to every reader).
inline const std::string& input_file(const uint8_t* data, size_t size) {
  static int fd = -1;
  static std::string path;
  if (fd < 0) {
    fd = ::memfd_create("memfit-fuzz-input", MFD_CLOEXEC);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::pwrite(fd, data + done, size - done, off_t(done));
    if (w <= 0) std::abort();
    done += size_t(w);
  }
  return path;
}

// Runs fn; a std::runtime_error is the parser refusing the input (fine).
template <class F>
int run_one(F&& fn) {
  try {
    fn();
  } catch (const std::runtime_error&) {
  }
  return 0;
}

}  // namespace memfit::fuzz
