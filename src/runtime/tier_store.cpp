#include "runtime/tier_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace memfit {

namespace {

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

std::string errno_text(int e) { return std::strerror(e); }

uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 31);
}

}  // namespace

uint64_t sector_checksum(const std::byte* p, size_t n) {
  // Four independent lanes (so the multiplies overlap), folded at the end.
  uint64_t a = 0x243F6A8885A308D3ull, b = 0x13198A2E03707344ull, c = 0xA4093822299F31D0ull, d = 0x082EFA98EC4E6C89ull;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    a = mix(a, w[0]);
    b = mix(b, w[1]);
    c = mix(c, w[2]);
    d = mix(d, w[3]);
  }
  return mix(mix(mix(mix(n, a), b), c), d);
}

TierStore::TierStore(const std::string& dir, const std::vector<Block>& blocks, const Keep& keep) {
  static std::atomic<int> counter{0};
  const bool reopen = !keep.reopen.empty();
  if (dir.empty() && !reopen)
    throw std::runtime_error("tiered values need a directory for their offload file (--offload-dir)");
  // Each block in whole sectors of its own; a kept store's rewritten
  // blocks twice, their two copies side by side.
  auto lay_out = [&](bool two) {
    blocks_.clear();
    order_.clear();
    file_bytes_ = 0;
    for (const Block& b : blocks) {
      if (blocks_.count(b.name)) throw std::logic_error("offload tier: block '" + b.name + "' given twice");
      Entry e;
      e.bytes = b.bytes;
      const size_t span = round_up(std::max<size_t>(b.bytes, 1), kSector);
      e.offset[0] = e.offset[1] = file_bytes_;
      file_bytes_ += span;
      if (two && b.rewritten) {
        e.offset[1] = file_bytes_;
        file_bytes_ += span;
      }
      blocks_[b.name] = e;
      order_.push_back(b.name);
    }
  };
  kept_ = keep.keep || reopen;
  lay_out(kept_);
  auto open_direct = [&](int flags) {
    fd_ = ::open(path_.c_str(), flags | O_DIRECT, 0600);
    direct_ = fd_ >= 0;
    if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path_.c_str(), flags, 0600);
  };
  if (reopen) {
    awaiting_adopt_ = true;
    path_ = keep.reopen;
    open_direct(O_RDWR | O_CLOEXEC);
    if (fd_ < 0)
      throw std::runtime_error("cannot open the offload file " + path_ + " to resume from: " + errno_text(errno));
    struct stat sb {};
    if (::fstat(fd_, &sb) != 0 || static_cast<size_t>(sb.st_size) != file_bytes_) {
      const size_t size = static_cast<size_t>(sb.st_size);
      ::close(fd_);
      throw std::runtime_error("the offload file " + path_ + " holds " + std::to_string(size) + " bytes, this run's " +
                               std::to_string(file_bytes_) + ": it is not this run's offload file");
    }
  } else {
    const auto ns = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = dir + "/memfit-offload-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
            (kept_ ? "-" + std::to_string(ns) : std::string()) + ".bin";
    open_direct(O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC);
    if (fd_ < 0)
      throw std::runtime_error("cannot make the offload file in '" + dir + "': " + errno_text(errno) +
                               " (--offload-dir names a writable directory on a disk)");
    if (!kept_) ::unlink(path_.c_str());
    int e = file_bytes_ ? ::posix_fallocate(fd_, 0, static_cast<off_t>(file_bytes_)) : 0;
    if (e == ENOSPC && kept_) {  // room for one copy only: unkept
      kept_ = false;
      ::unlink(path_.c_str());
      if (::ftruncate(fd_, 0) != 0) e = errno;
      lay_out(false);
      e = file_bytes_ ? ::posix_fallocate(fd_, 0, static_cast<off_t>(file_bytes_)) : 0;
    }
    if (e != 0) {
      ::close(fd_);
      if (kept_) ::unlink(path_.c_str());
      throw std::runtime_error("cannot reserve " + std::to_string(file_bytes_ >> 20) + " MiB for the offload file in '" +
                               dir + "': " + errno_text(e) +
                               (e == ENOSPC ? " (the disk has less free space; --offload-dir on another disk)" : ""));
    }
  }
  if (::posix_memalign(reinterpret_cast<void**>(&buf_), 4096, kBuffer) != 0) {
    ::close(fd_);
    throw std::bad_alloc();
  }
  // fallocate's blocks read as zeros (a reopened file's sums come from adopt()).
  if (!reopen)
    for (auto& [name, e] : blocks_) e.zeros = true;
  std::memset(buf_, 0, kSector);
  sums_.assign(file_bytes_ / kSector, sector_checksum(buf_, kSector));
  ring_.resize(kQueue);
  io_ = std::thread([this] { io_loop(); });
}

TierStore::TierStore(const std::string& dir, const std::vector<Block>& blocks) : TierStore(dir, blocks, Keep{}) {}

TierStore::~TierStore() {
  cancel();
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  if (io_.joinable()) io_.join();
  if (fd_ >= 0) ::close(fd_);
  std::free(buf_);
}

size_t TierStore::block_bytes(const std::string& block) const {
  auto it = blocks_.find(block);
  if (it == blocks_.end()) throw std::logic_error("offload tier: no block '" + block + "'");
  return it->second.bytes;
}

TierStore::Entry& TierStore::entry(const std::string& block, size_t offset, size_t bytes, const char* what) {
  auto it = blocks_.find(block);
  if (it == blocks_.end()) throw std::logic_error(std::string("offload tier: ") + what + " of unknown block '" + block + "'");
  if (offset > it->second.bytes || bytes > it->second.bytes - offset)
    throw std::logic_error(std::string("offload tier: ") + what + " of bytes " + std::to_string(offset) + "+" +
                           std::to_string(bytes) + " of '" + block + "', which holds " +
                           std::to_string(it->second.bytes));
  return it->second;
}

void TierStore::pread_all(std::byte* dst, size_t n, size_t at) {
  while (n) {
    const ssize_t r = ::pread(fd_, dst, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw std::runtime_error("reading the offload file " + path_ + " failed: " +
                               (r < 0 ? errno_text(errno) : std::string("it is shorter than its blocks")));
    dst += r;
    at += static_cast<size_t>(r);
    n -= static_cast<size_t>(r);
  }
}

void TierStore::pwrite_all(const std::byte* src, size_t n, size_t at) {
  while (n) {
    const ssize_t r = ::pwrite(fd_, src, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = r < 0 ? errno : ENOSPC;
      throw std::runtime_error("writing the offload file " + path_ + " failed: " + errno_text(e) +
                               (e == ENOSPC ? " (the disk is full; the last checkpoint is untouched)" : ""));
    }
    src += r;
    at += static_cast<size_t>(r);
    n -= static_cast<size_t>(r);
  }
}

void TierStore::do_read(const Entry& e, const std::string& block, size_t offset, std::byte* out, size_t bytes,
                        const kernels::BufferCopies* via) {
  size_t pos = offset;  // within the block
  const size_t end = offset + bytes;
  while (pos < end) {
    const size_t s0 = pos / kSector * kSector;  // first sector of this chunk, within the block
    const size_t len = std::min(kBuffer, round_up(end, kSector) - s0);
    const size_t at = e.offset[e.current];
    pread_all(buf_, len, at + s0);
    for (size_t s = 0; s < len; s += kSector) {
      const size_t sector = (at + s0 + s) / kSector;
      if (sector_checksum(buf_ + s, kSector) != sums_[sector])
        throw std::runtime_error("the offload file " + path_ + " returned bytes that differ from those written to it (" +
                                 block + ", bytes " + std::to_string(s0 + s) + "+" + std::to_string(kSector) +
                                 "): the disk or its filesystem is failing");
    }
    const size_t take = std::min(end, s0 + len) - pos;
    if (via) via->to_buffer(out, buf_ + (pos - s0), take);
    else std::memcpy(out, buf_ + (pos - s0), take);
    out += take;
    pos += take;
  }
  read_ += bytes;
}

void TierStore::do_write(Entry& e, const std::string& block, size_t offset, const std::byte* in, size_t bytes,
                         bool step, const kernels::BufferCopies* via) {
  if (awaiting_adopt_)
    throw std::logic_error("offload tier: '" + block + "' written in a reopened offload file before its step record "
                           "was adopted");
  if (step && kept_) {
    if (e.offset[0] == e.offset[1])
      throw std::logic_error("offload tier: a step writes '" + block + "', which has one copy in the kept file");
    e.current = static_cast<uint8_t>(1 - e.committed);
  }
  e.zeros = false;
  const size_t at = e.offset[e.current];
  size_t pos = offset;
  const size_t end = offset + bytes;
  while (pos < end) {
    const size_t s0 = pos / kSector * kSector;
    const size_t len = std::min(kBuffer, round_up(end, kSector) - s0);
    const size_t take = std::min(end, s0 + len) - pos;
    // Sectors this write covers only in part keep their other bytes: read
    // (and check) them first. Bytes past the block's end stay zero.
    const bool whole = pos == s0 && (pos + take == s0 + len || pos + take == e.bytes);
    if (!whole) {
      pread_all(buf_, len, at + s0);
      for (size_t s = 0; s < len; s += kSector)
        if (sector_checksum(buf_ + s, kSector) != sums_[(at + s0 + s) / kSector])
          throw std::runtime_error("the offload file " + path_ + " returned bytes that differ from those written to it (" +
                                   block + "): the disk or its filesystem is failing");
    } else if (take < len) {
      std::memset(buf_ + take, 0, len - take);
    }
    if (via) via->from_buffer(buf_ + (pos - s0), in, take);
    else std::memcpy(buf_ + (pos - s0), in, take);
    for (size_t s = 0; s < len; s += kSector) sums_[(at + s0 + s) / kSector] = sector_checksum(buf_ + s, kSector);
    pwrite_all(buf_, len, at + s0);
    in += take;
    pos += take;
  }
  written_ += bytes;
}

void TierStore::read_range(const std::string& block, size_t offset, void* dst, size_t bytes) {
  Entry& e = entry(block, offset, bytes, "read");
  drain();
  std::lock_guard<std::mutex> lock(mu_);
  do_read(e, block, offset, static_cast<std::byte*>(dst), bytes);
}

void TierStore::write_range(const std::string& block, size_t offset, const void* src, size_t bytes) {
  Entry& e = entry(block, offset, bytes, "write");
  drain();
  std::lock_guard<std::mutex> lock(mu_);
  do_write(e, block, offset, static_cast<const std::byte*>(src), bytes, false);
}

void TierStore::enqueue(bool write, const std::string& block, std::byte* buffer, size_t bytes,
                        const kernels::BufferCopies* via) {
  auto it = blocks_.find(block);
  if (it == blocks_.end()) throw std::logic_error("offload tier: queuing a copy of unknown block '" + block + "'");
  if (bytes != it->second.bytes)
    throw std::logic_error("offload tier: queuing " + std::to_string(bytes) + " bytes of '" + block + "', which holds " +
                           std::to_string(it->second.bytes));
  std::unique_lock<std::mutex> lock(q_mu_);
  if (queued_ - done_ >= kQueue) done_cv_.wait(lock, [&] { return queued_ - done_ < kQueue; });
  if (error_) std::rethrow_exception(error_);
  const uint64_t seq = ++queued_;
  ring_[seq % kQueue] = {write, &it->second, &it->first, buffer, bytes, seq, via};
  q_cv_.notify_one();
}

void TierStore::read_async(const std::string& block, void* dst, size_t bytes, const kernels::BufferCopies* via) {
  enqueue(false, block, static_cast<std::byte*>(dst), bytes, via);
}

void TierStore::write_async(const std::string& block, const void* src, size_t bytes,
                            const kernels::BufferCopies* via) {
  // (The I/O thread only reads a write's buffer.)
  enqueue(true, block, static_cast<std::byte*>(const_cast<void*>(src)), bytes, via);
}

void TierStore::io_loop() {
  std::unique_lock<std::mutex> lock(q_mu_);
  for (;;) {
    q_cv_.wait(lock, [this] { return stop_ || queued_ > done_; });
    if (queued_ == done_) return;  // stopping, nothing left
    const Copy c = ring_[(done_ + 1) % kQueue];
    lock.unlock();
    std::exception_ptr err;
    try {
      std::lock_guard<std::mutex> file(mu_);
      if (c.write) do_write(*c.e, *c.block, 0, c.buffer, c.bytes, true, c.via);
      else do_read(*c.e, *c.block, 0, c.buffer, c.bytes, c.via);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    done_ = c.seq;
    if (err && !error_) {
      error_ = err;
      done_ = queued_;  // the copies after it are dropped: done, as far as their waiters go
    }
    done_cv_.notify_all();
  }
}

void TierStore::wait_until(std::unique_lock<std::mutex>& lock, uint64_t seq) {
  if (done_ < seq) {
    const auto t0 = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return done_ >= seq; });
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (error_) std::rethrow_exception(error_);
}

void TierStore::wait(const void* buffer) {
  std::unique_lock<std::mutex> lock(q_mu_);
  uint64_t seq = 0;  // the last copy queued on this buffer and not done
  for (uint64_t q = queued_; q > done_; --q)
    if (ring_[q % kQueue].buffer == buffer) {
      seq = q;
      break;
    }
  wait_until(lock, seq);
}

void TierStore::drain() {
  std::unique_lock<std::mutex> lock(q_mu_);
  wait_until(lock, queued_);
}

void TierStore::cancel() noexcept {
  std::unique_lock<std::mutex> lock(q_mu_);
  if (queued_ == done_) return;
  // The first may be running: wait for it; drop the rest.
  queued_ = done_ + 1;
  done_cv_.wait(lock, [&] { return done_ >= queued_; });
}

double TierStore::wait_seconds() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(q_mu_));
  return wait_seconds_;
}

void TierStore::read(const std::string& block, void* dst, size_t bytes, const kernels::BufferCopies* via) {
  if (bytes != block_bytes(block))
    throw std::logic_error("offload tier: reading " + std::to_string(bytes) + " bytes of '" + block + "', which holds " +
                           std::to_string(block_bytes(block)));
  Entry& e = entry(block, 0, bytes, "read");
  drain();
  std::lock_guard<std::mutex> lock(mu_);
  do_read(e, block, 0, static_cast<std::byte*>(dst), bytes, via);
}

void TierStore::write(const std::string& block, const void* src, size_t bytes, const kernels::BufferCopies* via) {
  if (bytes != block_bytes(block))
    throw std::logic_error("offload tier: writing " + std::to_string(bytes) + " bytes of '" + block + "', which holds " +
                           std::to_string(block_bytes(block)));
  Entry& e = entry(block, 0, bytes, "write");
  drain();
  std::lock_guard<std::mutex> lock(mu_);
  do_write(e, block, 0, static_cast<const std::byte*>(src), bytes, true, via);
}

TierStore::Committed TierStore::sync() {
  drain();
  std::lock_guard<std::mutex> lock(mu_);
  if (::fdatasync(fd_) != 0)
    throw std::runtime_error("flushing the offload file " + path_ + " to the disk failed: " + errno_text(errno));
  Committed c;
  c.slots.reserve(order_.size());
  for (const std::string& b : order_) c.slots.push_back(blocks_.at(b).current);
  c.sums = sums_;
  return c;
}

void TierStore::commit() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, e] : blocks_) e.committed = e.current;
}

void TierStore::adopt(const Committed& c) {
  if (c.slots.size() != order_.size() || c.sums.size() != sums_.size())
    throw std::runtime_error("the offload file " + path_ + " and its step record disagree on its layout");
  drain();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < order_.size(); ++i) {
    Entry& e = blocks_.at(order_[i]);
    if (c.slots[i] > 1 || (c.slots[i] == 1 && e.offset[0] == e.offset[1]))
      throw std::runtime_error("the offload file " + path_ + "'s step record names a copy of '" + order_[i] +
                               "' that the file does not have");
    e.committed = e.current = c.slots[i];
  }
  sums_ = c.sums;
  for (const std::string& name : order_) {
    const Entry& e = blocks_.at(name);
    const size_t at = e.offset[e.current], span = round_up(std::max<size_t>(e.bytes, 1), kSector);
    for (size_t s0 = 0; s0 < span; s0 += kBuffer) {
      const size_t len = std::min(kBuffer, span - s0);
      pread_all(buf_, len, at + s0);
      for (size_t s = 0; s < len; s += kSector)
        if (sector_checksum(buf_ + s, kSector) != sums_[(at + s0 + s) / kSector])
          throw std::runtime_error("the offload file " + path_ + " differs from what its step record says ('" + name +
                                   "', bytes " + std::to_string(s0 + s) + "+" + std::to_string(kSector) +
                                   "): it was changed after that step");
    }
  }
  awaiting_adopt_ = false;
}

std::string TierStore::layout() const {
  std::string text = std::to_string(file_bytes_);
  for (const std::string& name : order_) {
    const Entry& e = blocks_.at(name);
    text += ";" + name + ":" + std::to_string(e.bytes) + "@" + std::to_string(e.offset[0]) + "," +
            std::to_string(e.offset[1]);
  }
  return text;
}

void TierStore::fill(const std::string& block, uint8_t byte) {
  const size_t n = block_bytes(block);
  if (byte == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (blocks_.at(block).zeros) return;
  }
  std::vector<std::byte> chunk(std::min(n, kBuffer), std::byte{byte});
  for (size_t at = 0; at < n; at += chunk.size()) write_range(block, at, chunk.data(), std::min(chunk.size(), n - at));
}

bool ram_backed(const std::string& dir) {
  struct statfs f {};
  if (::statfs(dir.c_str(), &f) != 0) return false;
  return f.f_type == TMPFS_MAGIC || f.f_type == RAMFS_MAGIC;
}

TierSpeed measure_tier_speed(const std::string& dir, size_t bytes) {
  TierStore store(dir, {{"probe", bytes}});
  std::vector<unsigned char> piece(kTierIoBufferBytes);
  for (size_t i = 0; i < piece.size(); ++i) piece[i] = static_cast<unsigned char>(i * 31 + 1);
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  auto t = clock::now();
  for (size_t at = 0; at < bytes; at += piece.size())
    store.write_range("probe", at, piece.data(), std::min(piece.size(), bytes - at));
  ::fdatasync(store.fd());
  TierSpeed s;
  s.write_bytes_per_second = static_cast<double>(bytes) / std::max(seconds(t), 1e-6);
  t = clock::now();
  for (size_t at = 0; at < bytes; at += piece.size())
    store.read_range("probe", at, piece.data(), std::min(piece.size(), bytes - at));
  s.read_bytes_per_second = static_cast<double>(bytes) / std::max(seconds(t), 1e-6);
  return s;
}

}  // namespace memfit
