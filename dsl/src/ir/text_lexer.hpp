// Tokens of the Kernel IR text form (internal to the parser; the grammar is in parser.cpp).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace neuron::ir_text {

enum class Tok { ident, integer, floating, string, punct, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;  // decoded contents for strings; the punctuation itself for punct
  int line = 1, column = 1;
};

// Splits text into tokens, the last one Tok::end. Bad characters, strings and escapes are
// UserErrors with rule "ir-parse" at the offending position in `source`.
std::vector<Token> lex(std::string_view text, const std::string& source);

// "'foo'", "string \"...\"" or "end of input", for "expected X, found Y" messages.
std::string describe(const Token& t);

}  // namespace neuron::ir_text
