// The engine program: names, access-pattern helpers, and its readable text listing.
#include "neuron/codegen/program.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace neuron {

std::vector<const ArgSpec*> source_specs(const Instr& in) {
  const InstrArgs& a = in.args;
  std::vector<const ArgSpec*> out;
  for (const ArgSpec& spec : opcode_signature(in.op)) {
    if (!spec.is_source()) continue;
    bool present = spec.required && spec.kind != ArgKind::view_or_number;
    switch (spec.slot) {
      case ArgSlot::bias_tile:
        present = a.bias_tile;
        break;
      case ArgSlot::imm0:
        present = a.operand0_tile;
        break;
      case ArgSlot::imm1:
        present = a.operand1_tile;
        break;
      case ArgSlot::scale:
        present = a.scale_tile;
        break;
      case ArgSlot::src_rows:
        present = a.indirect == InstrArgs::Indirect::src;
        break;
      case ArgSlot::dst_rows:
        present = a.indirect == InstrArgs::Indirect::dst;
        break;
      default:
        break;
    }
    if (present) out.push_back(&spec);
  }
  return out;
}

namespace {

std::string float_text(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// The text of a scalar argument's InstrArgs slot, as the IR spells it.
std::string slot_text(const InstrArgs& a, const ArgSpec& spec) {
  auto num = [&](double v) {
    return spec.kind == ArgKind::integer ? fmt::format("{}", static_cast<int64_t>(v))
                                         : float_text(v);
  };
  auto flag = [](bool b) { return std::string(b ? "1" : "0"); };
  switch (spec.slot) {
    case ArgSlot::op0:
      return std::string(alu_op_name(a.op0));
    case ArgSlot::op1:
      return std::string(alu_op_name(a.op1));
    case ArgSlot::reduce_op:
      return std::string(alu_op_name(a.reduce_op));
    case ArgSlot::cmp_op:
      return std::string(alu_op_name(a.cmp_op));
    case ArgSlot::reverse0:
      return flag(a.reverse0);
    case ArgSlot::reverse1:
      return flag(a.reverse1);
    case ArgSlot::negate:
      return flag(a.negate);
    case ArgSlot::oob_skip:
      return flag(a.oob_skip);
    case ArgSlot::bitcast:
      return flag(a.bitcast);
    case ArgSlot::imm0:
      return num(a.imm0);
    case ArgSlot::imm1:
      return num(a.imm1);
    case ArgSlot::scale:
      return num(a.scale);
    case ArgSlot::func:
      return std::string(act_func_name(a.func));
    case ArgSlot::axes:
      return fmt::format("[{}]", fmt::join(a.axes, ", "));
    case ArgSlot::accumulate:
      return fmt::format("{}", a.accumulate);
    case ArgSlot::pattern:
      return fmt::format("[{}]", fmt::join(a.pattern, ", "));
    case ArgSlot::offset:
      return fmt::format("{}", a.offset);
    case ArgSlot::channel_multiplier:
      return fmt::format("{}", a.channel_multiplier);
    case ArgSlot::num_elem_per_idx:
      return fmt::format("{}", a.num_elem_per_idx);
    case ArgSlot::num_valid_indices:
      return fmt::format("{}", a.num_valid_indices);
    case ArgSlot::prefix:
      return fmt::format("\"{}\"", a.prefix);
    case ArgSlot::reg:
      return a.reg;
    case ArgSlot::src_reg:
      return a.src_reg;
    default:
      return "";
  }
}

}  // namespace

int64_t AccessPattern::elements() const {
  int64_t n = 1;
  for (auto& d : dims) n *= d.size;
  return n;
}

std::vector<int64_t> AccessPattern::shape() const {
  std::vector<int64_t> s;
  for (auto& d : dims) s.push_back(d.size);
  return s;
}

namespace {

std::string_view role_name(TensorDecl::Role r) {
  switch (r) {
    case TensorDecl::Role::input:
      return "input";
    case TensorDecl::Role::output:
      return "output";
    case TensorDecl::Role::scratch:
      return "scratch";
  }
  return "?";
}

class Lister {
 public:
  explicit Lister(const Program& p) : p_(p) {}
  std::string out;

  // On chip:  sbuf:float32{p=0:+128 off=1024 [1x512] rot=i0%2*2048}
  // HBM:      a#0:float32{off=i0*65536 [512x128, 1x512]}
  std::string pattern(const AccessPattern& ap) const {
    std::string s;
    size_t first_free = 0;
    std::vector<std::string> parts;
    if (is_on_chip(ap.memory)) {
      s = fmt::format("{}:{}{{", memory_name(ap.memory), dtype_name(ap.dtype));
      if (!ap.dims.empty()) {
        auto& p = ap.dims[0];
        parts.push_back(p.stride == 1
                            ? fmt::format("p={}:+{}", ap.partition.str(), p.size)
                            : fmt::format("p={}:+{}:{}", ap.partition.str(), p.size, p.stride));
        first_free = 1;
      } else {
        parts.push_back(fmt::format("p={}", ap.partition.str()));
      }
    } else {
      std::string name = ap.tensor >= 0 && static_cast<size_t>(ap.tensor) < p_.tensors.size()
                             ? p_.tensors[static_cast<size_t>(ap.tensor)].name
                             : std::string(memory_name(ap.memory));
      s = fmt::format("{}#{}:{}{{", name, ap.tensor, dtype_name(ap.dtype));
    }
    parts.push_back(fmt::format("off={}", ap.offset.str()));
    std::vector<std::string> dims;
    for (size_t i = first_free; i < ap.dims.size(); ++i)
      dims.push_back(fmt::format("{}x{}", ap.dims[i].stride, ap.dims[i].size));
    parts.push_back(fmt::format("[{}]", fmt::join(dims, ", ")));
    if (!ap.rotation.var.empty() || ap.rotation.count != 1)
      parts.push_back(
          fmt::format("rot={}%{}*{}", ap.rotation.var, ap.rotation.count, ap.rotation.bytes));
    return s + fmt::format("{}", fmt::join(parts, " ")) + "}";
  }

  // The scalar arguments in signature order: required ones always, optional ones when they
  // differ from their default (a tile operand is listed with the sources instead).
  static std::vector<std::string> arg_texts(const Instr& in) {
    static const InstrArgs defaults;
    std::vector<std::string> t;
    for (const ArgSpec& spec : opcode_signature(in.op)) {
      if (spec.is_view() || spec.slot == ArgSlot::none) continue;
      if (spec.kind == ArgKind::view_or_number) {
        auto srcs = source_specs(in);
        if (std::find(srcs.begin(), srcs.end(), &spec) != srcs.end()) continue;
      }
      std::string v = slot_text(in.args, spec);
      if (spec.required || v != slot_text(defaults, spec)) t.push_back(spec.name + ("=" + v));
    }
    return t;
  }

  void instr(const Instr& in, int depth) {
    std::vector<std::string> parts = {fmt::format("[{}]", in.id),
                                      std::string(engine_name(in.engine)),
                                      std::string(opcode_name(in.op))};
    if (opcode_has_dst(in.op)) parts.push_back("dst=" + pattern(in.dst));
    auto names = source_specs(in);
    for (size_t i = 0; i < in.src.size(); ++i) {
      std::string n = i < names.size() ? names[i]->name : fmt::format("src{}", i);
      parts.push_back(n + "=" + pattern(in.src[i]));
    }
    if (in.has_reduce_res) {  // the second destination, by its signature name
      std::string n = "reduce_res";
      for (const ArgSpec& spec : opcode_signature(in.op))
        if (spec.slot == ArgSlot::reduce_res) n = spec.name;
      parts.push_back(n + "=" + pattern(in.reduce_res));
    }
    for (auto& t : arg_texts(in)) parts.push_back(std::move(t));
    if (in.args.same_moving) parts.push_back("same_moving");
    indent(depth);
    out += fmt::format("{}\n", fmt::join(parts, " "));
  }

  void nodes(const std::vector<ProgNode>& body, int depth) {
    for (auto& n : body) {
      if (n.kind == ProgNode::Kind::instr) {
        instr(n.instr, depth);
        continue;
      }
      indent(depth);
      if (n.loop_kind != LoopKind::dynamic)
        out += fmt::format("for {} in {}({}) {{\n", n.var, loop_kind_name(n.loop_kind), n.extent);
      else if (!n.cond.empty())
        out += fmt::format("for {} in while_nonzero({}) {{\n", n.var, n.cond);
      else
        out += fmt::format("for {} in dynamic_range({}, {}, {}) {{\n", n.var, n.start.str(),
                           n.stop.str(), n.step);
      nodes(n.body, depth + 1);
      indent(depth);
      out += "}\n";
    }
  }

  void indent(int depth) { out.append(static_cast<size_t>(depth) * 2, ' '); }

 private:
  const Program& p_;
};

}  // namespace

// program NAME target=T instrs=N sbuf_bytes=B psum_bytes=B
//   tensor #I NAME: DTYPE[SHAPE] MEMORY ROLE
//   [ID] ENGINE OPCODE dst=PATTERN SOURCE=PATTERN ... ARG=VALUE ...
//   for VAR in affine_range(N) { ... }
std::string print(const Program& p) {
  Lister l(p);
  l.out = fmt::format("program {} target={} instrs={} sbuf_bytes={} psum_bytes={}\n", p.name,
                      p.target, p.num_instrs, p.sbuf_bytes, p.psum_bytes);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    auto& t = p.tensors[i];
    l.out += fmt::format("  tensor #{} {}: {}[{}] {} {}\n", i, t.name, dtype_name(t.dtype),
                         fmt::join(t.shape, ", "), memory_name(t.memory), role_name(t.role));
  }
  l.nodes(p.body, 1);
  return std::move(l.out);
}

}  // namespace neuron
