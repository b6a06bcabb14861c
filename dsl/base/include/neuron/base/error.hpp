// Source spans and the two kinds of error: user errors (a rule was broken) and internal errors (our bug).
#pragma once
#include <cstdint>
#if !defined(__clang__)
#include <source_location>
#endif
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace neuron {

// Where a node came from in the user's kernel source. Never part of IR equality or hashing.
struct Span {
  std::string file;
  int line = 0;
  int column = 0;

  bool known() const { return line > 0; }
  // Captures the caller's location when used as a default argument. clang 14 (used by the
  // LibTooling op generator) cannot compile std::source_location with libstdc++ 12, and GCC
  // has no __builtin_COLUMN, so each compiler gets the builtin it has.
#if defined(__clang__)
  static Span current(const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                      int column = __builtin_COLUMN()) {
    return Span{file, line, column};
  }
#else
  static Span current(std::source_location loc = std::source_location::current()) {
    return Span{loc.file_name(), static_cast<int>(loc.line()), static_cast<int>(loc.column())};
  }
#endif
  std::string str() const;  // "file:line:col" or "<unknown location>"
};

// A kernel broke a rule. what() is the full rendered message:
//   file:line:col: error: [rule] message
//     <source line>
//     ^
class UserError : public std::runtime_error {
 public:
  UserError(std::string rule, std::string message, Span span);
  const std::string& rule() const { return rule_; }
  const std::string& message() const { return message_; }
  const Span& span() const { return span_; }

 private:
  std::string rule_, message_;
  Span span_;
};

// A bug in the toolkit. Bad input must never produce one of these.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error("internal error: " + what) {}
};

// Renders "file:line:col: error: [rule] message" plus the source line and a caret when the
// file is readable.
std::string render_diagnostic(const std::string& rule, const std::string& message,
                              const Span& span);

template <typename... Args>
[[noreturn]] void user_error(const Span& span, const std::string& rule,
                             fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(rule, fmt::format(f, std::forward<Args>(args)...), span);
}

template <typename... Args>
[[noreturn]] void internal_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InternalError(fmt::format(f, std::forward<Args>(args)...));
}

#define NEURON_ASSERT(cond, ...) \
  do {                           \
    if (!(cond)) ::neuron::internal_error(__VA_ARGS__); \
  } while (0)

}  // namespace neuron
