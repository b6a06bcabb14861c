// Rendering of user errors with the offending source line and a caret.
#include "neuron/base/error.hpp"

#include <fstream>

namespace neuron {

std::string Span::str() const {
  if (!known()) return "<unknown location>";
  return fmt::format("{}:{}:{}", file, line, column);
}

static std::string source_line(const std::string& file, int line) {
  std::ifstream in(file);
  std::string text;
  for (int i = 0; i < line && std::getline(in, text); ++i) {
  }
  return in ? text : std::string();
}

std::string render_diagnostic(const std::string& rule, const std::string& message,
                              const Span& span) {
  std::string out = fmt::format("{}: error: [{}] {}", span.str(), rule, message);
  if (!span.known()) return out;
  std::string text = source_line(span.file, span.line);
  if (text.empty()) return out;
  int col = span.column > 0 ? span.column : 1;
  std::string caret(static_cast<size_t>(col - 1), ' ');
  for (size_t i = 0; i + 1 < static_cast<size_t>(col) && i < text.size(); ++i)
    if (text[i] == '\t') caret[i] = '\t';
  out += fmt::format("\n  {}\n  {}^", text, caret);
  return out;
}

UserError::UserError(std::string rule, std::string message, Span span)
    : std::runtime_error(render_diagnostic(rule, message, span)),
      rule_(std::move(rule)),
      message_(std::move(message)),
      span_(std::move(span)) {}

}  // namespace neuron
