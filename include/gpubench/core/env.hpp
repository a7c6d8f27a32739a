#pragma once
// Process-wide switches read from the environment.
#include <cstdlib>
#include <cstring>

namespace gpubench {

// Whether the environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

}  // namespace gpubench
