// The message of the exception fn throws ("" if it does not throw), for
// tests of error messages.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace memfit::testing {

// E: the exception type expected (another propagates); `none`: the result
// when fn throws nothing.
template <class E = std::exception>
std::string error_of(const std::function<void()>& fn, const char* none = "") {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return none;
}

}  // namespace memfit::testing
