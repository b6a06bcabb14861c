// lower: turns an allocated, ISA-only Kernel into the engine program (program.hpp): loops stay
// rolled, every instruction gets its engine, typed arguments and access patterns.
#include <map>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/base/target.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using namespace passes;

// Elements between consecutive indices of each buffer dimension (row-major).
std::vector<int64_t> row_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

class Lowerer {
 public:
  Lowerer(const Kernel& k, const Target& t) : target_(t) {
    prog_.name = k.name;
    prog_.target = t.name;
    for (auto& b : k.inputs) add_tensor(b, TensorDecl::Role::input);
    for (auto& b : k.outputs) add_tensor(b, TensorDecl::Role::output);
  }

  Program run(const StmtPtr& body) {
    collect_scratch(body);
    lower_stmt(body, prog_.body);
    prog_.num_instrs = next_id_;
    return std::move(prog_);
  }

 private:
  const Target& target_;
  Program prog_;
  std::map<const Buffer*, int> tensor_index_;
  int next_id_ = 0;

  void add_tensor(const BufferPtr& b, TensorDecl::Role role) {
    if (tensor_index_.count(b.get())) return;
    tensor_index_[b.get()] = static_cast<int>(prog_.tensors.size());
    prog_.tensors.push_back(TensorDecl{b->name, b->memory, b->shape, b->dtype, role});
  }

  // Private HBM scratch comes after inputs and outputs, in program order; on-chip buffers
  // raise the high-water marks.
  void collect_scratch(const StmtPtr& s) {
    if (!s) return;
    if (auto b = s->as<Block>()) {
      for (auto& st : b->stmts) collect_scratch(st);
    } else if (auto f = s->as<For>()) {
      collect_scratch(f->body);
    } else if (auto a = s->as<Alloc>()) {
      const Buffer& buf = *a->buffer;
      if (!is_on_chip(buf.memory)) {
        add_tensor(a->buffer, TensorDecl::Role::scratch);
        return;
      }
      NEURON_ASSERT(buf.offset >= 0, "buffer {} reached lower without an offset", buf.name);
      int64_t end = buf.offset + slot_stride(buf) * buf.slots;
      auto& mark = buf.memory == Memory::sbuf ? prog_.sbuf_bytes : prog_.psum_bytes;
      mark = std::max(mark, end);
    }
  }

  // PSUM slots each take whole banks (a matmul accumulates within one bank).
  int64_t slot_stride(const Buffer& b) const {
    if (b.memory != Memory::psum) return b.slot_bytes();
    int64_t bank = target_.psum_bank_bytes;
    return (b.slot_bytes() + bank - 1) / bank * bank;
  }

  AccessPattern pattern(const Access& a) const {
    const Buffer& b = *a.buffer;
    AccessPattern p;
    p.memory = b.memory;
    p.dtype = b.dtype;
    auto rs = row_strides(b.shape);
    NEURON_ASSERT(a.dims.size() == b.shape.size(), "view rank {} != buffer rank {} for {}",
                  a.dims.size(), b.shape.size(), b.name);
    if (is_on_chip(b.memory)) {
      NEURON_ASSERT(b.offset >= 0, "buffer {} reached lower without an offset", b.name);
      p.partition = a.dims[0].start;
      p.dims.push_back({a.dims[0].step == 0 ? 0 : 1, a.dims[0].size});
      Affine off(b.offset);
      for (size_t d = 1; d < a.dims.size(); ++d) {
        off += a.dims[d].start * (rs[d] * dtype_bytes(b.dtype));
        if (a.dims[d].keep) p.dims.push_back({a.dims[d].step * rs[d], a.dims[d].size});
      }
      p.offset = off;
      if (b.slots > 1) p.rotation = Rotation{b.slot_var, b.slots, slot_stride(b)};
    } else {
      auto it = tensor_index_.find(&b);
      NEURON_ASSERT(it != tensor_index_.end(), "HBM buffer {} is not a program tensor", b.name);
      p.tensor = it->second;
      Affine off(0);
      for (size_t d = 0; d < a.dims.size(); ++d) {
        off += a.dims[d].start * rs[d];
        if (a.dims[d].keep) p.dims.push_back({a.dims[d].step * rs[d], a.dims[d].size});
      }
      p.offset = off;
    }
    return p;
  }

  static AluOp alu(const Op& op, const char* name, AluOp fallback = AluOp::bypass) {
    if (!op.has(name)) return fallback;
    auto a = alu_op_from_name(op.get_string(name));
    NEURON_ASSERT(a, "{}: unverified ALU name '{}'", opcode_name(op.code), op.get_string(name));
    return *a;
  }

  void src(Instr& in, const Op& op, const char* name) const {
    if (auto a = op.access(name)) in.src.push_back(pattern(*a));
  }

  Instr instr(const Op& op) {
    Instr in;
    in.op = op.code;
    NEURON_ASSERT(opcode_level(op.code) == OpLevel::Isa,
                  "lower: nl helper {} reached lower (legalize must run first)",
                  opcode_name(op.code));
    in.engine = opcode_engine(op.code);
    in.span = op.span;
    if (auto d = op.access("dst")) in.dst = pattern(*d);
    InstrArgs& args = in.args;
    switch (op.code) {
      case Opcode::nc_matmul:
        src(in, op, "stationary");
        src(in, op, "moving");
        args.accumulate = static_cast<int>(op.get_int("accumulate", -1));
        break;
      case Opcode::nc_transpose:
        src(in, op, "data");
        break;
      case Opcode::activation: {
        src(in, op, "data");
        auto f = act_func_from_name(op.get_string("func"));
        NEURON_ASSERT(f, "activation: unverified func '{}'", op.get_string("func"));
        args.func = *f;
        if (op.access("bias")) {
          src(in, op, "bias");
          args.bias_tile = true;
        }
        if (op.access("scale")) {
          src(in, op, "scale");
          args.scale_tile = true;
        } else {
          args.scale = op.get_float("scale", 1.0);
        }
        args.reduce_op = alu(op, "reduce_op");
        if (auto r = op.access("reduce_res")) {
          in.has_reduce_res = true;
          in.reduce_res = pattern(*r);
        }
        break;
      }
      case Opcode::tensor_tensor:
        src(in, op, "data1");
        src(in, op, "data2");
        args.op0 = alu(op, "op");
        break;
      case Opcode::tensor_scalar:
        src(in, op, "data");
        args.op0 = alu(op, "op0");
        args.reverse0 = op.get_int("reverse0", 0) != 0;
        if (op.access("operand0")) {
          src(in, op, "operand0");
          args.operand0_tile = true;
        } else {
          args.imm0 = op.get_float("operand0", 0.0);
        }
        args.op1 = alu(op, "op1");
        args.reverse1 = op.get_int("reverse1", 0) != 0;
        if (op.access("operand1")) {
          src(in, op, "operand1");
          args.operand1_tile = true;
        } else {
          args.imm1 = op.get_float("operand1", 0.0);
        }
        break;
      case Opcode::tensor_reduce:
        src(in, op, "data");
        args.reduce_op = alu(op, "op");
        for (auto ax : op.get_ints("axes")) args.axes.push_back(static_cast<int>(ax));
        args.negate = op.get_int("negate", 0) != 0;
        break;
      case Opcode::tensor_copy:
        src(in, op, "src");
        break;
      case Opcode::dma_copy:
        src(in, op, "src");
        for (const char* side : {"src_rows", "dst_rows"}) {
          const Access* rows = op.access(side);
          if (!rows) continue;
          const bool on_src = side[0] == 's';
          const Access& hbm = *op.access(on_src ? "src" : "dst");
          in.src.push_back(pattern(*rows));
          args.indirect = on_src ? InstrArgs::Indirect::src : InstrArgs::Indirect::dst;
          args.indirect_rows = hbm.buffer->shape.at(rows_dim(hbm));
          args.oob_skip = op.get_int("oob_mode", 0) != 0;
        }
        break;
      case Opcode::nc_n_gather:
        src(in, op, "data");
        src(in, op, "indices");
        break;
      case Opcode::local_gather:
        src(in, op, "src");
        src(in, op, "index");
        args.num_elem_per_idx = op.get_int("num_elem_per_idx", 1);
        args.num_valid_indices = op.get_int("num_valid_indices", -1);
        break;
      case Opcode::register_load:
        src(in, op, "src");
        args.reg = op.get_string("reg");
        break;
      case Opcode::register_store:
        args.reg = op.get_string("reg");
        break;
      case Opcode::register_move:
        args.reg = op.get_string("reg");
        args.src_reg = op.get_string("src");
        args.imm0 = static_cast<double>(op.get_int("value", 0));
        break;
      case Opcode::tensor_copy_predicated:
        src(in, op, "src");
        src(in, op, "predicate");
        break;
      case Opcode::memset:
        args.imm0 = op.get_float("value", 0.0);
        break;
      case Opcode::iota:
        args.pattern = op.get_ints("pattern");
        args.offset = op.get_int("offset", 0);
        args.channel_multiplier = op.get_int("channel_multiplier", 0);
        break;
      case Opcode::affine_select:
        src(in, op, "on_true");
        args.pattern = op.get_ints("pattern");
        args.offset = op.get_int("offset", 0);
        args.channel_multiplier = op.get_int("channel_multiplier", 0);
        args.cmp_op = alu(op, "cmp_op", AluOp::equal);
        args.imm0 = op.get_float("on_false", 0.0);
        break;
      case Opcode::device_print:
        src(in, op, "src");
        args.prefix = op.get_string("prefix");
        break;
      default:
        break;  // engine_of already rejected nl helpers
    }
    in.id = next_id_++;
    return in;
  }

  void lower_stmt(const StmtPtr& s, std::vector<ProgNode>& out) {
    if (!s) return;
    if (auto b = s->as<Block>()) {
      for (auto& st : b->stmts) lower_stmt(st, out);
    } else if (auto f = s->as<For>()) {
      ProgNode n;
      n.kind = ProgNode::Kind::loop;
      n.var = f->var;
      n.extent = f->extent;
      n.loop_kind = f->loop_kind;
      n.start = f->start;
      n.stop = f->stop;
      n.step = f->step;
      n.cond = f->cond;
      lower_stmt(f->body, n.body);
      out.push_back(std::move(n));
    } else if (auto op = s->as<Op>()) {
      ProgNode n;
      n.kind = ProgNode::Kind::instr;
      n.instr = instr(*op);
      out.push_back(std::move(n));
    }
  }
};

}  // namespace

Program lower(const Kernel& k, const std::string& target) {
  Lowerer l(k, target_by_name(target));
  return l.run(k.body);
}

}  // namespace neuron
