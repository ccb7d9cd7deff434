// memfit's on-disk caches (the raw IDX cache, the token cache): where they
// live, how their names are keyed, and how one is written so that a crash
// never leaves a half-written file under the final name (a temporary name
// next to it, fsync'ed, renamed, the directory fsync'ed).
#pragma once

#include <cstdint>
#include <string>

namespace memfit::data {

// Where the caches live when the run names no directory. The command reads
// the environment once (src/cli/environment.hpp) and passes what it found;
// nothing below the command reads the environment.
struct CacheDirSources {
  std::string memfit_cache_dir;  // $MEMFIT_CACHE_DIR
  std::string xdg_cache_home;    // $XDG_CACHE_HOME
  std::string home;              // $HOME
};
// s.memfit_cache_dir when not empty, else <xdg_cache_home>/memfit when it is
// absolute, else <home>/.cache/memfit (home, else the password database's
// entry of this user), else fallback_cache_dir().
std::string cache_dir_for(const CacheDirSources& s);
// /tmp/memfit-cache-<uid>: the directory "" means to the layers below the
// command (a library caller that names none; the command always names one).
std::string fallback_cache_dir();

// A cache file's identity of a source file: its absolute path (links
// resolved where they exist), size and modification time in nanoseconds.
// Throws std::runtime_error naming the file when it cannot be stat'ed.
struct FileStamp {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
FileStamp stamp_of(const std::string& path);

// 16 lower-case hex digits: the part of a cache file's name that keys it.
std::string hex16(uint64_t h);

// Creates the cache directory `dir` ("" = fallback_cache_dir()) and returns
// it. Throws std::runtime_error naming it (and `hint`) when it cannot be made.
std::string ensure_cache_dir(const std::string& dir, const std::string& what, const std::string& hint);

// A file written under a temporary name next to `path` ("<path>.tmp.<pid>.<n>")
// and renamed to `path` by commit(). Temporary files of `path` that a
// crashed build left (unmodified for 10 minutes) are removed first. Destroyed
// uncommitted, it removes its temporary file. Errors throw
// std::runtime_error naming the files, `what` ("dataset cache") and `hint`.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string what, std::string hint = "");
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  int fd() const { return fd_; }
  const std::string& temp_path() const { return tmp_; }
  // Writes all n bytes (retrying short writes).
  void write(const void* data, size_t n);
  // fsync, close, rename into place, fsync the directory.
  void commit();

 private:
  std::string path_, tmp_, what_, hint_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace memfit::data
