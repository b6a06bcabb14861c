// Parsing the Kernel IR text form back into nodes (the inverse of printer.cpp).
//
// Grammar (whitespace separates tokens and is otherwise ignored; `#` starts a comment to the
// end of the line):
//
//   kernel  := 'kernel' name '(' params? ')' '->' '(' params? ')' loc? stmt END
//   params  := param (',' param)*
//   param   := decl loc?                                   -- loc is the buffer's span
//   decl    := name ':' DTYPE '[' (int (',' int)*)? ']' MEMORY attr*
//   attr    := 'core' '=' int | 'offset' '=' int | 'slots' '=' int | 'over' name
//   stmt    := block | for | alloc | op
//   block   := '{' stmt* '}' loc?                          -- the block's span follows '}'
//   for     := 'for' name 'in' ('affine_range' | 'sequential_range') '(' int ')' loc? stmt
//   alloc   := 'alloc' decl loc? ('buffer_loc' '(' place ')')?
//                                 -- loc: the statement's span, also the buffer's unless
//                                 -- buffer_loc gives the buffer its own
//   op      := OPCODE '(' (arg (',' arg)*)? ')' loc?
//   arg     := name '=' value
//   value   := name '[' (slice (',' slice)*)? ']'           -- a view of a visible buffer
//            | int | float | STRING | '[' (int (',' int)*)? ']'
//   slice   := affine                                       -- dropped dim (keep=false)
//            | affine ':' '+' int (':' int)? (':' 'drop')?   -- start:+size[:step][:drop]
//   affine  := '-'? aterm (('+' | '-') aterm)*
//   aterm   := INT | IDENT ('*' '-'? INT)? | INT '*' IDENT
//   loc     := 'loc' '(' place ')'
//   place   := STRING ':' int ':' int
//   name    := IDENT | STRING
//   int     := '-'? INT
//   float   := '-'? (FLOAT | 'inf' | 'nan')
//
// IDENT is [A-Za-z_][A-Za-z0-9_.]*, INT is [0-9]+, FLOAT is digits with a '.' and/or an
// exponent, STRING is double-quoted with escapes \" \\ \n \t \r \xHH. An ident followed by
// '[' in value position is a view, so a buffer may be called `inf`. Views resolve to the buffer
// declared by a kernel parameter or an `alloc` that is visible: an alloc is visible to the
// rest of its block and the blocks nested in it; a name may not be declared twice while
// visible.
//
// The printer writes the canonical form: `:step` only when step != 1, `:drop` only for a dropped
// dim whose size/step are not 1/1, core/offset/slots/over only when not the defaults, names that are
// not identifiers quoted, floats always with a '.' or exponent, and `loc(...)` only with
// PrintOptions::spans and only for spans that are set. Tokens come from text_lexer.cpp; nesting
// deeper than kMaxDepth is an error so that no input can exhaust the stack.
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "neuron/ir/printer.hpp"
#include "text_lexer.hpp"

namespace neuron {

namespace {

using ir_text::describe;
using ir_text::Tok;
using ir_text::Token;

constexpr const char* kRule = "ir-parse";
constexpr int kMaxDepth = 256;  // nesting limit: malformed input must not overflow the stack

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& source)
      : toks_(std::move(toks)), source_(source) {}

  Kernel kernel() {
    Kernel k;
    keyword("kernel");
    k.name = name("a kernel name");
    scopes_.emplace_back();
    k.inputs = params();
    expect("->");
    k.outputs = params();
    k.span = opt_loc("loc").value_or(Span{});
    k.body = stmt(0);
    if (cur().kind != Tok::end) fail(cur(), "expected end of input after the kernel body");
    return k;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& ahead(size_t k) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (t.kind != Tok::end) ++pos_;
    return t;
  }
  bool at_punct(std::string_view p) const { return cur().kind == Tok::punct && cur().text == p; }
  bool at_ident(std::string_view w) const { return cur().kind == Tok::ident && cur().text == w; }
  Span span_of(const Token& t) const { return Span{source_, t.line, t.column}; }

  [[noreturn]] void fail(const Token& t, const std::string& what) {
    user_error(span_of(t), kRule, "{}, found {}", what, describe(t));
  }

  void expect(std::string_view p) {
    if (!at_punct(p)) fail(cur(), fmt::format("expected '{}'", p));
    next();
  }
  void keyword(std::string_view w) {
    if (!at_ident(w)) fail(cur(), fmt::format("expected '{}'", w));
    next();
  }

  std::string name(std::string_view what) {
    if (cur().kind != Tok::ident && cur().kind != Tok::string)
      fail(cur(), fmt::format("expected {}", what));
    return next().text;
  }

  // A non-negative integer literal's magnitude, or a negative one when `negative`.
  int64_t int_literal(bool negative) {
    if (cur().kind != Tok::integer) fail(cur(), "expected an integer");
    const Token& t = cur();
    uint64_t mag = 0;
    auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), mag);
    uint64_t limit =
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
    if (ec != std::errc() || mag > limit)
      fail(t, "integer out of range: expected a value that fits in 64 bits");
    next();
    return negative ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);
  }

  int64_t integer() {
    bool neg = at_punct("-");
    if (neg) next();
    return int_literal(neg);
  }

  int small_int() {
    const Token& t = cur();
    int64_t v = integer();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(t, "expected a line or column number that fits in an int");
    return static_cast<int>(v);
  }

  std::vector<int64_t> int_list() {
    std::vector<int64_t> v;
    expect("[");
    if (!at_punct("]")) {
      v.push_back(integer());
      while (at_punct(",")) {
        next();
        v.push_back(integer());
      }
      if (!at_punct("]")) fail(cur(), "expected ',' or ']'");
    }
    expect("]");
    return v;
  }

  std::optional<Span> opt_loc(std::string_view word) {
    if (!at_ident(word)) return std::nullopt;
    next();
    expect("(");
    if (cur().kind != Tok::string) fail(cur(), "expected a quoted file name in loc(...)");
    Span s;
    s.file = next().text;
    expect(":");
    s.line = small_int();
    expect(":");
    s.column = small_int();
    expect(")");
    return s;
  }

  // Declares a buffer in the innermost scope; names must be unique among visible buffers.
  std::shared_ptr<Buffer> decl() {
    auto b = std::make_shared<Buffer>();
    const Token& name_tok = cur();
    b->name = name("a buffer name");
    if (lookup(b->name))
      fail(name_tok, fmt::format("duplicate buffer name '{}': expected a name not already declared",
                                 b->name));
    expect(":");
    if (cur().kind != Tok::ident) fail(cur(), "expected a dtype");
    auto dt = dtype_from_name(cur().text);
    if (!dt) {
      std::vector<std::string_view> names;  // the dtype table's names
#define X(e, name, bytes, is_float, is_signed) names.push_back(name);
      NEURON_DTYPES(X)
#undef X
      fail(cur(), fmt::format("unknown dtype: expected one of {}", fmt::join(names, ", ")));
    }
    next();
    b->dtype = *dt;
    b->shape = int_list();
    if (cur().kind != Tok::ident) fail(cur(), "expected a memory (hbm, shared_hbm, sbuf, psum)");
    auto mem = memory_from_name(cur().text);
    if (!mem) fail(cur(), "unknown memory: expected hbm, shared_hbm, sbuf or psum");
    next();
    b->memory = *mem;
    for (;;) {
      if (at_ident("core") && ahead(1).kind == Tok::punct && ahead(1).text == "=") {
        next();
        next();
        const int64_t core = integer();
        if (core < -1 || core > 1024) fail(cur(), "core must be -1 (none) to 1024");
        b->core = int(core);
      } else if (at_ident("offset") && ahead(1).kind == Tok::punct && ahead(1).text == "=") {
        next();
        next();
        b->offset = integer();
      } else if (at_ident("slots") && ahead(1).kind == Tok::punct && ahead(1).text == "=") {
        next();
        next();
        b->slots = integer();
      } else if (at_ident("over")) {
        next();
        b->slot_var = name("a loop variable after 'over'");
      } else {
        break;
      }
    }
    scopes_.back()[b->name] = b;
    return b;
  }

  std::vector<BufferPtr> params() {
    std::vector<BufferPtr> out;
    expect("(");
    if (!at_punct(")")) {
      for (;;) {
        auto b = decl();
        b->span = opt_loc("loc").value_or(Span{});
        out.push_back(b);
        if (!at_punct(",")) break;
        next();
      }
      if (!at_punct(")")) fail(cur(), "expected ',' or ')'");
    }
    expect(")");
    return out;
  }

  BufferPtr lookup(const std::string& n) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    return nullptr;
  }

  StmtPtr stmt(int depth) {
    if (depth > kMaxDepth)
      fail(cur(),
           fmt::format("nesting deeper than {} levels: expected a simpler statement", kMaxDepth));
    if (at_punct("{")) return block(depth);
    if (at_ident("for")) return for_stmt(depth);
    if (at_ident("alloc")) return alloc_stmt();
    if (cur().kind == Tok::ident) return op_stmt();
    fail(cur(), "expected a statement ('{', 'for', 'alloc' or an opcode)");
  }

  StmtPtr block(int depth) {
    const Token& open = cur();
    expect("{");
    scopes_.emplace_back();
    std::vector<StmtPtr> stmts;
    while (!at_punct("}")) {
      if (cur().kind == Tok::end)
        fail(cur(), fmt::format("expected '}}' to close the block opened at line {} column {}",
                                open.line, open.column));
      stmts.push_back(stmt(depth + 1));
    }
    next();
    scopes_.pop_back();
    Span s = opt_loc("loc").value_or(Span{});
    return Block::make(std::move(stmts), std::move(s));
  }

  StmtPtr for_stmt(int depth) {
    keyword("for");
    std::string var = name("a loop variable");
    keyword("in");
    LoopKind kind = LoopKind::affine;
    int64_t extent = 0, step = 1;
    Affine start = 0, stop = 0;
    std::string cond;
    if (at_ident("affine_range") || at_ident("sequential_range")) {
      kind = at_ident("affine_range") ? LoopKind::affine : LoopKind::sequential;
      next();
      expect("(");
      extent = integer();
    } else if (at_ident("dynamic_range")) {
      kind = LoopKind::dynamic;
      next();
      expect("(");
      start = affine();
      expect(",");
      stop = affine();
      expect(",");
      step = integer();
      if (step <= 0) fail(cur(), "a dynamic_range step must be positive");
    } else if (at_ident("while_nonzero")) {
      kind = LoopKind::dynamic;
      next();
      expect("(");
      cond = name("a register");
      if (!is_register_var(cond)) fail(cur(), "expected a register (r0, r1, ...)");
    } else {
      fail(cur(), "expected 'affine_range', 'sequential_range', 'dynamic_range' or 'while_nonzero'");
    }
    expect(")");
    Span s = opt_loc("loc").value_or(Span{});
    // A non-block body still gets its own scope, as a block body would.
    scopes_.emplace_back();
    StmtPtr body = stmt(depth + 1);
    scopes_.pop_back();
    if (kind == LoopKind::dynamic)
      return For::make_dynamic(std::move(var), std::move(start), std::move(stop), step,
                               std::move(cond), std::move(body), std::move(s));
    return For::make(std::move(var), extent, kind, std::move(body), std::move(s));
  }

  // A statement without loc(...) is located in the IR text itself (source name, line, column),
  // so diagnostics and profiles of a parsed kernel still point somewhere.
  StmtPtr alloc_stmt() {
    const Span here = span_of(cur());
    keyword("alloc");
    auto b = decl();
    Span s = opt_loc("loc").value_or(here);
    b->span = opt_loc("buffer_loc").value_or(s);
    return Alloc::make(b, std::move(s));
  }

  StmtPtr op_stmt() {
    const Token& op_tok = cur();
    const Span here = span_of(op_tok);
    auto code = opcode_from_name(op_tok.text);
    if (!code)
      fail(op_tok,
           "unknown opcode: expected an nl helper (nl.load, ...) or an ISA instruction name");
    next();
    expect("(");
    std::vector<Arg> args;
    if (!at_punct(")")) {
      for (;;) {
        Arg a;
        a.name = name("an argument name");
        expect("=");
        a.value = value();
        args.push_back(std::move(a));
        if (!at_punct(",")) break;
        next();
      }
      if (!at_punct(")")) fail(cur(), "expected ',' or ')'");
    }
    expect(")");
    Span s = opt_loc("loc").value_or(here);
    return Op::make(*code, std::move(args), std::move(s));
  }

  double float_literal(bool negative) {
    const Token& t = cur();
    double d = 0;
    if (t.kind == Tok::ident && t.text == "inf") {
      d = std::numeric_limits<double>::infinity();
    } else if (t.kind == Tok::ident && t.text == "nan") {
      d = std::numeric_limits<double>::quiet_NaN();
    } else {
      auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), d);
      if (ec != std::errc() || p != t.text.data() + t.text.size())
        fail(t, "bad number: expected a float within the range of a double");
    }
    next();
    return negative ? -d : d;
  }

  Value value() {
    const Token& t = cur();
    bool view_follows = (ahead(1).kind == Tok::punct && ahead(1).text == "[") ||
                        (ahead(1).kind == Tok::ident &&
                         (ahead(1).text == "as" || ahead(1).text == "bitcast"));
    if ((t.kind == Tok::ident || t.kind == Tok::string) && view_follows) return view();
    if (t.kind == Tok::string) return next().text;
    if (at_punct("[")) return int_list();
    bool neg = at_punct("-");
    if (neg) next();
    const Token& n = cur();
    if (n.kind == Tok::integer) return int_literal(neg);
    if (n.kind == Tok::floating || (n.kind == Tok::ident && (n.text == "inf" || n.text == "nan")))
      return float_literal(neg);
    fail(n,
         neg ? "expected a number after '-'"
             : "expected a value (a view name[...], an integer, a float, a \"string\" or [ints])");
  }

  Access view() {
    const Token& name_tok = cur();
    std::string n = next().text;
    BufferPtr b = lookup(n);
    if (!b)
      fail(name_tok,
           fmt::format("unknown buffer '{}': expected a kernel parameter or a visible alloc", n));
    Access a;
    a.buffer = b;
    if (at_ident("bitcast")) {  // `name bitcast dtype as [shape] ...`: the bytes read as dtype
      next();
      if (cur().kind != Tok::ident || !dtype_from_name(cur().text))
        fail(cur(), "expected a dtype after 'bitcast'");
      a.as_dtype = dtype_from_name(next().text);
      if (!at_ident("as")) fail(cur(), "expected 'as [shape]' after the bitcast dtype");
    }
    if (at_ident("as")) {  // `name as [shape] from N[...]`: the storage seen with another shape
      next();
      a.storage = int_list();
      if (at_ident("from")) {
        next();
        a.origin = integer();
      }
    }
    expect("[");
    if (!at_punct("]")) {
      a.dims.push_back(slice());
      while (at_punct(",")) {
        next();
        a.dims.push_back(slice());
      }
    }
    if (!at_punct("]")) fail(cur(), "expected ',' or ']'");
    if (a.dims.size() != a.storage_shape().size())
      fail(name_tok, fmt::format("view of '{}' has {} slices: expected {} (the {}'s rank)", n,
                                 a.dims.size(), a.storage_shape().size(),
                                 a.storage.empty() ? "buffer" : "storage shape"));
    expect("]");
    if (at_ident("order")) {  // `name[...] order [dims]`: a transposing view
      next();
      for (int64_t d : int_list()) a.order.push_back(static_cast<int>(d));
    }
    return a;
  }

  DimSlice slice() {
    DimSlice d;
    d.start = affine();
    if (!at_punct(":")) {
      d.keep = false;
      return d;
    }
    next();
    expect("+");
    d.size = integer();
    if (at_punct(":") && ahead(1).kind != Tok::ident) {
      next();
      d.step = integer();
    }
    if (at_punct(":")) {
      next();
      keyword("drop");
      d.keep = false;
    }
    return d;
  }

  void add_checked(int64_t& acc, int64_t v, const Token& at) {
    if (__builtin_add_overflow(acc, v, &acc))
      fail(at, "index expression overflows 64 bits: expected smaller coefficients");
  }
  int64_t mul_checked(int64_t a, int64_t b, const Token& at) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
      fail(at, "index expression overflows 64 bits: expected smaller coefficients");
    return r;
  }

  Affine affine() {
    const Token& start = cur();
    std::map<std::string, int64_t> terms;
    int64_t constant = 0;
    int64_t sign = 1;
    if (at_punct("-")) {
      next();
      sign = -1;
    }
    for (;;) {
      const Token& t = cur();
      if (t.kind == Tok::integer) {
        // Magnitudes up to 2^63 are allowed so that the most negative constant parses.
        int64_t v = sign < 0 ? int_literal(true) : int_literal(false);
        if (at_punct("*")) {
          next();
          if (cur().kind != Tok::ident) fail(cur(), "expected a variable after '*'");
          add_checked(terms[next().text], v, t);
        } else {
          add_checked(constant, v, t);
        }
      } else if (t.kind == Tok::ident) {
        std::string var = next().text;
        int64_t coeff = sign;
        if (at_punct("*")) {
          next();
          coeff = mul_checked(coeff, integer(), t);
        }
        add_checked(terms[var], coeff, t);
      } else {
        fail(t, "expected an index expression (an integer or a loop variable)");
      }
      if (at_punct("+"))
        sign = 1;
      else if (at_punct("-"))
        sign = -1;
      else
        break;
      next();
    }
    // Affine::str() negates coefficients (and the constant when there are terms), so the most
    // negative int64 could not be printed back.
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    Affine a(constant);
    for (auto& [v, c] : terms) {
      if (c == kMin)
        fail(start, "index expression overflows 64 bits: expected smaller coefficients");
      if (c != 0) a.terms.push_back({v, c});
    }
    if (!a.terms.empty() && constant == kMin)
      fail(start, "index expression overflows 64 bits: expected a smaller constant");
    return a;
  }

  std::vector<Token> toks_;
  const std::string& source_;
  size_t pos_ = 0;
  std::vector<std::map<std::string, BufferPtr>> scopes_;
};

}  // namespace

Kernel parse_kernel(std::string_view text, const std::string& source_name) {
  Parser p(ir_text::lex(text, source_name), source_name);
  return p.kernel();
}

}  // namespace neuron
