// What an ISA instruction means to the executors, beyond its row in ops.hpp's table: one
// InstrDef<opcode> per instruction (instrs/*.hpp, one file per engine) holding
//   static void check(const Operands& o);      its shape rules, checked once per program for
//                                              both executors (plan.cpp check_program);
//   template <class E> static void call(E& e, const Instr& in);
//                                              which instruction kernel runs it, with which
//                                              operands and constants (the executor policy E of
//                                              instr_calls.hpp: simulator or LLVM lowering).
// The element loop itself is the kernel in neuron/base/instr_kernels.hpp, compiled into the
// simulator and to bitcode for native code. So adding an instruction is: a row in ops.hpp, an
// InstrDef here, a kernel there, and a test.
#pragma once
#include <fmt/format.h>

#include <string>
#include <vector>

#include "neuron/base/error.hpp"
#include "neuron/base/instr_kernels.hpp"
#include "neuron/codegen/plan.hpp"
#include "neuron/codegen/program.hpp"

namespace neuron::native {

template <Opcode op>
struct InstrDef;  // specialised for every ISA row of NEURON_OPCODES

// The kernel function and its name ("copy" for neuron_k_copy), for E::call.
#define NEURON_KERNEL(name) &neuron_k_##name, #name

// Expands `x` for ISA rows of NEURON_OPCODES only: NEURON_IF_##level(x).
#define NEURON_IF_Isa(...) __VA_ARGS__
#define NEURON_IF_Nl(...)

// An operand's sizes as the instruction walks it (partition dim first).
struct OperandShape {
  std::vector<int64_t> sizes;
  int64_t count = 1;
  int64_t partitions() const { return sizes.empty() ? 1 : sizes[0]; }
  int64_t per_partition() const { return partitions() == 0 ? 0 : count / partitions(); }
  std::string str() const { return fmt::format("[{}]", fmt::join(sizes, ", ")); }
};

// An instruction's operand shapes, with the checks its shape rules share.
struct Operands {
  const Instr& in;
  std::vector<OperandShape> src;  // Instr::src order (source_specs names them)
  OperandShape dst;

  explicit Operands(const Instr& i);
  const InstrArgs& args() const { return in.args; }
  std::string_view name() const { return opcode_name(in.op); }
  OperandShape shape(const AccessPattern& ap, const char* what) const;

  template <typename... A>
  [[noreturn]] void fail(const char* rule, fmt::format_string<A...> f, A&&... a) const {
    user_error(in.span, rule, "{}: {}", name(), fmt::format(f, std::forward<A>(a)...));
  }
  // src[i] has as many elements as dst.
  void same_count(size_t i, const char* what) const;
  // src[i] holds one value per partition of src[of].
  void column(size_t i, size_t of, const char* what) const;
  void same_partitions(size_t i, const char* what) const;  // src[i] and dst
  // iota/affine_select: [stride, count] pairs covering dst.
  void affine_pattern() const;
};

// iota/affine_select value pattern: sizes {P, counts...}, strides = coefficients.
NormLayout value_pattern_layout(const Instr& in);
// device_print's first line: "prefix [shape] dtype\n".
std::string print_header(const Instr& in);
// The `same` flags (instr_abi) of a streaming kernel: one loop nest when every operand has the
// destination's normalized sizes; a run-time overlap check when a source may share its bytes.
int same_flags(const Instr& in, std::initializer_list<const NormLayout*> layouts,
               std::initializer_list<const AccessPattern*> sources);

inline int dtype_arg(const AccessPattern& ap) { return static_cast<int>(ap.dtype); }
inline int alu_arg(AluOp o) { return static_cast<int>(o); }

// The call of a kernel taking (dst, src, dst dtype, src dtype): one source, no constants.
template <class E, class K>
void call_dst_src(E& e, const Instr& in, K kernel, const char* name) {
  NormLayout ld, l0;
  auto s = e.view(in.src[0], in, l0);
  auto d = e.view(in.dst, in, ld);
  e.call(kernel, name, d, s, dtype_arg(in.dst), dtype_arg(in.src[0]));
}

}  // namespace neuron::native
