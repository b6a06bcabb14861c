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
#include <vector>
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

// A data-dependent error found while an instruction runs (an index read at run time outside its
// range): the kernel reports it with neuron_k_fault and skips the offending element or row; the
// executor turns the first fault of a run into a UserError naming the instruction's line
// (codegen/fault.hpp). Per thread.
enum FaultKind : int {
  kFaultNone = 0,
  kFaultRowIndex = 1,     // indirect DMA: a = row index, b = rows, c = partition
  kFaultGatherIndex = 2,  // nc_n_gather/local_gather: a = element index, b = elements, c = partition
  kFaultAccess = 3,  // a register-dependent access: a = first, b = last touched, c = operand
                     // (-1 dst, i src i), d = limit (elements or bytes per partition)
  kFaultPartition = 4,  // the same for its partitions: a = first, b = last, c = operand, d = limit
  kFaultTile = 5,  // the same for the bytes of its tile (AccessPattern::alloc): a = first byte,
                   // b = last, c = operand, d = the end of the tile's (slot's) bytes
};
struct Fault {
  int kind = kFaultNone;
  int instr = -1;
  int64_t a = 0, b = 0, c = 0, d = 0;
};
Fault take_fault();  // the first fault since the last call (kind kFaultNone: none), cleared

// Native per-instruction profile (JitOptions::profile): code compiled with it brackets every
// instruction call with neuron_k_prof_now / neuron_k_prof_add, which add the elapsed
// nanoseconds and one call to entry `instr` (Instr::id) of this thread's table, when one is set.
struct InstrTicks {
  int64_t ns = 0, calls = 0;
};
void set_profile_table(std::vector<InstrTicks>* table);  // per thread; null: not recording

// A fused chain (codegen/src/fused_chains.cpp, docs/native.md "Fused chains"): up to
// kChainMax element-wise instructions, each reading the one before, run as one loop over the
// elements by neuron_k_chain, computing what each instruction's kernel computes per element.
// `code` is int64 words: the step count, kChainFields per step, then kChainReduceFields.
// `views` is kChainViews views: the first step's chain source, then per step its destination
// (null when its value only feeds the next step), its second tensor operand and its two [P, 1]
// columns (null if absent), then the reduction's destination (null without one).
inline constexpr int kChainMax = 6;
enum ChainField : int {
  kChKind,        // ChainKind
  kChDdt,         // destination dtype (the value is rounded to it)
  kChXdt,         // the dtype the step reads its chain value as (its source's)
  kChOdt,         // the second tensor operand's dtype
  kChOtherFirst,  // tensor_tensor: 1 when the chain value is the second operand (data2)
  kChOp0,         // alu op0 (tensor_scalar, tensor_tensor) or activation function
  kChOp1,         // tensor_scalar op1
  kChRev0,
  kChRev1,
  kChImm0,  // double bits: tensor_scalar imm0 (activation: bias 0)
  kChImm1,  // double bits: tensor_scalar imm1 (activation: its scale)
  kChC0dt,
  kChC1dt,
  kChStore,  // 1: the step writes its destination (else its view is null)
  kChStream,  // 1 (last step only): write whole 64-byte blocks with non-temporal stores where
              // the destination's rows allow (a large kernel output: lower_program.cpp)
  kChainFields
};
enum ChainKind : int { kChTensorScalar = 1, kChTensorTensor, kChActivation, kChCopy };
// A chain may end in a tensor_reduce of its last value over all free axes: code words after the
// steps' (kChRedOn 0: none), its destination the last view.
enum ChainReduceField : int { kChRedOn, kChRedOp, kChRedDdt, kChRedNegate, kChainReduceFields };
inline constexpr int kChainReduceAt = 1 + kChainMax * kChainFields;
inline constexpr int kChainCodeWords = kChainReduceAt + kChainReduceFields;
inline constexpr int kChainViews = 1 + 4 * kChainMax + 1;

// A streaming chain's non-temporal stores are not ordered by the release that hands a worker's
// results to the caller: each worker fences once after its programs (native_run.cpp), not each
// chain call (a fence per row, waiting for the stores to drain, cost more than they saved).
inline void stream_fence() {
#if defined(__x86_64__)
  __builtin_ia32_sfence();
#endif
}

}  // namespace neuron::native

// Every kernel: X(name, how). `inline` kernels are linked into JIT modules from bitcode and
// specialized (their per-element work is an expression over constant ops and dtypes, and so
// vectorizes: reductions follow the lane-blocked order of builtins.hpp); `call`
// kernels do little per element or call the fast matmul, so generated code calls the library's
// copy ("neuron_host_k_<name>"), which keeps cold compiles short (docs/native.md).
#define NEURON_INSTR_KERNELS(X)                                                                \
  X(copy, inline) X(tensor_tensor, inline) X(tensor_scalar, inline) X(activation, inline)      \
  X(memset, inline) X(tensor_reduce, inline) X(transpose, call) X(matmul, call)                \
  X(copy_predicated, inline) X(iota, call) X(affine_select, inline) X(print, call)                 \
  X(dma_indirect, call) X(gather, call) X(local_gather, call) X(load_scalar, inline)           \
  X(store_scalar, inline) X(tensor_tensor_scan, call) X(partition_reduce, call) X(max8, call)    \
  X(find_index8, call) X(match_replace8, call) X(bn_stats, call) X(bn_aggr, call)              \
  X(stream_shuffle, call) X(rng, call) X(dropout, call) X(rng_seed, call) X(rng_skip, call)    \
  X(matmul_mx, call) X(quantize_mx, call) X(copy_bytes, call) X(psum_flags_set, call)        \
  X(psum_flags_get, call) X(chain, inline) X(matmul_at, call)
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
// `layout` (compile time): kMatmulFast when the operands are in the contiguous layout
// neuron_matmul_* takes, plus kMatmulSameMoving when the instruction just before this one was an
// nc_matmul reading the same moving view (InstrArgs::same_moving).
enum { kMatmulFast = 1, kMatmulSameMoving = 2 };
void neuron_k_matmul(const neuron_nview* d, const neuron_nview* st, const neuron_nview* mv, int ddt,
                     int sdt, int mdt, int accumulate, int layout);
// A transposed matmul (plan.hpp TransposedMatmul): d (+)= s @ mv, s [M, K] and mv [K, N] both
// fp32 or both bf16 (sdt), in the fast layout (checked by the lowering); neuron_matmul_f32_at or
// neuron_matmul_bf16_at (which has no canonical_zero: the bf16 rule never shows a zero's sign).
void neuron_k_matmul_at(const neuron_nview* d, const neuron_nview* s, const neuron_nview* mv,
                        int sdt, int accumulate, int canonical_zero);
void neuron_k_copy_predicated(const neuron_nview* d, const neuron_nview* s, const neuron_nview* pred,
                              int ddt, int sdt, int pdt, int same);
void neuron_k_memset(const neuron_nview* d, int ddt, double value);
// code: int64 words, views: kChainViews views (see kChainMax); both passed as bytes.
void neuron_k_chain(const char* code, const char* views);
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
// psum_flags_set: the "written by matmul" flags of d's elements <- s's values != 0 (d's values
// stay). psum_flags_get: d's values <- 1 where s's elements have their flags set, else 0.
void neuron_k_psum_flags_set(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
void neuron_k_psum_flags_get(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
// dma_copy with indirect rows: partition p moves row idx[p] (of `rows`) of the HBM side, `side` 1
// (src) or 2 (dst), whose dim 0 stride is the row stride. Out-of-range rows fault or, with
// oob_skip, are skipped.
void neuron_k_dma_indirect(const neuron_nview* d, const neuron_nview* s, const neuron_nview* idx,
                           int ddt, int sdt, int idt, int side, int64_t rows, int oob_skip,
                           int instr);
// nc_n_gather: d[p, j] = s[p, flat idx[p, j]] over s's flattened free dims.
void neuron_k_gather(const neuron_nview* d, const neuron_nview* s, const neuron_nview* idx, int ddt,
                     int sdt, int idt, int instr);
// local_gather: per group of 16 partitions, the group's indices (partition-first, the first
// `valid`) each select `per` consecutive elements of every partition's own row of s.
void neuron_k_local_gather(const neuron_nview* d, const neuron_nview* s, const neuron_nview* idx,
                           int ddt, int sdt, int idt, int64_t per, int64_t valid, int instr);
// tensor_tensor_scan: per partition, over the free dims in row-major order,
// r[i] = op1(op0(a[i], r[i-1]), b[i]) from r[-1] = init (a [P, 1] column, or init_imm when null);
// rev0 / rev1 swap op0's / op1's operands. The running value is fp32; d[i] is r[i] in d's dtype.
void neuron_k_tensor_tensor_scan(const neuron_nview* d, const neuron_nview* a,
                                 const neuron_nview* b, const neuron_nview* init, int ddt, int adt,
                                 int bdt, int idt, int op0, int op1, int rev0, int rev1,
                                 double init_imm);
// tensor_partition_reduce: d[0, j] = op over partitions p of s[p, j] (fp32, or integer bits for
// bitwise ops on integer tiles).
void neuron_k_partition_reduce(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt,
                               int op);
// max8: d[p, 0..7] = the 8 largest values of s[p, :], descending.
void neuron_k_max8(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
// nc_find_index8: d[p, k] = the index in data[p, :] of vals[p, k] (a repeated value takes the
// next occurrence; with reverse, slots from the last: nc_match_replace8's dst_idx); all ones
// when absent.
void neuron_k_find_index8(const neuron_nview* d, const neuron_nview* data, const neuron_nview* vals,
                          int ddt, int sdt, int vdt, int reverse);
// nc_match_replace8: d = data with the occurrences nc_find_index8 finds replaced by imm.
void neuron_k_match_replace8(const neuron_nview* d, const neuron_nview* data,
                             const neuron_nview* vals, int ddt, int sdt, int vdt, double imm);
// bn_stats: d[p, :] = count, mean, sum of squared deviations of the even-indexed elements of
// s[p, :], then the same for the odd-indexed ones.
void neuron_k_bn_stats(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
// bn_aggr: d[p, :] = mean, variance of the (count, mean, M2) triples of s[p, :] combined.
void neuron_k_bn_aggr(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
// nc_stream_shuffle: in every group of 32 partitions, d[i] = s[mask[i]] (mask entry 255: d[i]
// unchanged); the 32 mask bytes are packed little-endian into m0..m3.
void neuron_k_stream_shuffle(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt,
                             int64_t m0, int64_t m1, int64_t m2, int64_t m3);
// Random numbers (builtins.hpp "random numbers"): `st` is a [P, 4] uint32 state view, row p for
// partition p of the destination. rng: element i of row p is rng_bits(key, counter + i): its low
// 32 bits for an integer destination, low + (high - low) * rng_unit(bits) (in double, rounded
// once) for a float one. dropout: d = 0 where rng_unit(bits) < prob (a [P, 1] column or
// prob_imm), else s. Neither advances the counter: rng_skip adds `count` to every row's counter.
// rng_seed: row p = rng_key(seed, p), counter 0, from a [P, 1] or [1, 1] seed column (integer
// values taken modulo 2^32) or seed_imm.
void neuron_k_rng(const neuron_nview* d, const neuron_nview* st, int ddt, double low, double high);
void neuron_k_dropout(const neuron_nview* d, const neuron_nview* s, const neuron_nview* st,
                      const neuron_nview* prob, int ddt, int sdt, int pdt, double prob_imm);
void neuron_k_rng_seed(const neuron_nview* d, const neuron_nview* seed, int sdt, double seed_imm);
void neuron_k_rng_skip(const neuron_nview* d, const neuron_nview* st, int64_t count);
// MX (builtins.hpp "MX"). matmul_mx: d[M, N] = sum over k, then q, of fma(st value q of [k, m]
// times its scale, mv value q of [k, n] times its scale); the scale of partitions 8g..8g+7 is
// row (g / 4) * 32 + g % 4 of ss / ms, column m / n; accumulate as matmul. quantize_mx: per
// block of 8 partitions x one x4 element of d, sc's code mx_block_scale(largest fp32 exponent
// field of the block's 32 values of s) and d's values mx_quantize(value, code).
void neuron_k_matmul_mx(const neuron_nview* d, const neuron_nview* st, const neuron_nview* mv,
                        const neuron_nview* ss, const neuron_nview* ms, int ddt, int sdt, int mdt,
                        int accumulate);
void neuron_k_quantize_mx(const neuron_nview* d, const neuron_nview* sc, const neuron_nview* s,
                          int ddt, int sdt);
// dma_copy bitcast: d's bytes = s's bytes (each walked row-major; equal byte counts).
void neuron_k_copy_bytes(const neuron_nview* d, const neuron_nview* s, int ddt, int sdt);
// register_load / register_store: one element as a 32-bit register value.
int64_t neuron_k_load_scalar(const neuron_nview* s, int sdt);
void neuron_k_store_scalar(const neuron_nview* d, int ddt, int64_t value);
// Records a fault (FaultKind) of instruction `instr` for the executor; host only, bound by name
// in the JIT (kernels and generated code call it).
void neuron_k_fault(int kind, int instr, int64_t a, int64_t b, int64_t c, int64_t d);
int64_t neuron_k_prof_now();                        // steady clock, ns (host only)
void neuron_k_prof_add(int instr, int64_t start);   // see set_profile_table (host only)
}
