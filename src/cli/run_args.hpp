// The options of `memfit train` and `memfit plan`, made from their flags:
// the one place a run's words become TrainOptions, shared by the command
// (main.cpp) and the Python package (python/), so that the two never
// accept different flags or check them differently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train/options.hpp"

namespace memfit::cli {

struct RunArgs {
  train::TrainOptions options;  // valid (train::validate) unless `error` or `help`
  // A usage error: the message the command prints before its usage text
  // (exit 2), e.g. "unknown flag --x", "--batch expects an integer, got 'a'".
  std::optional<std::string> error;
  bool help = false;  // -h/--help was given: print `usage`, run nothing
  std::string usage;  // the command's usage text
};

// `memfit train`'s flags (without the command word). The options come with
// the command's defaults and the defaults that follow from other flags
// (--optimizer adamw: lr 1e-3, weight decay 1e-2; --resume: --out).
RunArgs parse_train_args(const std::vector<std::string>& argv);
// `memfit plan`'s flags; options.plan_only is set.
RunArgs parse_plan_args(const std::vector<std::string>& argv);

}  // namespace memfit::cli
