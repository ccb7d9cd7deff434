// memfit's JSON output (`plan --json`, `train --json`, metrics.jsonl, the
// bench's result lines) is built with nlohmann::json. Objects keep their
// keys in the order they are set, and each prints as one line. A number
// that is not finite prints as null; bytes that are not UTF-8 (a path, a
// CPU name) print as U+FFFD instead of failing the run.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace memfit::train {

using Json = nlohmann::ordered_json;

// j on one line, without a newline.
inline std::string json_line(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace memfit::train
