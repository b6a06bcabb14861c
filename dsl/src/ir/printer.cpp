// Printing the Kernel IR text form (grammar documented in parser.cpp, which reads it back).
#include "neuron/ir/printer.hpp"

#include <fmt/format.h>

#include <cmath>

namespace neuron {

namespace {

bool is_ident(std::string_view s) {
  if (s.empty()) return false;
  auto start = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!start(s[0])) return false;
  for (char c : s)
    if (!start(c) && !(c >= '0' && c <= '9') && c != '.') return false;
  return true;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

// Buffer names and the kernel name are usually identifiers; anything else is quoted so the
// text still parses back.
std::string name_text(std::string_view s) {
  return is_ident(s) ? std::string(s) : quote(s);
}

// Shortest text that reads back as the same double, always distinguishable from an int.
std::string float_text(double d) {
  if (std::isnan(d)) return std::signbit(d) ? "-nan" : "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string ints_text(const std::vector<int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

std::string loc_text(const Span& s) {
  return fmt::format("loc({}:{}:{})", quote(s.file), s.line, s.column);
}

bool is_default(const Span& s) {
  return s.file.empty() && s.line == 0 && s.column == 0;
}

bool same(const Span& a, const Span& b) {
  return a.file == b.file && a.line == b.line && a.column == b.column;
}

std::string slice_text(const DimSlice& d) {
  std::string start = d.start.str();
  if (!d.keep) {
    if (d.size == 1 && d.step == 1) return start;
    return fmt::format("{}:+{}:{}:drop", start, d.size, d.step);
  }
  if (d.step == 1) return fmt::format("{}:+{}", start, d.size);
  return fmt::format("{}:+{}:{}", start, d.size, d.step);
}

std::string access_text(const Access& a) {
  std::vector<std::string> parts;
  for (auto& d : a.dims) parts.push_back(slice_text(d));
  std::string name = a.buffer ? name_text(a.buffer->name) : "<null>";
  if (a.as_dtype) name += fmt::format(" bitcast {}", dtype_name(*a.as_dtype));
  if (!a.storage.empty()) name += " as " + ints_text(a.storage);  // reshaped storage (ir.hpp)
  if (a.origin != 0) name += fmt::format(" from {}", a.origin);
  std::string order;
  if (!a.order.empty())  // a transposing view: its dims' storage dims, in view order
    order = " order " + ints_text(std::vector<int64_t>(a.order.begin(), a.order.end()));
  return fmt::format("{}[{}]{}", name, fmt::join(parts, ", "), order);
}

std::string value_text(const Value& v) {
  struct V {
    std::string operator()(const Access& a) const { return access_text(a); }
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const { return float_text(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<int64_t>& l) const { return ints_text(l); }
  };
  return std::visit(V{}, v);
}

// "name: float32[128, 512] sbuf core=1 offset=1024 slots=2 over i0"
std::string buffer_decl(const Buffer& b) {
  std::string s = fmt::format("{}: {}{} {}", name_text(b.name), dtype_name(b.dtype),
                              ints_text(b.shape), memory_name(b.memory));
  if (b.core != -1) s += fmt::format(" core={}", b.core);
  if (b.offset != -1) s += fmt::format(" offset={}", b.offset);
  if (b.slots != 1) s += fmt::format(" slots={}", b.slots);
  if (!b.slot_var.empty()) s += fmt::format(" over {}", name_text(b.slot_var));
  return s;
}

class Printer {
 public:
  explicit Printer(const PrintOptions& opts) : opts_(opts) {}

  std::string out;

  void loc(const Span& s) {
    if (opts_.spans && !is_default(s)) out += " " + loc_text(s);
  }

  void indent(int depth) { out.append(static_cast<size_t>(depth) * 2, ' '); }

  // A block's own span goes on its closing brace.
  void block_body(const Block& b, int depth) {
    out += "{\n";
    for (auto& s : b.stmts) stmt(s, depth + 1);
    indent(depth);
    out += "}";
    loc(b.span);
  }

  void stmt(const StmtPtr& s, int depth) {
    indent(depth);
    inline_stmt(s, depth);
    out += "\n";
  }

  // Prints a statement without leading indentation or trailing newline.
  void inline_stmt(const StmtPtr& s, int depth) {
    if (!s) {
      out += "{\n";
      indent(depth);
      out += "}";
      return;
    }
    switch (s->kind) {
      case StmtKind::Block:
        block_body(static_cast<const Block&>(*s), depth);
        return;
      case StmtKind::For: {
        auto& f = static_cast<const For&>(*s);
        if (!f.is_dynamic())
          out += fmt::format("for {} in {}({})", name_text(f.var), loop_kind_name(f.loop_kind),
                             f.extent);
        else if (!f.cond.empty())
          out += fmt::format("for {} in while_nonzero({})", name_text(f.var), f.cond);
        else
          out += fmt::format("for {} in dynamic_range({}, {}, {})", name_text(f.var),
                             f.start.str(), f.stop.str(), f.step);
        loc(f.span);
        out += " ";
        inline_stmt(f.body, depth);
        return;
      }
      case StmtKind::Alloc: {
        auto& a = static_cast<const Alloc&>(*s);
        if (!a.buffer) {
          out += "alloc <null>";
          return;
        }
        out += "alloc " + buffer_decl(*a.buffer);
        loc(a.span);
        if (opts_.spans && !same(a.buffer->span, a.span))
          out += " buffer_" + loc_text(a.buffer->span);
        return;
      }
      case StmtKind::Op: {
        auto& o = static_cast<const Op&>(*s);
        std::vector<std::string> args;
        for (auto& a : o.args)
          args.push_back(fmt::format("{}={}", name_text(a.name), value_text(a.value)));
        out += fmt::format("{}({})", opcode_name(o.code), fmt::join(args, ", "));
        loc(o.span);
        return;
      }
    }
  }

  std::string params(const std::vector<BufferPtr>& bs) {
    std::vector<std::string> parts;
    for (auto& b : bs) {
      if (!b) {
        parts.push_back("<null>");
        continue;
      }
      std::string p = buffer_decl(*b);
      if (opts_.spans && !is_default(b->span)) p += " " + loc_text(b->span);
      parts.push_back(std::move(p));
    }
    return fmt::format("{}", fmt::join(parts, ", "));
  }

 private:
  const PrintOptions& opts_;
};

}  // namespace

std::string print(const Kernel& k, const PrintOptions& opts) {
  Printer p(opts);
  p.out = fmt::format("kernel {}({}) -> ({})", name_text(k.name), p.params(k.inputs),
                      p.params(k.outputs));
  p.loc(k.span);
  p.out += " ";
  p.inline_stmt(k.body, 0);
  p.out += "\n";
  return std::move(p.out);
}

std::string print(const StmtPtr& s, const PrintOptions& opts) {
  Printer p(opts);
  p.stmt(s, 0);
  return std::move(p.out);
}

std::string print(const Access& a) {
  return access_text(a);
}

}  // namespace neuron
