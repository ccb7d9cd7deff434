#include "data/pickle.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "data/regular_file.hpp"

namespace memfit::data::pickle {
namespace {

constexpr uint32_t kNoValue = UINT32_MAX;

// Names of the pickle opcodes this reader refuses, for the error message.
const char* opcode_name(uint8_t op) {
  switch (op) {
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'G': return "BINFLOAT";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'd': return "DICT";
    case 'g': return "GET";
    case 'i': return "INST";
    case 'l': return "LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

std::string hex8(uint8_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", v);
  return b;
}

// The file through one buffer, with its position; lengths are checked
// against what is left before anything is read or skipped.
class Source {
 public:
  explicit Source(const std::string& path) : file_(path), path_(path), size_(file_.size()), buf_(size_t(1) << 16) {}
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw std::runtime_error(path_ + ": byte " + std::to_string(at) + ": " + what);
  }

  // Checks that n more bytes exist for `what` (which starts at `at`).
  void need(uint64_t n, uint64_t at, const char* what) const {
    if (n > left())
      fail(at, std::string(what) + " needs " + std::to_string(n) + " bytes but the file holds only " +
                   std::to_string(left()) + " more: truncated or not a CIFAR pickle");
  }

  uint8_t byte(uint64_t at, const char* what) {
    need(1, at, what);
    if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_len_) fill();
    return buf_[pos_++ - buf_start_];
  }

  void read(void* dst, uint64_t n, uint64_t at, const char* what) {
    need(n, at, what);
    auto* p = static_cast<uint8_t*>(dst);
    for (uint64_t k = 0; k < n; ++k) p[k] = byte(at, what);
  }

  uint32_t le32(uint64_t at, const char* what) {
    uint8_t b[4];
    read(b, 4, at, what);
    return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  }

  void skip(uint64_t n, uint64_t at, const char* what) {
    need(n, at, what);
    pos_ += n;
  }

 private:
  void fill() {
    buf_start_ = pos_;
    buf_len_ = 0;
    const size_t want = size_t(std::min<uint64_t>(buf_.size(), size_ - pos_));
    file_.pread_all(buf_.data(), want, pos_);
    buf_len_ = want;
  }

  RegularFile file_;
  std::string path_;
  uint64_t size_ = 0, pos_ = 0, buf_start_ = 0;
  size_t buf_len_ = 0;
  std::vector<uint8_t> buf_;  // 64 KiB
};

class Parser {
 public:
  Parser(const std::string& path, const Limits& limits) : src_(path), lim_(limits) {
    t_.path = path;
    t_.file_size = src_.size();
  }

  Tree run() {
    if (src_.size() < 2) src_.fail(0, "not a pickle (" + std::to_string(src_.size()) + " bytes)");
    uint64_t ops = 0;
    for (;;) {
      at_ = src_.pos();
      const uint8_t op = src_.byte(at_, "an opcode");
      if (++ops > lim_.max_ops)
        fail("more than " + std::to_string(lim_.max_ops) + " opcodes, over what a CIFAR file holds");
      if (ops == 1 && op != 0x80)
        fail("not a protocol-2 pickle (first byte " + hex8(op) + ", expected PROTO 0x80): not a CIFAR "
             "python file");
      if (step(op)) break;
    }
    if (src_.left() != 0)
      src_.fail(src_.pos(), std::to_string(src_.left()) + " bytes after the pickle's STOP: corrupt or not a CIFAR file");
    return std::move(t_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { src_.fail(at_, what); }

  uint32_t add(Value v) {
    t_.values.push_back(v);
    return uint32_t(t_.values.size() - 1);
  }
  uint32_t add_container(Kind k, std::vector<uint32_t> items = {}) {
    t_.lists.push_back(std::move(items));
    Value v;
    v.kind = k;
    v.sub = uint32_t(t_.lists.size() - 1);
    return add(v);
  }
  void push(uint32_t id) { stack_.push_back(id); }

  // The stack floor above the innermost mark.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void need_stack(size_t n, const char* op) const {
    if (stack_.size() - floor() < n)
      fail(std::string(op) + " needs " + std::to_string(n) + " value" + (n == 1 ? "" : "s") +
           " on the stack: corrupt pickle");
  }
  uint32_t pop(const char* op) {
    need_stack(1, op);
    const uint32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  // The values above the innermost mark, and the mark removed.
  std::vector<uint32_t> pop_mark(const char* op) {
    if (marks_.empty()) fail(std::string(op) + " without a MARK: corrupt pickle");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + ptrdiff_t(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Value& top(const char* op) {
    need_stack(1, op);
    return t_.values[stack_.back()];
  }

  void string(uint64_t n, bool unicode) {
    src_.need(n, at_, "a string");
    Value v;
    v.kind = Kind::Str;
    v.off = src_.pos();
    v.len = n;
    v.i = unicode ? 1 : 0;
    if (n <= lim_.max_inline_string) {
      if (inline_bytes_ + n > lim_.max_inline_bytes)
        fail("more than " + std::to_string(lim_.max_inline_bytes) + " bytes of short strings, over what a "
             "CIFAR file holds");
      inline_bytes_ += n;
      std::string s(size_t(n), '\0');
      src_.read(s.data(), n, at_, "a string");
      t_.strings.push_back(std::move(s));
      v.inline_str = true;
      v.sub = uint32_t(t_.strings.size() - 1);
    } else {
      src_.skip(n, at_, "a string");
    }
    push(add(v));
  }

  void memo_put(uint64_t index) {
    if (stack_.empty()) fail("memo PUT with an empty stack: corrupt pickle");
    if (index >= lim_.max_ops) fail("memo index " + std::to_string(index) + " is out of range");
    if (memo_.size() <= index) memo_.resize(size_t(index) + 1, kNoValue);
    memo_[size_t(index)] = stack_.back();
  }
  void memo_get(uint64_t index) {
    if (index >= memo_.size() || memo_[size_t(index)] == kNoValue)
      fail("memo GET of index " + std::to_string(index) + ", never PUT: corrupt pickle");
    push(memo_[size_t(index)]);
  }

  void global() {
    std::string module, name;
    for (std::string* s : {&module, &name}) {
      for (;;) {
        const uint8_t c = src_.byte(at_, "a GLOBAL's name");
        if (c == '\n') break;
        if (s->size() >= 64) fail("a GLOBAL's name longer than 64 bytes: not one CIFAR's files use");
        s->push_back(char(c));
      }
    }
    const std::string full = module + "." + name;
    Global g;
    if (full == "numpy.core.multiarray._reconstruct" || full == "numpy._core.multiarray._reconstruct")
      g = Global::Reconstruct;
    else if (full == "numpy.ndarray") g = Global::Ndarray;
    else if (full == "numpy.dtype") g = Global::Dtype;
    else
      fail("GLOBAL " + printable(full) + " is not one CIFAR's files use (only numpy's array reconstruction: "
           "numpy.core.multiarray._reconstruct, numpy.ndarray, numpy.dtype); memfit never runs pickle code");
    Value v;
    v.kind = Kind::Global;
    v.i = int64_t(g);
    push(add(v));
  }

  static std::string printable(const std::string& s) {
    std::string out;
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u < 0x7f) out += c;
      else out += "\\x" + hex8(u).substr(2);
    }
    return out;
  }

  bool is(uint32_t id, Kind k) const { return t_.values[id].kind == k; }
  bool is_global(uint32_t id, Global g) const { return is(id, Kind::Global) && t_.values[id].i == int64_t(g); }
  const std::vector<uint32_t>& tuple(uint32_t id) const { return t_.lists[t_.values[id].sub]; }

  void reduce() {
    need_stack(2, "REDUCE");
    const uint32_t args = pop("REDUCE"), fn = pop("REDUCE");
    if (is_global(fn, Global::Dtype)) {
      // dtype('u1', 0, 1)
      if (!is(args, Kind::Tuple) || tuple(args).size() != 3 || !is(tuple(args)[0], Kind::Str) ||
          !t_.values[tuple(args)[0]].inline_str)
        fail("REDUCE of numpy.dtype with arguments other than (descr, 0, 1): not CIFAR's structure");
      Value v;
      v.kind = Kind::Dtype;
      v.sub = t_.values[tuple(args)[0]].sub;
      push(add(v));
      return;
    }
    if (is_global(fn, Global::Reconstruct)) {
      // _reconstruct(ndarray, (0,), b'b')
      if (!is(args, Kind::Tuple) || tuple(args).size() != 3 || !is_global(tuple(args)[0], Global::Ndarray) ||
          !is(tuple(args)[1], Kind::Tuple) || !is(tuple(args)[2], Kind::Str))
        fail("REDUCE of numpy's _reconstruct with arguments other than (numpy.ndarray, shape, typecode): not "
             "CIFAR's structure");
      Value v;
      v.kind = Kind::Array;
      push(add(v));
      return;
    }
    fail("REDUCE of " + describe(fn) + ": only numpy.dtype and numpy's _reconstruct are CIFAR's structure; "
         "memfit never runs pickle code");
  }

  std::string describe(uint32_t id) const {
    static const char* names[] = {"None", "a bool", "an int", "a string", "a list", "a tuple", "a dict",
                                  "a global", "a dtype", "an array"};
    const Value& v = t_.values[id];
    if (v.kind == Kind::Global)
      return v.i == int64_t(Global::Ndarray) ? "numpy.ndarray" : v.i == int64_t(Global::Dtype) ? "numpy.dtype"
                                                                                               : "numpy's _reconstruct";
    return names[size_t(v.kind)];
  }

  void build() {
    need_stack(2, "BUILD");
    const uint32_t state = pop("BUILD");
    const uint32_t obj = stack_.back();
    Value& o = t_.values[obj];
    if (o.kind == Kind::Dtype && !o.built) {
      // (3, '|', None, None, None, -1, -1, 0): the byte order and the rest
      // mean nothing for a one-byte type.
      if (!is(state, Kind::Tuple)) fail("BUILD of a numpy.dtype with a state that is not a tuple: not CIFAR's structure");
      o.built = true;
      return;
    }
    if (o.kind == Kind::Array && !o.built) {
      // (1, shape, dtype, is_fortran, raw bytes)
      if (!is(state, Kind::Tuple) || tuple(state).size() != 5)
        fail("BUILD of a numpy array with a state that is not a 5-tuple (version, shape, dtype, fortran, data): "
             "not CIFAR's structure");
      const std::vector<uint32_t>& s = tuple(state);
      if (!is(s[0], Kind::Int) || t_.values[s[0]].i != 1) fail("numpy array state of a version other than 1");
      if (!is(s[1], Kind::Tuple)) fail("numpy array state whose shape is not a tuple");
      if (!is(s[2], Kind::Dtype)) fail("numpy array state whose dtype is not a numpy.dtype");
      const std::string& descr = t_.strings[t_.values[s[2]].sub];
      if (descr != "u1" && descr != "|u1")
        fail("numpy array of dtype '" + printable(descr) + "'; CIFAR's pixels are uint8 ('u1')");
      if (!is(s[3], Kind::Bool) || t_.values[s[3]].i != 0) fail("numpy array in Fortran order; CIFAR's are C order");
      if (!is(s[4], Kind::Str) || t_.values[s[4]].i != 0)
        fail("numpy array whose data is not a byte string: not CIFAR's structure");
      uint64_t n = 1;
      for (uint32_t d : tuple(s[1])) {
        if (!is(d, Kind::Int) || t_.values[d].i < 0) fail("numpy array shape with an entry that is not a size");
        const auto dim = uint64_t(t_.values[d].i);
        if (dim != 0 && n > t_.file_size / dim) fail("numpy array shape larger than the file");
        n *= dim;
      }
      const Value& data = t_.values[s[4]];
      if (data.len != n)
        fail("numpy array of " + std::to_string(n) + " bytes by its shape holds " + std::to_string(data.len) +
             " bytes of data: corrupt");
      o.built = true;
      o.sub = s[1];
      o.off = data.off;
      o.len = data.len;
      return;
    }
    fail("BUILD of " + describe(obj) + ": only numpy arrays and dtypes are built in CIFAR's files");
  }

  // One opcode; true at STOP.
  bool step(uint8_t op) {
    switch (op) {
      case 0x80: {
        if (at_ != 0) fail("PROTO after the start: corrupt pickle");
        const uint8_t v = src_.byte(at_, "PROTO's version");
        if (v != 2 && v != 3)
          fail("pickle protocol " + std::to_string(v) + "; CIFAR's files are protocol 2 (3 is read too)");
        return false;
      }
      case '.': {
        if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) +
                                                        " values on the stack: corrupt pickle");
        t_.root = stack_.back();
        return true;
      }
      case '(': marks_.push_back(stack_.size()); return false;
      case 'N': push(add(Value{})); return false;
      case 0x88:
      case 0x89: {
        Value v;
        v.kind = Kind::Bool;
        v.i = op == 0x88;
        push(add(v));
        return false;
      }
      case 'K':
      case 'M':
      case 'J': {
        Value v;
        v.kind = Kind::Int;
        if (op == 'K') v.i = src_.byte(at_, "BININT1");
        else if (op == 'M') {
          uint8_t b[2];
          src_.read(b, 2, at_, "BININT2");
          v.i = int64_t(b[0]) | int64_t(b[1]) << 8;
        } else {
          v.i = int32_t(src_.le32(at_, "BININT"));
        }
        push(add(v));
        return false;
      }
      case 'U':
      case 'C': string(src_.byte(at_, "a short string's length"), false); return false;
      case 'T': {
        const uint32_t n = src_.le32(at_, "BINSTRING's length");
        if (n > uint32_t(INT32_MAX)) fail("BINSTRING of negative length");
        string(n, false);
        return false;
      }
      case 'B': string(src_.le32(at_, "BINBYTES's length"), false); return false;
      case 'X': string(src_.le32(at_, "BINUNICODE's length"), true); return false;
      case ']': push(add_container(Kind::List)); return false;
      case '}': push(add_container(Kind::Dict)); return false;
      case ')': push(add_container(Kind::Tuple)); return false;
      case 't': push(add_container(Kind::Tuple, pop_mark("TUPLE"))); return false;
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t n = size_t(op - 0x84);
        need_stack(n, "TUPLEn");
        std::vector<uint32_t> items(stack_.end() - ptrdiff_t(n), stack_.end());
        stack_.resize(stack_.size() - n);
        push(add_container(Kind::Tuple, std::move(items)));
        return false;
      }
      case 'a':
      case 'e': {
        std::vector<uint32_t> items = op == 'e' ? pop_mark("APPENDS") : std::vector<uint32_t>{pop("APPEND")};
        const Value& l = top("APPEND");
        if (l.kind != Kind::List) fail("APPEND to " + describe(stack_.back()) + ": corrupt pickle");
        std::vector<uint32_t>& to = t_.lists[l.sub];
        to.insert(to.end(), items.begin(), items.end());
        return false;
      }
      case 's':
      case 'u': {
        std::vector<uint32_t> items;
        if (op == 'u') {
          items = pop_mark("SETITEMS");
        } else {
          need_stack(2, "SETITEM");
          items.assign(stack_.end() - 2, stack_.end());
          stack_.resize(stack_.size() - 2);
        }
        if (items.size() % 2) fail("SETITEMS with an odd number of values: corrupt pickle");
        const Value& d = top("SETITEM");
        if (d.kind != Kind::Dict) fail("SETITEM on " + describe(stack_.back()) + ": corrupt pickle");
        for (size_t k = 0; k < items.size(); k += 2)
          if (!is(items[k], Kind::Str) || !t_.values[items[k]].inline_str)
            fail("a dict key that is not a short string: not CIFAR's structure");
        std::vector<uint32_t>& to = t_.lists[d.sub];
        to.insert(to.end(), items.begin(), items.end());
        return false;
      }
      case 'q': memo_put(src_.byte(at_, "BINPUT")); return false;
      case 'r': memo_put(src_.le32(at_, "LONG_BINPUT")); return false;
      case 'h': memo_get(src_.byte(at_, "BINGET")); return false;
      case 'j': memo_get(src_.le32(at_, "LONG_BINGET")); return false;
      case 'c': global(); return false;
      case 'R': reduce(); return false;
      case 'b': build(); return false;
      default: {
        const char* name = opcode_name(op);
        fail("opcode " + hex8(op) + (name ? std::string(" (") + name + ")" : std::string()) +
             " is not one CIFAR's files use: not a CIFAR python file (memfit reads their structure only and "
             "never runs pickle code)");
      }
    }
  }

  Source src_;
  Limits lim_;
  Tree t_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::vector<uint32_t> memo_;
  uint64_t at_ = 0;
  uint64_t inline_bytes_ = 0;
};

}  // namespace

const std::string* Tree::text(uint32_t id) const {
  const Value& v = values[id];
  return v.kind == Kind::Str && v.inline_str ? &strings[v.sub] : nullptr;
}

int64_t Tree::find(uint32_t dict, const std::string& key) const {
  if (values[dict].kind != Kind::Dict) return -1;
  // The last entry of the key, as Python's dict keeps it.
  const std::vector<uint32_t>& kv = lists[values[dict].sub];
  int64_t found = -1;
  for (size_t k = 0; k + 1 < kv.size(); k += 2) {
    const std::string* s = text(kv[k]);
    if (s && *s == key) found = kv[k + 1];
  }
  return found;
}

Tree read(const std::string& path, const Limits& limits) { return Parser(path, limits).run(); }

}  // namespace memfit::data::pickle
