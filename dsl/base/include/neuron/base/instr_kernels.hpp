// The instruction kernels: the one definition of what each engine instruction computes, and the
// calling convention both executors use to run them.
//
// An executor resolves every access pattern of an instruction into an NView (base pointer, five
// dims of byte strides) and calls one neuron_k_* function with the instruction's dtypes and ops
// (codegen/instr_calls.hpp says which, once for both). The kernels
// (dsl/base/src/kernels/instr_kernels.cpp) are compiled twice: into the library, where the
// simulator calls them, and, with clang-14, to bitcode that the JIT links into each kernel
// module so the constants specialize them. Keep this header C-compatible in spirit: no LLVM, no
// std containers.
#pragma once
#include <cstdint>

namespace neuron::native {

// Every pattern is normalized to exactly kDims dims: dim 0 is the pattern's first dim (the
// partition dim on chip), size-1 dims are inserted after it, so row-major element order and
// the innermost dim are those of the pattern.
inline constexpr int kDims = 5;

struct NView {
  char* base;       // first element
  uint8_t* flags;   // PSUM "written by matmul" bytes parallel to base; null outside PSUM
  int64_t size[kDims];
  int64_t stride[kDims];  // bytes
};

// `same` flags of the streaming kernels, decided at compile time. kSameShape: every operand has
// the same normalized sizes (one plain loop nest walks them all). kMayOverlap: a source may
// share bytes with the destination, so the kernel checks for a partial overlap at run time
// (without it the check is compiled away).
inline constexpr int kSameShape = 1, kMayOverlap = 2;

}  // namespace neuron::native

// Every kernel: X(name, how). `inline` kernels are linked into JIT modules from bitcode and
// specialized (their per-element work is an expression over constant ops and dtypes); `call`
// kernels do little per element or call the fast matmul, so generated code calls the library's
// copy ("neuron_host_k_<name>"), which keeps cold compiles short (docs/native.md).
#define NEURON_INSTR_KERNELS(X)                                                                \
  X(copy, inline) X(tensor_tensor, inline) X(tensor_scalar, inline) X(activation, inline)      \
  X(memset, inline) X(tensor_reduce, call) X(transpose, call) X(matmul, call)                  \
  X(copy_predicated, call) X(iota, call) X(affine_select, call) X(print, call)
// The cold paths of the streaming kernels (host only; see instr_kernels.cpp).
#define NEURON_INSTR_SNAPSHOTS(X) \
  X(copy) X(tensor_tensor) X(tensor_scalar) X(activation) X(copy_predicated) X(affine_select)

extern "C" {
using neuron_nview = neuron::native::NView;
// `same`: the flags kSameShape | kMayOverlap (neuron::native), decided at compile time.
void neuron_k_copy(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt, int same);
void neuron_k_tensor_tensor(const neuron_nview* d, const neuron_nview* a, const neuron_nview* b,
                            int ddt, int adt, int bdt, int op, int same);
void neuron_k_tensor_scalar(const neuron_nview* d, const neuron_nview* s, const neuron_nview* c0,
                            const neuron_nview* c1, int ddt, int sdt, int c0dt, int c1dt, int op0,
                            int op1, int rev0, int rev1, double imm0, double imm1, int same);
void neuron_k_activation(const neuron_nview* d, const neuron_nview* s, const neuron_nview* bias,
                         const neuron_nview* scale, const neuron_nview* rr, int ddt, int sdt,
                         int bdt, int scdt, int rrdt, int func, int reduce_op, double scale_imm,
                         int same);
// `reduced`: bit i set when normalized dim i is reduced.
void neuron_k_tensor_reduce(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt, int op,
                            int reduced, int negate);
void neuron_k_transpose(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
// `fast`: 1 when the operands are in the contiguous layout neuron_matmul_* takes (compile time).
void neuron_k_matmul(const neuron_nview* d, const neuron_nview* st, const neuron_nview* mv, int ddt,
                     int sdt, int mdt, int accumulate, int fast);
void neuron_k_copy_predicated(const neuron_nview* d, const neuron_nview* s, const neuron_nview* pred,
                              int ddt, int sdt, int pdt, int same);
void neuron_k_memset(const neuron_nview* d, int ddt, double value);
// `pat`: sizes are {partitions, pattern counts...}, strides are the coefficients (not bytes).
void neuron_k_iota(const neuron_nview* d, const neuron_nview* pat, int ddt, int64_t offset);
void neuron_k_affine_select(const neuron_nview* d, const neuron_nview* s, const neuron_nview* pat,
                            int ddt, int sdt, int64_t offset, int cmp_op, double on_false);
// The cold paths of copy, tensor_tensor, tensor_scalar, activation, copy_predicated and
// affine_select: a source partially overlaps the destination, so it is copied first (the
// simulator reads every source before writing). Same arguments as the kernels; host only.
void neuron_k_snapshot_copy(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt,
                            int same);
void neuron_k_snapshot_tensor_tensor(const neuron_nview* d, const neuron_nview* a,
                                     const neuron_nview* b, int ddt, int adt, int bdt, int op,
                                     int same);
void neuron_k_snapshot_tensor_scalar(const neuron_nview* d, const neuron_nview* s,
                                     const neuron_nview* c0, const neuron_nview* c1, int ddt,
                                     int sdt, int c0dt, int c1dt, int op0, int op1, int rev0,
                                     int rev1, double imm0, double imm1, int same);
void neuron_k_snapshot_activation(const neuron_nview* d, const neuron_nview* s,
                                  const neuron_nview* bias, const neuron_nview* scale,
                                  const neuron_nview* rr, int ddt, int sdt, int bdt, int scdt,
                                  int rrdt, int func, int reduce_op, double scale_imm, int same);
void neuron_k_snapshot_copy_predicated(const neuron_nview* d, const neuron_nview* s,
                                       const neuron_nview* pred, int ddt, int sdt, int pdt,
                                       int same);
void neuron_k_snapshot_affine_select(const neuron_nview* d, const neuron_nview* s,
                                     const neuron_nview* pat, int ddt, int sdt, int64_t offset,
                                     int cmp_op, double on_false);
// device_print: host only (formats with fmt, writes to the stream the run was given).
void neuron_k_print(const neuron_nview* s, int sdt, const char* prefix);
}
