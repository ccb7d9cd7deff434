// ONNX files: models::resolve (the protobuf parsed, every node's op and
// attributes checked, the graph converted once at the file's own input
// size), then the model built as a run builds it, in training mode, on
// memfit's own input: an image [2, 1, 8, 8], or token ids [2, 16] where the
// file's input is integer. Classes: 10, the seeds' heads; a file whose head
// predicts another count is refused by build with a GraphError, after the
// whole graph has been converted, so every node is still exercised.
//
// The importer reads a path ending in ".onnx" (models/onnx/model.hpp has no
// entry point that takes bytes), so the input is written to a file in the
// harness's own temporary folder. Two names are used in turn: the importer
// keeps the last file it read, keyed by path, size and modification time,
// and two inputs of one size written within the clock's granularity would
// otherwise hit that cache and go unread.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/harness.hpp"
#include "memfit/builder.hpp"
#include "models/model.hpp"
#include "compile/resolve.hpp"

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    path = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + std::string("/memfit-fuzz-onnx-XXXXXX");
    if (!mkdtemp(path.data())) std::abort();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& next_path() {
  static const TempDir dir;
  static const std::string names[2] = {dir.path + "/a.onnx", dir.path + "/b.onnx"};
  static unsigned turn = 0;
  return names[turn++ & 1];
}

constexpr int64_t kClasses = 10;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = next_path();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    if (!f) std::abort();
  }
  return memfit::fuzz::run_one([&] {
    const memfit::models::Model m = memfit::models::resolve(path);
    memfit::Graph g;
    memfit::Builder b(g, true);
    memfit::models::Inputs in;
    const memfit::models::InputDecl& decl = m.inputs.at(0);
    const bool tokens = decl.dtype == memfit::DType::i32;
    const memfit::Shape sample = tokens ? memfit::Shape{16} : memfit::Shape{1, 8, 8};
    memfit::Shape batch{2};
    batch.insert(batch.end(), sample.begin(), sample.end());
    in.values[decl.name] = g.input(decl.name, batch, decl.dtype);
    in.specs[decl.name] = memfit::TensorSpec{decl.name, decl.dtype, sample, 0.0, tokens ? kClasses : 0};
    const memfit::ValueId y = m.build(b, in, kClasses);
    volatile size_t sink = g.value(y).shape.size();
    (void)sink;
  });
}
