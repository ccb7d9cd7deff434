// A bounded reader for the Python pickles CIFAR ships (cifar-10-batches-py,
// cifar-100-python), that never runs pickle code.
//
// It understands exactly the structure those files have: protocol 2 (as
// Python 2's cPickle wrote them; protocol 3's bytes opcodes are taken too),
// dicts, lists, tuples, ints, None, booleans, strings, the memo, and numpy
// arrays as numpy pickles them:
//   GLOBAL numpy.core.multiarray._reconstruct (or numpy._core...), GLOBAL
//   numpy.ndarray, REDUCE, then BUILD with the state (version, shape,
//   dtype, fortran, raw bytes), the dtype itself GLOBAL numpy.dtype +
//   REDUCE ('u1', 0, 1) + BUILD.
// Any other opcode, any other global, a REDUCE or BUILD of anything else is
// refused with a std::runtime_error naming the file and the byte offset of
// the opcode. Nothing is called or imported: a GLOBAL is a name compared
// with the three above.
//
// Bounds: at most Limits::max_ops opcodes (every value, container entry
// and memo slot comes from one), memo indices below max_ops, strings longer
// than max_inline_string kept as a span of the file (offset, length: the
// array's pixel bytes are read later, straight into their final buffer),
// shorter ones copied, at most max_inline_bytes in all; every length is
// checked against what the file still holds before anything is read. The
// file is read through one 64 KiB buffer; long strings are skipped, not
// read. So a parse costs O(file size) time and O(max_ops) memory, whatever
// the bytes say.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memfit::data::pickle {

enum class Kind : uint8_t { None, Bool, Int, Str, List, Tuple, Dict, Global, Dtype, Array };

// The numpy names a GLOBAL may name.
enum class Global : uint8_t { Reconstruct = 1, Ndarray, Dtype };

struct Limits {
  uint64_t max_ops = uint64_t(1) << 20;           // CIFAR-100's train: ~0.2 M
  uint64_t max_inline_string = 4096;              // longer: a span of the file
  uint64_t max_inline_bytes = uint64_t(1) << 24;  // all copied strings together
};

struct Value {
  Kind kind = Kind::None;
  bool built = false;    // Dtype/Array: their BUILD has run
  uint32_t sub = 0;      // List/Tuple/Dict: index into Tree::lists; Str (inline), Dtype: into Tree::strings;
                         // Array: the shape tuple's id
  int64_t i = 0;         // Int, Bool; Global: its Global
  uint64_t off = 0;      // Str, Array: where the bytes start in the file
  uint64_t len = 0;      // Str, Array: how many
  bool inline_str = false;  // Str: its bytes are in Tree::strings[sub]
};

// A parsed pickle: values by id, the root's id.
struct Tree {
  std::string path;
  std::vector<Value> values;
  std::vector<std::vector<uint32_t>> lists;  // List/Tuple items; Dict: key, value, key, value ...
  std::vector<std::string> strings;
  uint32_t root = 0;
  uint64_t file_size = 0;

  const Value& at(uint32_t id) const { return values[id]; }
  // A Str's bytes when they were copied (nullptr for a span of the file).
  const std::string* text(uint32_t id) const;
  // The value of a Dict's entry whose key is the string `key`; -1 when none
  // (or when d is not a Dict).
  int64_t find(uint32_t dict, const std::string& key) const;
  const std::vector<uint32_t>& items(uint32_t id) const { return lists[values[id].sub]; }
};

// Parses the pickle at path. Throws std::runtime_error "<path>: byte N: ..."
// for anything outside the structure above, a truncated file, a limit
// exceeded, or data after STOP.
Tree read(const std::string& path, const Limits& limits = {});

}  // namespace memfit::data::pickle
