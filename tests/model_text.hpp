// Building a model from model-file text in tests: "" if it builds on a
// [2,1,28,28] input with 10 classes, else the error's message.
#pragma once

#include <string>

#include "error_of.hpp"
#include "memfit/builder.hpp"
#include "models/model_file.hpp"

namespace memfit::testing {

inline std::string model_text_error(const std::string& text) {
  return error_of([&] {
    Graph g;
    Builder b(g);
    ValueId x = g.input("input", {2, 1, 28, 28});
    models::parse_model_text(text, "m.mf")(b, x, 10);
  });
}

}  // namespace memfit::testing
