// safetensors reader and writer.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the raw tensor bytes (little-endian, row-major); offsets are relative to
// the first byte after the header. Files memfit writes load in PyTorch through
// the `safetensors` package as is, and vice versa.
//
// The reader trusts nothing: every size, offset and dtype is checked before a
// byte of tensor data is handed out, and each failure names the file and the
// problem. The writer is atomic: a crash or a full disk leaves either the old
// file or the new one at `path`, never a torn one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memfit::io {

enum class DType { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

// Bytes per element.
size_t dtype_size(DType dt);
// The header spelling: "F32", "BF16", ...
std::string_view dtype_name(DType dt);
// Inverse of dtype_name; nullopt for a name memfit does not know.
std::optional<DType> parse_dtype(std::string_view name);

// One tensor to write. `data` points at numel * dtype_size(dtype) bytes in
// row-major order, little-endian (the host order on every target memfit
// supports); it may be null only when the tensor has no elements.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  // Where data is null: the bytes come in pieces from this (bytes
  // [offset, offset + n) into dst), through a small buffer: a tensor that
  // is not in memory (the offload tier) is written without a copy of it.
  std::function<void(size_t offset, void* dst, size_t n)> read;
};

// Writes `tensors` (in the given order) and `metadata` to `path` atomically:
// the bytes go to `path + ".tmp"`, which is fsynced, renamed over `path`, and
// the directory is fsynced. The header is padded with spaces so tensor data
// starts at an 8-byte aligned file offset. Throws std::invalid_argument for a
// bad tensor list (empty or duplicate name, negative dimension, null data) and
// std::runtime_error naming the path and strerror when any file operation
// fails; then the temp file is removed and an earlier file at `path` is left
// as it was.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// One tensor described by a loaded header. `begin`/`end` are byte offsets
// relative to the start of the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(end - begin); }
};

// A loaded, validated safetensors file. The file is memory-mapped read-only,
// so loading costs no copy and untouched tensors cost no resident memory.
// Tensor data is in the file's byte order (little-endian) and is aligned only
// as the writer aligned it: memfit's files give 8-byte alignment, other
// writers may not, so copy out with memcpy rather than casting the pointer
// when in doubt. Move-only.
class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws std::runtime_error whose message starts
  // with the path and names the problem (truncated file, header length past
  // the end, malformed JSON, unknown dtype, offsets out of range, overlapping
  // or not matching shape x dtype, ...).
  static SafetensorsFile load(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // nullptr when the file holds no tensor of that name.
  const TensorInfo* find(const std::string& name) const;
  // Like find, but throws std::runtime_error naming the file and tensor.
  const TensorInfo& at(const std::string& name) const;
  // Tensor names in header order.
  std::vector<std::string> names() const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Pointer to the first byte of `info`'s data; `info` must come from this file.
  const void* data(const TensorInfo& info) const;
  // Drops the resident pages that hold bytes [from, to) of `info`'s data;
  // touching them again reads them back from the file. A reader streaming
  // through a large file this way keeps only what it is reading resident.
  void drop_pages(const TensorInfo& info, size_t from, size_t to) const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  void release();

  std::string path_;
  const uint8_t* map_ = nullptr;  // whole file, read-only mapping
  size_t map_size_ = 0;
  size_t data_start_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace memfit::io
