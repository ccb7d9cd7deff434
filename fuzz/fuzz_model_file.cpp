// Model files: parse, then build the graph (shape inference) on a 2x1x28x28
// input with 10 classes, in training mode (dropout and batch norm nodes).
#include <string>

#include "fuzz/harness.hpp"
#include "memfit/builder.hpp"
#include "models/model_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return memfit::fuzz::run_one([&] {
    auto model = memfit::models::parse_model_text(text, "fuzz.mf");
    memfit::Graph g;
    memfit::Builder b(g);
    b.training = true;
    memfit::ValueId x = g.input("input", {2, 1, 28, 28});
    model(b, x, 10);
  });
}
