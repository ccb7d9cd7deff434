// A regular file open for reading by offset: the readers of binary dataset
// files (CIFAR's batches, the pickle reader) share it. Errors are
// std::runtime_error naming the file, and the byte for a failed read.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace memfit::data {

class RegularFile {
 public:
  explicit RegularFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw std::runtime_error(path + ": not a regular file");
    }
    size_ = uint64_t(st.st_size);
  }
  ~RegularFile() { ::close(fd_); }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Exactly n bytes at offset off into dst (a file that shrank since it was
  // opened is an error, not a short read).
  void pread_all(void* dst, size_t n, uint64_t off) const {
    auto* p = static_cast<uint8_t*>(dst);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, p + got, n - got, off_t(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw std::runtime_error(path_ + ": byte " + std::to_string(off + got) + ": cannot read: " + std::strerror(errno));
      if (r == 0)
        throw std::runtime_error(path_ + ": byte " + std::to_string(off + got) + ": the file ends early (it shrank?)");
      got += size_t(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace memfit::data
