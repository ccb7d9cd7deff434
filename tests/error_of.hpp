// The message of the exception fn throws ("" if it does not throw), for
// tests of error messages.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace memfit::testing {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace memfit::testing
