// errors.h — the typed exceptions posgrad throws on bad use or bad input.
// Every message names the offending shape, value, dtype or file. Nothing in the library aborts on
// user input; callers (the CLI) catch posgrad::Error and exit non-zero with the message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace posgrad {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : Error {  // incompatible or invalid shapes
  using Error::Error;
};
struct DTypeError : Error {  // wrong or mixed dtypes
  using Error::Error;
};
struct IndexError : Error {  // out-of-range dim, index or position
  using Error::Error;
};
struct ValueError : Error {  // invalid hyperparameter or argument value
  using Error::Error;
};
// An option, value or configuration as the user gave it (flag, JSON key, preset) is invalid. The
// CLI exits with status 2 for every ValueError, this one included.
struct UsageError : ValueError {
  using ValueError::ValueError;
};
struct IoError : Error {  // missing, unreadable, empty or corrupt files
  using Error::Error;
};
struct DeviceError : Error {  // device unavailable or device mismatch
  using Error::Error;
};
struct AutogradError : Error {  // misuse of the autograd engine
  using Error::Error;
};
struct OutOfMemoryError : Error {  // an allocation the machine (host or device) cannot satisfy; names the bytes
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// POSGRAD_CHECK(cond, ErrorType, message parts...): throw ErrorType(message) unless cond.
#define POSGRAD_CHECK(cond, ErrT, ...)                                          \
  do {                                                                          \
    if (!(cond)) throw ::posgrad::ErrT(::posgrad::detail::concat(__VA_ARGS__)); \
  } while (0)

}  // namespace posgrad
