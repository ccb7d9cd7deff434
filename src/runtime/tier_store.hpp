// The offload tier's store: one file on disk holding the tiered values
// (memfit/tier.hpp), each in whole sectors of its own, every sector with a
// checksum that each read verifies. The file is opened with O_DIRECT where
// the filesystem allows it, so that its bytes pass through a small aligned
// buffer and never through the page cache (which a memory cgroup would
// charge to the run); its space is reserved when it is made, so a disk too
// small fails then, not in the middle of a step. The file is unlinked as
// soon as it is open: it lives as long as the store, and a run that is
// killed leaves nothing behind (its checkpoints hold the tiered values).
//
// A kept store (Keep::keep) is the run's state on disk instead: its file
// stays (memfit-offload-<id>.bin in the directory) and every block a step
// rewrites has two copies in it. A step reads a block's current copy and
// writes the other one, never the committed copy; sync() makes the step's
// writes durable and says which copy of each block is current, and once
// that has been recorded (persist/checkpoint.hpp's step record) commit()
// makes it the committed one. A kill in the middle of a step leaves the
// committed copies as they were: the file reopened (Keep::reopen) with the
// recorded state (adopt()) is the state after the last whole step.
//
// Async copies (read_async, write_async) run on one I/O thread of the
// store, in the order they were queued, through its one buffer; the
// synchronous calls first wait for the queue to empty, so they see every
// queued write. An error on the I/O thread (a full disk, a failed checksum)
// drops the copies queued after it and is thrown by every wait from then
// on: the step stops there, as it would have had the copy been synchronous.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/tier.hpp"

namespace memfit {

// Bytes per second the offload tier moves, read and written.
struct TierSpeed {
  double read_bytes_per_second = 0, write_bytes_per_second = 0;
  // The room the tier's directory has for the file (its file system's
  // available bytes); 0 = not known, not checked.
  size_t available_bytes = 0;
  bool measured() const { return read_bytes_per_second > 0 && write_bytes_per_second > 0; }
};

class TierStore final : public kernels::TierIO {
 public:
  struct Block {
    std::string name;
    size_t bytes = 0;
    bool rewritten = true;  // a step writes it (a kept store gives it two copies)
  };
  struct Keep {
    bool keep = false;   // keep the file, two copies of each rewritten block
    std::string reopen;  // a kept store's file to open again (resume): not made anew
  };
  // A kept store's committed state: which copy of each block is current (in
  // the order of the blocks given) and every sector's checksum.
  struct Committed {
    std::vector<uint8_t> slots;
    std::vector<uint64_t> sums;
  };
  // Bytes per checksummed sector, and of the buffer I/O passes through.
  static constexpr size_t kSector = size_t(64) << 10;
  static constexpr size_t kBuffer = kTierIoBufferBytes;

  // Makes the file in `dir` for these blocks, filled with zeros. Throws
  // std::runtime_error naming the directory and the cause (missing, not
  // writable, not enough space). A kept store on a disk that cannot hold
  // the second copies falls back to one copy, unkept (kept() says).
  // Reopening checks the file's size; adopt() then checks its bytes.
  TierStore(const std::string& dir, const std::vector<Block>& blocks, const Keep& keep);
  TierStore(const std::string& dir, const std::vector<Block>& blocks);
  ~TierStore() override;
  TierStore(const TierStore&) = delete;
  TierStore& operator=(const TierStore&) = delete;

  // A whole block (the tier kernels).
  // (`via`: how to reach a buffer in memory the host cannot address,
  // kernels::BufferCopies; null for host memory.)
  void read(const std::string& block, void* dst, size_t bytes, const kernels::BufferCopies* via = nullptr) override;
  void write(const std::string& block, const void* src, size_t bytes,
             const kernels::BufferCopies* via = nullptr) override;
  void read_async(const std::string& block, void* dst, size_t bytes,
                  const kernels::BufferCopies* via = nullptr) override;
  void write_async(const std::string& block, const void* src, size_t bytes,
                   const kernels::BufferCopies* via = nullptr) override;
  void wait(const void* buffer) override;
  // Waits for every queued copy; throws the error one of them met.
  void drain();
  // Drops the queued copies that have not started and waits for the one
  // that has (a step that stopped: its buffers are about to go). The
  // store's error, if any, stays.
  void cancel() noexcept;
  // Bytes [offset, offset + bytes) of a block (host access outside a step:
  // initial values, checkpoints).
  void read_range(const std::string& block, size_t offset, void* dst, size_t bytes);
  void write_range(const std::string& block, size_t offset, const void* src, size_t bytes);
  // (Zeros into a block never written since the file was made cost no I/O:
  // a fresh file reads as zeros.)
  void fill(const std::string& block, uint8_t byte);

  // Kept stores. sync(): waits for the queued copies and flushes the file;
  // returns the state to record. commit(): that state becomes the committed
  // one (the next writes go to the other copies). adopt(): a reopened
  // store takes the recorded state and checks every committed sector
  // against it (std::runtime_error naming the file otherwise).
  bool kept() const { return kept_; }
  Committed sync();
  void commit();
  void adopt(const Committed& c);
  // The blocks' names, sizes and places in the file, as text a record keeps
  // to check that a reopened file is laid out as this store's.
  std::string layout() const;

  bool has(const std::string& block) const { return blocks_.count(block) != 0; }
  size_t block_bytes(const std::string& block) const;
  size_t file_bytes() const { return file_bytes_; }
  // Bytes of blocks read and written so far (as asked, not the sectors).
  uint64_t bytes_read() const { return read_.load(); }
  uint64_t bytes_written() const { return written_.load(); }
  // Seconds the callers of wait() and drain() spent waiting for the I/O
  // thread (the I/O a step did not hide behind its compute).
  double wait_seconds() const;
  bool direct_io() const { return direct_; }
  const std::string& path() const { return path_; }
  // The open file (tests change a byte of it on disk through this).
  int fd() const { return fd_; }
  // Bytes of memory the store holds (its I/O buffer).
  static constexpr size_t memory_bytes() { return kBuffer; }

 private:
  struct Entry {
    size_t offset[2] = {0, 0};  // the block's copies (the same where it has one)
    size_t bytes = 0;
    uint8_t committed = 0, current = 0;  // which copy (mu_)
    bool zeros = false;  // never written in a file made fresh: reads as zeros (mu_)
  };
  struct Copy {
    bool write = false;
    Entry* e = nullptr;
    const std::string* block = nullptr;  // its key in blocks_
    std::byte* buffer = nullptr;
    size_t bytes = 0;
    uint64_t seq = 0;
    const kernels::BufferCopies* via = nullptr;
  };
  // Copies queued and not yet done at most (enqueue waits for room): the
  // queue is a ring made with the store, so that queuing allocates nothing
  // inside a step.
  static constexpr size_t kQueue = 512;
  Entry& entry(const std::string& block, size_t offset, size_t bytes, const char* what);
  void pread_all(std::byte* dst, size_t n, size_t at);
  void pwrite_all(const std::byte* src, size_t n, size_t at);
  // The copies themselves (mu_ held).
  void do_read(const Entry& e, const std::string& block, size_t offset, std::byte* dst, size_t bytes,
               const kernels::BufferCopies* via = nullptr);
  // A step's write (whole blocks) goes to the copy that is not committed;
  // a write outside a step, to the current copy.
  void do_write(Entry& e, const std::string& block, size_t offset, const std::byte* src, size_t bytes, bool step,
                const kernels::BufferCopies* via = nullptr);
  void enqueue(bool write, const std::string& block, std::byte* buffer, size_t bytes,
               const kernels::BufferCopies* via);
  void io_loop();
  // Waits until copies up to `seq` are done (q_mu_ held by `lock`).
  void wait_until(std::unique_lock<std::mutex>& lock, uint64_t seq);

  int fd_ = -1;
  bool direct_ = false, kept_ = false;
  bool awaiting_adopt_ = false;  // reopened: no write before adopt()
  std::string path_;
  std::vector<std::string> order_;  // the blocks as given
  size_t file_bytes_ = 0;
  std::unordered_map<std::string, Entry> blocks_;
  std::vector<uint64_t> sums_;  // per sector of the file
  std::byte* buf_ = nullptr;    // kBuffer bytes, page-aligned
  std::mutex mu_;  // the file and buf_
  std::atomic<uint64_t> read_{0}, written_{0};

  // The I/O thread's queue (under q_mu_).
  std::mutex q_mu_;
  std::condition_variable q_cv_, done_cv_;
  // ring_[seq % kQueue] holds copy seq for done_ < seq <= queued_; copy
  // done_ + 1 is the one the I/O thread works on (or will next).
  std::vector<Copy> ring_;
  uint64_t queued_ = 0, done_ = 0;  // copies queued, finished (in order)
  std::exception_ptr error_;
  bool stop_ = false;
  double wait_seconds_ = 0;
  std::thread io_;
};

// The checksum of one sector's bytes (n a multiple of 32).
uint64_t sector_checksum(const std::byte* p, size_t n);

// Whether `dir` lies on a file system kept in memory (tmpfs, ramfs): an
// offload file there takes the memory it was meant to free.
bool ram_backed(const std::string& dir);

// Measures the tier's speed in `dir`: a store of `bytes` written, then read
// back, through the same path the steps use (O_DIRECT where allowed,
// checksums), a 1 MiB piece at a time. Throws std::runtime_error where the
// directory cannot hold the file.
TierSpeed measure_tier_speed(const std::string& dir, size_t bytes = size_t(64) << 20);

}  // namespace memfit
