// Reading the JSON objects memfit prints (one a line), in tests: the line
// is parsed and values are looked up by key; a nested one by its path,
// "by_class/data_pipeline".
#pragma once

#include <cmath>
#include <cstddef>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace memfit::testing {

using Json = nlohmann::ordered_json;

// The last line of s that starts with `start` ("" if none).
inline std::string last_json_line(const std::string& s, const std::string& start = "{") {
  std::istringstream in(s);
  std::string line, last;
  while (std::getline(in, line))
    if (line.rfind(start, 0) == 0) last = line;
  return last;
}

// That line parsed; an empty object if there is none or it is not JSON.
inline Json last_json(const std::string& s, const std::string& start = "{") {
  Json j = Json::parse(last_json_line(s, start), nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : Json::object();
}

// The value at `path` in the last JSON object of s (null if absent).
inline Json json_at(const std::string& s, const std::string& path, const std::string& start = "{") {
  const Json j = last_json(s, start);
  const Json::json_pointer p("/" + path);
  return j.contains(p) ? j.at(p) : Json();
}

// The number at `path` in the last JSON object of s (NaN if absent or not a number).
inline double json_number(const std::string& s, const std::string& path) {
  const Json v = json_at(s, path);
  return v.is_number() ? v.get<double>() : std::nan("");
}

// The same in the summary `memfit train --json` prints last ({"steps": ...}).
inline double json_field(const std::string& out, const std::string& path) {
  const Json v = json_at(out, path, "{\"steps\"");
  return v.is_number() ? v.get<double>() : std::nan("");
}

// The unsigned integer at `path` (0 if absent or not an unsigned integer,
// as a byte count printed as a float would be).
inline size_t json_uint(const std::string& s, const std::string& path) {
  const Json v = json_at(s, path);
  return v.is_number_unsigned() ? v.get<size_t>() : 0;
}

// The string at `path` ("" if absent or not a string).
inline std::string json_string_field(const std::string& s, const std::string& path) {
  const Json v = json_at(s, path);
  return v.is_string() ? v.get<std::string>() : "";
}

}  // namespace memfit::testing
