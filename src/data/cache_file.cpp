#include "data/cache_file.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace memfit::data {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

// Removes temp files of `final_path` that a crashed build left behind: ones
// not modified for 10 minutes (a build in progress writes continuously).
void remove_stale_temps(const fs::path& final_path) {
  std::error_code ec;
  const std::string prefix = final_path.filename().string() + ".tmp.";
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::minutes(10);
  for (fs::directory_iterator it(final_path.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::error_code ec2;
    const auto t = fs::last_write_time(it->path(), ec2);
    if (!ec2 && t < cutoff) fs::remove(it->path(), ec2);
  }
}

}  // namespace

std::string cache_dir_for(const CacheDirSources& s) {
  if (!s.memfit_cache_dir.empty()) return s.memfit_cache_dir;
  if (!s.xdg_cache_home.empty() && s.xdg_cache_home[0] == '/') return (fs::path(s.xdg_cache_home) / "memfit").string();
  std::string home = s.home;
  if (home.empty()) {
    struct passwd pw, *res = nullptr;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_dir && *res->pw_dir)
      home = res->pw_dir;
  }
  if (!home.empty()) return (fs::path(home) / ".cache" / "memfit").string();
  return fallback_cache_dir();
}

std::string fallback_cache_dir() { return "/tmp/memfit-cache-" + std::to_string(getuid()); }

FileStamp stamp_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(path + ": cannot stat: " + errno_text());
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) abs = fs::absolute(path);
  return {abs.string(), uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

std::string hex16(uint64_t h) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string ensure_cache_dir(const std::string& dir_in, const std::string& what, const std::string& hint) {
  const std::string dir = dir_in.empty() ? fallback_cache_dir() : dir_in;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    throw std::runtime_error("cannot create the " + what + " directory " + dir + ": " +
                             (ec ? ec.message() : std::string("not a directory")) + hint);
  return dir;
}

AtomicFile::AtomicFile(std::string path, std::string what, std::string hint)
    : path_(std::move(path)), what_(std::move(what)), hint_(std::move(hint)) {
  remove_stale_temps(fs::path(path_));
  static std::atomic<unsigned> counter{0};
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot write the " + what_ + " in " + fs::path(path_).parent_path().string() + " (" +
                             tmp_ + "): " + errno_text() + hint_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(tmp_ + ": cannot write the " + what_ + ": " + errno_text() + hint_);
    }
    p += w;
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) throw std::runtime_error(tmp_ + ": fsync failed: " + errno_text());
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw std::runtime_error(tmp_ + ": cannot write: " + errno_text() + hint_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp_ + " to " + path_ + ": " + errno_text());
  committed_ = true;
  // Make the rename itself durable.
  const std::string dir = fs::path(path_).parent_path().string();
  if (int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace memfit::data
