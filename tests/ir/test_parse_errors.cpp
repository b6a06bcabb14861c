// Malformed IR text: every error is a UserError "ir-parse" naming what was expected and where.
#include <doctest/doctest.h>

#include "ir/samples.hpp"
#include "neuron/ir/printer.hpp"

using namespace neuron;

namespace {

const std::string kHead =
    "kernel k(a: float32[4, 8] shared_hbm) -> (o: float32[4, 8] shared_hbm) {\n";

struct BadText {
  std::string text;
  const char* fragment;
  int line, column;
};

}  // namespace

TEST_CASE("malformed text reports rule, message and position") {
  // Columns are counted by hand from the texts (1-based, the first character of the token).
  const std::vector<BadText> cases = {
      {"", "expected 'kernel', found end of input", 1, 1},
      {"kernal k() -> () {}", "expected 'kernel', found 'kernal'", 1, 1},
      {kHead + "  tensor_copy(dst=q[0:+4, 0:+8])\n}", "unknown buffer 'q'", 2, 19},
      {kHead + "  tensor_kopy(dst=a[0:+4, 0:+8])\n}", "unknown opcode", 2, 3},
      {kHead + "  alloc t: float33[4] sbuf\n}", "unknown dtype", 2, 12},
      {kHead + "  alloc t: float32[4] dram\n}", "unknown memory", 2, 23},
      {kHead + "  memset(dst=a[0:+4, 0:+8], value=1e999)\n}", "bad number", 2, 35},
      {kHead + "  memset(dst=a[0:+4, 0:+8], value=99999999999999999999)\n}", "integer out of range",
       2, 35},
      {kHead + "  memset(dst=a[0:+4, 0:+8], value=-9223372036854775809)\n}", "integer out of range",
       2, 36},
      {kHead + "  tensor_copy(dst=a[0:+4, 0:+8)\n}", "expected ',' or ']', found ')'", 2, 31},
      {kHead + "}\n}", "expected end of input after the kernel body, found '}'", 3, 1},
      {kHead + "  for i0 in affine_range(4) {\n",
       "expected '}' to close the block opened at line 2 column 29, found end of input", 3, 1},
      {kHead + "  memset(dst=a[0:+4, 0:+8]", "expected ',' or ')', found end of input", 2, 27},
      {"kernel k(a: float32[4] shared_hbm, a: float32[4] shared_hbm) -> () {}",
       "duplicate buffer name 'a'", 1, 36},
      {"kernel k(a: float32[4] shared_hbm) -> (a: float32[4] shared_hbm) {}",
       "duplicate buffer name 'a'", 1, 40},
      {kHead + "  alloc a: float32[4] sbuf\n}", "duplicate buffer name 'a'", 2, 9},
      {kHead + "  alloc t: float32[4] sbuf\n  alloc t: float32[4] sbuf\n}",
       "duplicate buffer name 't'", 3, 9},
      {kHead + "  tensor_copy(dst=a[0:+4])\n}", "view of 'a' has 1 slices: expected 2", 2, 19},
      {kHead + "  tensor_copy(dst=a[0:+4, 0:+8, 0:+1])\n}", "view of 'a' has 3 slices: expected 2",
       2, 19},
      {kHead + "  nl.unary(dst=a[0:+4, 0:+8], x=a[0:+4, 0:+8], func=\"exp)\n}",
       "unterminated string", 2, 53},
      {kHead + "  nl.unary(dst=a[0:+4, 0:+8], x=a[0:+4, 0:+8], func=\"e\\qp\")\n}", "bad escape", 2,
       53},
      {kHead + "  @\n}", "unexpected character '@'", 2, 3},
      {kHead + "  for i0 in affine_range(2) {\n    alloc t: float32[4, 8] sbuf\n  }\n"
               "  tensor_copy(dst=t[0:+4, 0:+8], src=a[0:+4, 0:+8])\n}",
       "unknown buffer 't'", 5, 19},
      {kHead + "  for i0 in range(4) {}\n}",
       "expected 'affine_range', 'sequential_range', 'dynamic_range' or 'while_nonzero', found 'range'", 2, 13},
      {kHead + "  memset(dst a[0:+4, 0:+8])\n}", "expected '=', found 'a'", 2, 14},
      {kHead + "  memset(dst=a[0:+4, 0:+8], value=foo)\n}", "expected a value", 2, 35},
      {kHead + "  memset(dst=a[i0*:+4, 0:+8], value=0)\n}", "expected an integer, found ':'", 2,
       19},
      {kHead + "  memset(dst=a[0:4, 0:+8], value=0)\n}", "expected '+', found '4'", 2, 18},
      {kHead + "  memset(dst=a[0:+4:1:keep, 0:+8], value=0)\n}", "expected 'drop', found 'keep'", 2,
       23},
      {kHead + "  memset(dst=a[0:+4, 0:+8], value=-x)\n}", "expected a number after '-'", 2, 36},
      {"kernel k() -> () loc(foo:1:2) {}", "expected a quoted file name", 1, 22},
      {"kernel k() -> () loc(\"f\":1:99999999999) {}", "fits in an int", 1, 28},
      {"kernel k() -> () {} loc(\"f\":1)", "expected ':', found ')'", 1, 30},
      {"kernel k(a: float32[4 shared_hbm) -> () {}", "expected ',' or ']', found 'shared_hbm'", 1,
       23},
      {"kernel k(a float32[4] shared_hbm) -> () {}", "expected ':', found 'float32'", 1, 12},
      {"kernel k(a: float32[4] shared_hbm) () {}", "expected '->', found '('", 1, 36},
      {"kernel k() -> () {\n  alloc t: float32[4] sbuf offset 12\n}", "unknown opcode", 2, 28},
      {"kernel k() -> () {\n  alloc t: float32[4] sbuf over\n}",
       "expected a loop variable after 'over', found '}'", 3, 1},
      {"kernel k() -> () {\n  for i in affine_range(-) {}\n}", "expected an integer, found ')'", 2,
       26},
      {"kernel k() -> () {\n  42\n}", "expected a statement", 2, 3},
      {"kernel k() -> () {\n  memset(value=1e)\n}", "expected ',' or ')', found 'e'", 2, 17},
      {"kernel k() -> () {\n  memset(value=[1, 2.5])\n}", "expected an integer, found '2.5'", 2,
       20},
      {"kernel k() -> () {\n  memset(value=\"\\x4\")\n}", "two hex digits", 2, 16},
      {"kernel k() -> () {\n  memset(value=\"abc\n\")\n}", "end of line", 2, 16},
      {"kernel k() -> (o: float32[2] sbuf) {\n  memset(dst=o[i0*99999999999 * 99999999999:+1])\n}",
       "expected ',' or ']', found '*'", 2, 31},
      {"kernel k() -> (o: float32[2] sbuf) {\n  memset(dst=o[i0*9223372036854775807 + i0*9:+1])\n}",
       "overflows 64 bits", 2, 41},
      {"kernel k() -> (o: float32[2] sbuf) {\n  memset(dst=o[-9223372036854775808*i0:+1])\n}",
       "overflows 64 bits", 2, 16},
      {"kernel k() -> (o: float32[2] sbuf) {\n  memset(dst=o[i0 - 9223372036854775808:+1])\n}",
       "expected a smaller constant", 2, 16},
      {"kernel k() -> () {} trailing",
       "expected end of input after the kernel body, found 'trailing'", 1, 21},
  };
  for (auto& c : cases) {
    CAPTURE(c.text);
    bool threw = false;
    try {
      parse_kernel(c.text, "bad.ir");
    } catch (const UserError& e) {
      threw = true;
      CHECK(e.rule() == "ir-parse");
      CHECK_MESSAGE(e.message().find(c.fragment) != std::string::npos, e.message());
      CHECK(e.span().file == "bad.ir");
      if (c.line > 0) {
        CHECK(e.span().line == c.line);
        CHECK(e.span().column == c.column);
      }
    }
    CHECK(threw);
  }
}

TEST_CASE("extreme but valid numbers parse") {
  Kernel k = parse_kernel(
      "kernel k() -> (o: float32[2] sbuf) {\n"
      "  memset(dst=o[-9223372036854775808:+1], value=-9223372036854775808, "
      "f=4.9406564584124654e-324)\n}");
  auto op = k.body->as<Block>()->stmts.at(0)->as<Op>();
  REQUIRE(op);
  CHECK(op->access("dst")->dims[0].start.constant == std::numeric_limits<int64_t>::min());
  CHECK(op->get_int("value", 0) == std::numeric_limits<int64_t>::min());
  CHECK(op->get_float("f", 0) == 5e-324);
}

TEST_CASE("deep nesting is an error, not a stack overflow") {
  std::string text = "kernel k() -> () " + std::string(100000, '{');
  try {
    parse_kernel(text);
    FAIL("expected an error");
  } catch (const UserError& e) {
    CHECK(e.rule() == "ir-parse");
    CHECK(e.message().find("nesting deeper") != std::string::npos);
  }
  std::string loops = "kernel k() -> () ";
  for (int i = 0; i < 5000; ++i) loops += "for i in affine_range(1) ";
  CHECK_THROWS_AS(parse_kernel(loops + "{}"), UserError);
}

TEST_CASE("truncated and corrupted text never crashes the parser") {
  // Every prefix and many single-byte corruptions of a rich kernel either parse or raise an
  // ir-parse UserError; anything else (another exception, a crash, a hang) fails the test.
  const std::string text = print(samples::everything(), {true});
  auto attempt = [](std::string_view t) {
    try {
      parse_kernel(t);
    } catch (const UserError& e) {
      if (e.rule() != "ir-parse") FAIL("wrong rule " << e.rule());
    }
  };
  int parsed = 0;
  for (size_t n = 0; n < text.size(); n += 7) {
    attempt(std::string_view(text).substr(0, n));
    ++parsed;
  }
  const char replacements[] = {'{', '}', '[', ']', '(',  ')',  '"', ':',
                               '-', '9', 'x', ' ', '\0', '\\', '#', '\xff'};
  for (size_t i = 0; i < text.size(); i += 3) {
    std::string t = text;
    t[i] = replacements[i % sizeof(replacements)];
    attempt(t);
    ++parsed;
  }
  CHECK(parsed > 100);
}
