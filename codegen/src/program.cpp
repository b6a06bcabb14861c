// The engine program: names, access-pattern helpers, and its readable text listing.
#include "neuron/codegen/program.hpp"

#include <fmt/format.h>

#include <cmath>

namespace neuron {

bool has_dst(Opcode op) {
  return op != Opcode::device_print && op != Opcode::register_load &&
         op != Opcode::register_move;
}

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

std::string float_text(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

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

  // Names of the source operands in Instr::src order, as the IR keyword arguments call them.
  static std::vector<std::string> source_names(const Instr& in) {
    const InstrArgs& a = in.args;
    switch (in.op) {
      case Opcode::nc_matmul:
        return {"stationary", "moving"};
      case Opcode::nc_transpose:
        return {"data"};
      case Opcode::activation: {
        std::vector<std::string> n = {"data"};
        if (a.bias_tile) n.push_back("bias");
        if (a.scale_tile) n.push_back("scale");
        return n;
      }
      case Opcode::tensor_tensor:
        return {"data1", "data2"};
      case Opcode::tensor_scalar: {
        std::vector<std::string> n = {"data"};
        if (a.operand0_tile) n.push_back("operand0");
        if (a.operand1_tile) n.push_back("operand1");
        return n;
      }
      case Opcode::tensor_reduce:
        return {"data"};
      case Opcode::tensor_copy:
      case Opcode::device_print:
      case Opcode::register_load:
        return {"src"};
      case Opcode::dma_copy:
        if (a.indirect != InstrArgs::Indirect::none)
          return {"src", a.indirect == InstrArgs::Indirect::src ? "src_rows" : "dst_rows"};
        return {"src"};
      case Opcode::nc_n_gather:
        return {"data", "indices"};
      case Opcode::local_gather:
        return {"src", "index"};
      case Opcode::tensor_copy_predicated:
        return {"src", "predicate"};
      case Opcode::affine_select:
        return {"on_true"};
      default:
        return {};
    }
  }

  // The typed arguments that matter for the opcode, in IR keyword-argument spelling.
  static std::vector<std::string> arg_texts(const Instr& in) {
    const InstrArgs& a = in.args;
    std::vector<std::string> t;
    auto alu = [](AluOp op) { return std::string(alu_op_name(op)); };
    switch (in.op) {
      case Opcode::nc_matmul:
        t.push_back(fmt::format("accumulate={}", a.accumulate));
        break;
      case Opcode::activation:
        t.push_back(fmt::format("func={}", act_func_name(a.func)));
        if (!a.scale_tile) t.push_back(fmt::format("scale={}", float_text(a.scale)));
        if (in.has_reduce_res) t.push_back(fmt::format("reduce_op={}", alu(a.reduce_op)));
        break;
      case Opcode::tensor_tensor:
        t.push_back("op=" + alu(a.op0));
        break;
      case Opcode::tensor_scalar:
        t.push_back("op0=" + alu(a.op0));
        if (!a.operand0_tile) t.push_back("operand0=" + float_text(a.imm0));
        t.push_back(fmt::format("reverse0={}", a.reverse0 ? 1 : 0));
        if (a.op1 != AluOp::bypass || a.operand1_tile) {
          t.push_back("op1=" + alu(a.op1));
          if (!a.operand1_tile) t.push_back("operand1=" + float_text(a.imm1));
          t.push_back(fmt::format("reverse1={}", a.reverse1 ? 1 : 0));
        }
        break;
      case Opcode::tensor_reduce:
        t.push_back("op=" + alu(a.reduce_op));
        t.push_back(fmt::format("axes=[{}]", fmt::join(a.axes, ", ")));
        t.push_back(fmt::format("negate={}", a.negate ? 1 : 0));
        break;
      case Opcode::memset:
        t.push_back("value=" + float_text(a.imm0));
        break;
      case Opcode::iota:
      case Opcode::affine_select:
        t.push_back(fmt::format("pattern=[{}]", fmt::join(a.pattern, ", ")));
        t.push_back(fmt::format("offset={}", a.offset));
        t.push_back(fmt::format("channel_multiplier={}", a.channel_multiplier));
        if (in.op == Opcode::affine_select) {
          t.push_back("cmp_op=" + alu(a.cmp_op));
          t.push_back("on_false=" + float_text(a.imm0));
        }
        break;
      case Opcode::device_print:
        t.push_back(fmt::format("prefix=\"{}\"", a.prefix));
        break;
      case Opcode::dma_copy:
        if (a.indirect != InstrArgs::Indirect::none)
          t.push_back(fmt::format("rows={} oob_mode={}", a.indirect_rows, a.oob_skip ? 1 : 0));
        break;
      case Opcode::local_gather:
        t.push_back(fmt::format("num_elem_per_idx={}", a.num_elem_per_idx));
        t.push_back(fmt::format("num_valid_indices={}", a.num_valid_indices));
        break;
      case Opcode::register_load:
      case Opcode::register_store:
        t.push_back("reg=" + a.reg);
        break;
      case Opcode::register_move:
        t.push_back("reg=" + a.reg);
        t.push_back(a.src_reg.empty() ? fmt::format("value={}", static_cast<int64_t>(a.imm0))
                                      : "src=" + a.src_reg);
        break;
      default:
        break;
    }
    return t;
  }

  void instr(const Instr& in, int depth) {
    std::vector<std::string> parts = {fmt::format("[{}]", in.id),
                                      std::string(engine_name(in.engine)),
                                      std::string(opcode_name(in.op))};
    if (has_dst(in.op)) parts.push_back("dst=" + pattern(in.dst));
    auto names = source_names(in);
    for (size_t i = 0; i < in.src.size(); ++i) {
      std::string n = i < names.size() ? names[i] : fmt::format("src{}", i);
      parts.push_back(n + "=" + pattern(in.src[i]));
    }
    if (in.has_reduce_res) parts.push_back("reduce_res=" + pattern(in.reduce_res));
    for (auto& t : arg_texts(in)) parts.push_back(std::move(t));
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
