// Which instruction kernel runs each engine instruction, with which operands and constants.
// Written once, as a template over an executor, and instantiated by both: the simulator calls
// the library's kernels directly (runtime/src/sim.cpp), the LLVM lowering emits calls to them
// (codegen/llvm/lower_program.cpp). So the two executors agree by construction: they run the same
// kernels (neuron/base/instr_kernels.hpp) with the same arguments.
//
// An executor E provides:
//   using View = ...;   // how it passes an operand: const NView* (simulator), llvm::Value* (LLVM)
//   View view(const AccessPattern& ap, const Instr& in, NormLayout& layout);
//                       // resolves `ap` (one of in's operands) for the current iteration
//   View no_view();     // an absent optional operand (a null pointer)
//   View value_pattern(const NormLayout& coefficients);  // iota/affine_select: no memory
//   View text(const std::string& s);                     // a NUL-terminated string constant
//   template <class R, class... P, class... A>
//   void call(R (*kernel)(P...), const char* name, const A&... args);
//       // args are Views, Ints or numbers (converted to the kernel's parameter types)
//   using Int = ...;    // a runtime integer: int64_t (simulator), llvm::Value* (LLVM)
//   Int reg(const std::string& r);                  // a register's value
//   Int integer(int64_t v);                         // a constant
//   void set_reg(const std::string& r, Int v);
//   template <class... P, class... A>
//   void call_into(const std::string& r, int64_t (*kernel)(P...), const char* name,
//                  const A&... args);               // r = kernel(args...)
#pragma once
#include <string>

#include "neuron/base/error.hpp"
#include "neuron/base/instr_kernels.hpp"
#include "neuron/codegen/plan.hpp"
#include "neuron/codegen/program.hpp"

namespace neuron::native {

// The kernel function and its name ("copy" for neuron_k_copy), for E::call.
#define NEURON_KERNEL(name) &neuron_k_##name, #name

// iota/affine_select value pattern: sizes {P, counts...}, strides = coefficients.
NormLayout value_pattern_layout(const Instr& in);
// device_print's first line: "prefix [shape] dtype\n".
std::string print_header(const Instr& in);
// The `same` flags (instr_abi) of a streaming kernel: one loop nest when every operand has the
// destination's normalized sizes; a run-time overlap check when a source may share its bytes.
int same_flags(const Instr& in, std::initializer_list<const NormLayout*> layouts,
               std::initializer_list<const AccessPattern*> sources);

template <class E>
void call_instr(E& e, const Instr& in) {
  const auto& a = in.args;
  auto dt = [](const AccessPattern& ap) { return static_cast<int>(ap.dtype); };
  auto op = [](AluOp o) { return static_cast<int>(o); };
  NormLayout ld, l0, l1;
  switch (in.op) {
    case Opcode::dma_copy:
      if (a.indirect != InstrArgs::Indirect::none) {
        auto s = e.view(in.src[0], in, l0);
        auto idx = e.view(in.src[1], in, l1);
        auto d = e.view(in.dst, in, ld);
        return e.call(NEURON_KERNEL(dma_indirect), d, s, idx, dt(in.dst), dt(in.src[0]),
                      dt(in.src[1]), a.indirect == InstrArgs::Indirect::src ? 1 : 2,
                      a.indirect_rows, int{a.oob_skip}, in.id);
      }
      [[fallthrough]];
    case Opcode::tensor_copy: {
      auto s = e.view(in.src[0], in, l0);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(copy), d, s, dt(in.dst), dt(in.src[0]),
                    same_flags(in, {&l0, &ld}, {&in.src[0]}));
    }
    case Opcode::nc_n_gather: {
      auto s = e.view(in.src[0], in, l0);
      auto idx = e.view(in.src[1], in, l1);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(gather), d, s, idx, dt(in.dst), dt(in.src[0]), dt(in.src[1]),
                    in.id);
    }
    case Opcode::local_gather: {
      auto s = e.view(in.src[0], in, l0);
      auto idx = e.view(in.src[1], in, l1);
      auto d = e.view(in.dst, in, ld);
      const int64_t valid = a.num_valid_indices >= 0 ? a.num_valid_indices
                                                     : 16 * (l1.size[0] ? l1.count / l1.size[0] : 0);
      return e.call(NEURON_KERNEL(local_gather), d, s, idx, dt(in.dst), dt(in.src[0]),
                    dt(in.src[1]), a.num_elem_per_idx, valid, in.id);
    }
    case Opcode::register_load: {
      auto s = e.view(in.src[0], in, l0);
      return e.call_into(a.reg, NEURON_KERNEL(load_scalar), s, dt(in.src[0]));
    }
    case Opcode::register_store: {
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(store_scalar), d, dt(in.dst), e.reg(a.reg));
    }
    case Opcode::register_move:
      return e.set_reg(a.reg, a.src_reg.empty() ? e.integer(static_cast<int64_t>(a.imm0))
                                                : e.reg(a.src_reg));
    case Opcode::tensor_tensor: {
      auto x = e.view(in.src[0], in, l0);
      auto y = e.view(in.src[1], in, l1);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(tensor_tensor), d, x, y, dt(in.dst), dt(in.src[0]),
                    dt(in.src[1]), op(a.op0),
                    same_flags(in, {&l0, &l1, &ld}, {&in.src[0], &in.src[1]}));
    }
    case Opcode::tensor_scalar: {
      auto s = e.view(in.src[0], in, l0);
      size_t next = 1;
      const AccessPattern* c0 = a.operand0_tile ? &in.src[next++] : nullptr;
      const AccessPattern* c1 = a.operand1_tile ? &in.src[next++] : nullptr;
      NormLayout lc;
      auto v0 = c0 ? e.view(*c0, in, lc) : e.no_view();
      auto v1 = c1 ? e.view(*c1, in, lc) : e.no_view();
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(tensor_scalar), d, s, v0, v1, dt(in.dst), dt(in.src[0]),
                    c0 ? dt(*c0) : 0, c1 ? dt(*c1) : 0, op(a.op0), op(a.op1), int{a.reverse0},
                    int{a.reverse1}, a.imm0, a.imm1, same_flags(in, {&l0, &ld}, {&in.src[0]}));
    }
    case Opcode::activation: {
      auto s = e.view(in.src[0], in, l0);
      size_t next = 1;
      const AccessPattern* bias = a.bias_tile ? &in.src[next++] : nullptr;
      const AccessPattern* scale = a.scale_tile ? &in.src[next++] : nullptr;
      NormLayout lc;
      auto vb = bias ? e.view(*bias, in, lc) : e.no_view();
      auto vs = scale ? e.view(*scale, in, lc) : e.no_view();
      auto d = e.view(in.dst, in, ld);
      auto rr = in.has_reduce_res ? e.view(in.reduce_res, in, lc) : e.no_view();
      return e.call(NEURON_KERNEL(activation), d, s, vb, vs, rr, dt(in.dst), dt(in.src[0]),
                    bias ? dt(*bias) : 0, scale ? dt(*scale) : 0,
                    in.has_reduce_res ? dt(in.reduce_res) : 0, static_cast<int>(a.func),
                    op(a.reduce_op), a.scale, same_flags(in, {&l0, &ld}, {&in.src[0]}));
    }
    case Opcode::tensor_reduce: {
      auto s = e.view(in.src[0], in, l0);
      auto d = e.view(in.dst, in, ld);
      const int nd = static_cast<int>(in.src[0].dims.size());
      int mask = 0;
      for (int ax : a.axes) mask |= 1 << (ax + (kDims - nd));
      return e.call(NEURON_KERNEL(tensor_reduce), d, s, dt(in.dst), dt(in.src[0]),
                    op(a.reduce_op), mask, int{a.negate});
    }
    case Opcode::nc_transpose: {
      auto s = e.view(in.src[0], in, l0);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(transpose), d, s, dt(in.dst), dt(in.src[0]));
    }
    case Opcode::nc_matmul: {
      auto st = e.view(in.src[0], in, l0);
      auto mv = e.view(in.src[1], in, l1);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(matmul), d, st, mv, dt(in.dst), dt(in.src[0]), dt(in.src[1]),
                    a.accumulate, int{matmul_fast_layout(in, ld, l0, l1)});
    }
    case Opcode::tensor_copy_predicated: {
      auto s = e.view(in.src[0], in, l0);
      auto pr = e.view(in.src[1], in, l1);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(copy_predicated), d, s, pr, dt(in.dst), dt(in.src[0]),
                    dt(in.src[1]), same_flags(in, {&l0, &l1, &ld}, {&in.src[0], &in.src[1]}));
    }
    case Opcode::memset: {
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(memset), d, dt(in.dst), a.imm0);
    }
    case Opcode::iota: {
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(iota), d, e.value_pattern(value_pattern_layout(in)), dt(in.dst),
                    a.offset);
    }
    case Opcode::affine_select: {
      auto s = e.view(in.src[0], in, l0);
      auto d = e.view(in.dst, in, ld);
      return e.call(NEURON_KERNEL(affine_select), d, s, e.value_pattern(value_pattern_layout(in)),
                    dt(in.dst), dt(in.src[0]), a.offset, op(a.cmp_op), a.imm0);
    }
    case Opcode::device_print: {
      auto s = e.view(in.src[0], in, l0);
      return e.call(NEURON_KERNEL(print), s, dt(in.src[0]), e.text(print_header(in)));
    }
    default:
      internal_error("no instruction kernel runs '{}' (an nl helper must be legalized first) at {}",
                     opcode_name(in.op), in.span.str());
  }
}

}  // namespace neuron::native
