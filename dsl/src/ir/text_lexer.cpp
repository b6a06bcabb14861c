// Splitting the Kernel IR text form into tokens.
#include "text_lexer.hpp"

#include <fmt/format.h>

#include "neuron/base/error.hpp"

namespace neuron::ir_text {

namespace {

class Lexer {
 public:
  Lexer(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      skip_space();
      Token t;
      t.line = line_;
      t.column = col_;
      if (i_ >= s_.size()) {
        out.push_back(t);
        return out;
      }
      char c = s_[i_];
      if (is_alpha(c)) {
        t.kind = Tok::ident;
        while (i_ < s_.size() && (is_alpha(s_[i_]) || is_digit(s_[i_]) || s_[i_] == '.'))
          t.text += take();
      } else if (is_digit(c)) {
        lex_number(t);
      } else if (c == '"') {
        lex_string(t);
      } else if (c == '-' && peek(1) == '>') {
        t.kind = Tok::punct;
        t.text = "->";
        take();
        take();
      } else if (std::string_view("()[]{},:=+-*").find(c) != std::string_view::npos) {
        t.kind = Tok::punct;
        t.text = take();
      } else {
        fail(t, fmt::format("unexpected character {}", char_text(c)));
      }
      out.push_back(std::move(t));
    }
  }

 private:
  static bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static std::string char_text(char c) {
    auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f ? fmt::format("'{}'", c) : fmt::format("byte 0x{:02x}", u);
  }

  char peek(size_t k) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  char take() {
    char c = s_[i_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }

  [[noreturn]] void fail(const Token& at, const std::string& msg) {
    user_error(Span{source_, at.line, at.column}, "ir-parse", "{}", msg);
  }

  void skip_space() {
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        take();
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') take();
      } else {
        break;
      }
    }
  }

  void lex_number(Token& t) {
    t.kind = Tok::integer;
    while (i_ < s_.size() && is_digit(s_[i_])) t.text += take();
    if (peek(0) == '.') {
      t.kind = Tok::floating;
      t.text += take();
      while (i_ < s_.size() && is_digit(s_[i_])) t.text += take();
    }
    char e = peek(0);
    if ((e == 'e' || e == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && is_digit(peek(2))))) {
      t.kind = Tok::floating;
      t.text += take();
      if (!is_digit(peek(0))) t.text += take();
      while (i_ < s_.size() && is_digit(s_[i_])) t.text += take();
    }
  }

  void lex_string(Token& t) {
    t.kind = Tok::string;
    take();
    for (;;) {
      if (i_ >= s_.size()) fail(t, "unterminated string: expected '\"' before end of input");
      char c = take();
      if (c == '"') return;
      if (c == '\n') fail(t, "unterminated string: expected '\"' before end of line");
      if (c != '\\') {
        t.text += c;
        continue;
      }
      if (i_ >= s_.size()) fail(t, "unterminated string: expected '\"' before end of input");
      char e = take();
      switch (e) {
        case '"':
          t.text += '"';
          break;
        case '\\':
          t.text += '\\';
          break;
        case 'n':
          t.text += '\n';
          break;
        case 't':
          t.text += '\t';
          break;
        case 'r':
          t.text += '\r';
          break;
        case 'x': {
          int v = 0;
          for (int k = 0; k < 2; ++k) {
            char h = i_ < s_.size() ? s_[i_] : '\0';
            int d = is_digit(h)              ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) fail(t, "bad escape in string: expected two hex digits after \\x");
            take();
            v = v * 16 + d;
          }
          t.text += static_cast<char>(v);
          break;
        }
        default:
          fail(t, fmt::format("bad escape in string: expected one of \\\" \\\\ \\n \\t \\r \\x, "
                              "found \\{}",
                              e));
      }
    }
  }

  std::string_view s_;
  const std::string& source_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
};

}  // namespace

std::vector<Token> lex(std::string_view text, const std::string& source) {
  return Lexer(text, source).run();
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::end:
      return "end of input";
    case Tok::string:
      return fmt::format("string \"{}\"",
                         t.text.size() > 40 ? t.text.substr(0, 40) + "..." : t.text);
    default:
      return fmt::format("'{}'", t.text.size() > 40 ? t.text.substr(0, 40) + "..." : t.text);
  }
}

}  // namespace neuron::ir_text
