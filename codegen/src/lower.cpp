// lower: turns an allocated, ISA-only Kernel into the engine program (program.hpp): loops stay
// rolled, every instruction gets its engine, typed arguments and access patterns.
#include <map>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/base/target.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using namespace passes;

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
    mark_same_moving(prog_.body);
    prog_.num_instrs = next_id_;
    return std::move(prog_);
  }

 private:
  const Target& target_;
  Program prog_;
  std::map<const Buffer*, int> tensor_index_;
  mutable std::map<const Buffer*, int> buffer_ids_;  // on-chip buffers, numbered as met
  int next_id_ = 0;

  // Consecutive matmuls over one moving tile (a row group's subtiles sharing a B tile): nothing
  // runs between them and a matmul writes only PSUM, so the second reads the SBUF values the
  // first read. Same dtypes, shapes and explicit accumulate flags besides, so both take the
  // same path in the native kernel (neuron_k_matmul).
  static void mark_same_moving(std::vector<ProgNode>& body) {
    auto same_form = [](const AccessPattern& a, const AccessPattern& b) {
      return a.memory == b.memory && a.dtype == b.dtype && a.dims == b.dims;
    };
    for (size_t i = 0; i < body.size(); ++i) {
      ProgNode& n = body[i];
      if (n.kind == ProgNode::Kind::loop) {
        mark_same_moving(n.body);
        continue;
      }
      if (i == 0 || n.instr.op != Opcode::nc_matmul) continue;
      const ProgNode& prev = body[i - 1];
      if (prev.kind != ProgNode::Kind::instr || prev.instr.op != Opcode::nc_matmul) continue;
      const Instr& a = prev.instr;
      Instr& b = n.instr;
      b.args.same_moving = a.src[1] == b.src[1] && b.src[1].memory == Memory::sbuf &&
                           a.dst.memory == Memory::psum && same_form(a.dst, b.dst) &&
                           same_form(a.src[0], b.src[0]) && a.args.accumulate != -1 &&
                           b.args.accumulate != -1;
    }
  }

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
      // The last slot ends at its own size: a PSUM tile may start mid-bank (allocate.cpp).
      int64_t end = buf.offset + slot_stride(buf) * (buf.slots - 1) + buf.slot_bytes();
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
    p.dtype = a.dtype();
    auto rs = row_strides(a.storage_shape());
    NEURON_ASSERT(a.dims.size() == a.storage_shape().size(), "view rank {} != storage rank {} for {}",
                  a.dims.size(), a.storage_shape().size(), b.name);
    if (is_on_chip(b.memory)) {
      NEURON_ASSERT(b.offset >= 0, "buffer {} reached lower without an offset", b.name);
      p.partition = a.dims[0].start;
      p.dims.push_back({a.dims[0].step == 0 ? 0 : 1, a.dims[0].size});
      const int64_t es = dtype_bytes(a.dtype());  // storage elements are the view's
      Affine off(b.offset + a.origin * es);
      for (size_t d = 1; d < a.dims.size(); ++d) off += a.dims[d].start * (rs[d] * es);
      for (size_t d : a.kept())  // the free dims, in view order
        if (d != 0) p.dims.push_back({a.dims[d].step * rs[d], a.dims[d].size});
      p.offset = off;
      if (b.slots > 1) p.rotation = Rotation{b.slot_var, b.slots, slot_stride(b)};
      const int id = buffer_ids_.emplace(&b, static_cast<int>(buffer_ids_.size())).first->second;
      p.alloc = {b.shape.empty() ? 1 : b.shape[0], b.offset, b.offset + b.slot_bytes(), id};
    } else {
      auto it = tensor_index_.find(&b);
      NEURON_ASSERT(it != tensor_index_.end(), "HBM buffer {} is not a program tensor", b.name);
      p.tensor = it->second;
      Affine off(a.origin);
      for (size_t d = 0; d < a.dims.size(); ++d) off += a.dims[d].start * rs[d];
      for (size_t d : a.kept()) p.dims.push_back({a.dims[d].step * rs[d], a.dims[d].size});
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

  Instr instr(const Op& op) {
    Instr in;
    in.op = op.code;
    NEURON_ASSERT(opcode_level(op.code) == OpLevel::Isa,
                  "lower: nl helper {} reached lower (legalize must run first)",
                  opcode_name(op.code));
    in.engine = opcode_engine(op.code);
    in.span = op.span;
    for (const ArgSpec& spec : opcode_signature(op.code))
      if (op.has(spec.name)) bind(in, op, spec);  // absent: InstrArgs' default
    in.id = next_id_++;
    return in;
  }

  // Puts one argument where the executors read it: the slot column of ops.hpp's table. Sources
  // join Instr::src in signature order.
  void bind(Instr& in, const Op& op, const ArgSpec& spec) const {
    InstrArgs& a = in.args;
    const char* n = spec.name;
    if (const Access* v = op.access(n)) {
      switch (spec.slot) {
        case ArgSlot::dst:
          in.dst = pattern(*v);
          return;
        case ArgSlot::reduce_res:
          in.has_reduce_res = true;
          in.reduce_res = pattern(*v);
          return;
        case ArgSlot::src_rows:
        case ArgSlot::dst_rows: {
          const bool on_src = spec.slot == ArgSlot::src_rows;
          const Access& hbm = *op.access(on_src ? "src" : "dst");
          a.indirect = on_src ? InstrArgs::Indirect::src : InstrArgs::Indirect::dst;
          // Index i selects row start + step * i; the rows it may name are those of the
          // dim from start on, step apart (the view's offset and stride already hold both).
          const DimSlice& r = hbm.dims.at(rows_dim(hbm));
          const int64_t total = hbm.storage_shape().at(rows_dim(hbm));
          a.indirect_rows = std::max<int64_t>(0, (total - r.start.constant + r.step - 1) / r.step);
          break;
        }
        case ArgSlot::bias_tile:
          a.bias_tile = true;
          break;
        case ArgSlot::imm0:  // a [P, 1] tile instead of the immediate
          a.operand0_tile = true;
          break;
        case ArgSlot::imm1:
          a.operand1_tile = true;
          break;
        case ArgSlot::scale:
          a.scale_tile = true;
          break;
        default:
          break;
      }
      in.src.push_back(pattern(*v));
      return;
    }
    switch (spec.slot) {
      case ArgSlot::op0:
        a.op0 = alu(op, n);
        break;
      case ArgSlot::op1:
        a.op1 = alu(op, n);
        break;
      case ArgSlot::reduce_op:
        a.reduce_op = alu(op, n);
        break;
      case ArgSlot::cmp_op:
        a.cmp_op = alu(op, n);
        break;
      case ArgSlot::reverse0:
        a.reverse0 = op.get_int(n, 0) != 0;
        break;
      case ArgSlot::reverse1:
        a.reverse1 = op.get_int(n, 0) != 0;
        break;
      case ArgSlot::negate:
        a.negate = op.get_int(n, 0) != 0;
        break;
      case ArgSlot::oob_skip:
        a.oob_skip = op.get_int(n, 0) != 0;
        break;
      case ArgSlot::bitcast:
        a.bitcast = op.get_int(n, 0) != 0;
        break;
      case ArgSlot::imm0:
        a.imm0 = op.get_float(n, 0.0);
        break;
      case ArgSlot::imm1:
        a.imm1 = op.get_float(n, 0.0);
        break;
      case ArgSlot::scale:
        a.scale = op.get_float(n, 1.0);
        break;
      case ArgSlot::func: {
        auto f = act_func_from_name(op.get_string(n));
        NEURON_ASSERT(f, "{}: unverified func '{}'", opcode_name(op.code), op.get_string(n));
        a.func = *f;
        break;
      }
      case ArgSlot::axes:
        for (auto ax : op.get_ints(n)) a.axes.push_back(static_cast<int>(ax));
        break;
      case ArgSlot::accumulate:
        a.accumulate = static_cast<int>(op.get_int(n, -1));
        break;
      case ArgSlot::pattern:
        a.pattern = op.get_ints(n);
        break;
      case ArgSlot::offset:
        a.offset = op.get_int(n, 0);
        break;
      case ArgSlot::channel_multiplier:
        a.channel_multiplier = op.get_int(n, 0);
        break;
      case ArgSlot::num_elem_per_idx:
        a.num_elem_per_idx = op.get_int(n, 1);
        break;
      case ArgSlot::num_valid_indices:
        a.num_valid_indices = op.get_int(n, -1);
        break;
      case ArgSlot::prefix:
        a.prefix = op.get_string(n);
        break;
      case ArgSlot::reg:
        a.reg = op.get_string(n);
        break;
      case ArgSlot::src_reg:
        a.src_reg = op.get_string(n);
        break;
      default:
        NEURON_ASSERT(false, "{}: argument '{}' has no lowering slot ({})", opcode_name(op.code),
                      n, arg_slot_name(spec.slot));
    }
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
