#include "base/process.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <thread>

namespace memfit::train {

namespace {

// Reads "Key:   123 kB" from /proc/self/status without allocating.
size_t status_field(const char* key) {
  static thread_local char buf[8192];
  int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = std::strstr(buf, key);
  if (!p) return 0;
  p += std::strlen(key);
  while (*p == ' ' || *p == '\t' || *p == ':') ++p;
  size_t kb = 0;
  while (*p >= '0' && *p <= '9') kb = kb * 10 + static_cast<size_t>(*p++ - '0');
  return kb * 1024;
}

}  // namespace

size_t current_rss() { return status_field("VmRSS"); }
size_t peak_rss() { return status_field("VmHWM"); }

bool reset_peak_rss() {
  int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

void configure_allocator() {
  constexpr int kThreshold = 64 << 10;
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
}

void start_threads() {
#pragma omp parallel
  {
    volatile char touch[4096];
    touch[0] = static_cast<char>(omp_get_thread_num());
    (void)touch[0];
  }
}

void run_with_threads(int threads, const std::function<void()>& f) {
  std::exception_ptr failed;
  std::thread t([&] {
    try {
      omp_set_num_threads(threads);  // this thread's count only (OpenMP keeps one per thread)
      f();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  t.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace memfit::train
