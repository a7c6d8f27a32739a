#pragma once
// Helpers the unit tests share for bad-input checks.
#include <string>

#include "gpubench/core/errors.hpp"

namespace gpubench::testing {

// The InputError message `f` throws, or "" when it throws none.
template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace gpubench::testing
