// Which instruction kernel runs each engine instruction, with which operands and constants:
// each instruction's InstrDef<op>::call (instr_def.hpp, instrs/*.hpp). Written once, as a
// template over an executor, and instantiated by both: the simulator calls
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
#include "neuron/codegen/instrs/dma.hpp"
#include "neuron/codegen/instrs/gpsimd_engine.hpp"
#include "neuron/codegen/instrs/mx.hpp"
#include "neuron/codegen/instrs/random.hpp"
#include "neuron/codegen/instrs/scalar_engine.hpp"
#include "neuron/codegen/instrs/sequencer.hpp"
#include "neuron/codegen/instrs/tensor_engine.hpp"
#include "neuron/codegen/instrs/vector_engine.hpp"

namespace neuron::native {

// Runs `in` through executor `e`. Every ISA row of ops.hpp's table has its InstrDef (a missing
// one fails to compile here).
template <class E>
void call_instr(E& e, const Instr& in) {
  switch (in.op) {
#define X(op, name, level, engine, streams, signature) \
  NEURON_IF_##level(case Opcode::op : return InstrDef<Opcode::op>::call(e, in);)
    NEURON_OPCODES(X)
#undef X
    default:
      internal_error("no instruction kernel runs '{}' (an nl helper must be legalized first) at {}",
                     opcode_name(in.op), in.span.str());
  }
}

// The shape rules of `in` (InstrDef<op>::check), with the generic ones of its signature.
void check_instr_shapes(const Instr& in);

}  // namespace neuron::native
