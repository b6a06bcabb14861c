// The instruction kernels: what each engine instruction computes over resolved NViews, numbers
// via the builtins. The one definition both executors run (instr_kernels.hpp).
//
// Compiled into the library (the simulator calls it, and generated code calls its `call`
// kernels) and, by clang-14, to bitcode linked into every JIT module, where the constant
// dtype/op/shape arguments specialize these loops (docs/native.md). So: no fmt, no exceptions,
// no static state; shape rules were checked before (codegen's check_program).
#ifndef NEURON_KERNELS_BITCODE
#define NEURON_ELEMENT_FN [[gnu::always_inline]] inline  // builtins.hpp
#endif
#include "neuron/base/instr_kernels.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "neuron/base/builtins.hpp"
#include "neuron/base/builtins_avx512.hpp"
#include "neuron/base/matmul_kernel.hpp"

namespace {

namespace b = neuron::builtins;
using neuron::AluOp;
using neuron::DType;
using neuron::native::kDims;
using neuron::native::kMayOverlap;
using neuron::native::NView;

inline DType dt(int t) {
  return static_cast<DType>(t);
}
inline int64_t count_of(const NView& v) {
  int64_t n = 1;
  for (int i = 0; i < kDims; ++i) n *= v.size[i];
  return n;
}

// Walks a view in row-major order one element at a time (for operands whose shape differs).
struct Cursor {
  const NView* v;
  char* p;
  int64_t idx[kDims] = {0, 0, 0, 0, 0};
  Cursor() : v(nullptr), p(nullptr) {}
  explicit Cursor(const NView* view) : v(view), p(view ? view->base : nullptr) {}
  void next() {
    for (int d = kDims - 1; d >= 0; --d) {
      p += v->stride[d];
      if (++idx[d] < v->size[d]) return;
      p -= v->stride[d] * v->size[d];
      idx[d] = 0;
    }
  }
};

// The affine value sum(idx_d * coef_d) of iota/affine_select patterns, walked row-major.
struct ValueCursor {
  const NView* v;
  int64_t value = 0;
  int64_t idx[kDims] = {0, 0, 0, 0, 0};
  explicit ValueCursor(const NView* view) : v(view) {}
  void next() {
    for (int d = kDims - 1; d >= 0; --d) {
      value += v->stride[d];
      if (++idx[d] < v->size[d]) return;
      value -= v->stride[d] * v->size[d];
      idx[d] = 0;
    }
  }
};

// Element loops with long bodies (the transcendentals: ~45 vector operations per 8 values)
// vectorized with one vector per iteration, so each iteration waited on its own chain;
// interleaving 4 independent vectors per iteration lets the core overlap them (exp 0.90 -> 0.69
// ns per element, docs/performance.md). Only clang (the JIT's bitcode) reads it; the order of
// each element's operations, hence every bit, is unchanged.
#if defined(__clang__)
#define NEURON_INTERLEAVE _Pragma("clang loop interleave_count(4)")
#else
#define NEURON_INTERLEAVE
#endif

// The library's compiled copy inlines the element walk into each kernel, so that a kernel's
// x86-64-v3 clone (NEURON_HOST_CLONES below) runs its per-element code with that ISA (a call
// would reach the baseline copy of the walk). The bitcode leaves that to clang.
#ifdef NEURON_KERNELS_BITCODE
#define NEURON_HOST_INLINE
#else
#define NEURON_HOST_INLINE [[gnu::always_inline]]
#endif

// The rows of same-shape views (kSameShape): f(row, i0) for each index of the outer four dims,
// row[k] the address of view k's first element of the row (null for a null view).
template <int N, class F>
[[gnu::always_inline]] inline void each_row(const NView* const (&vs)[N], F&& f) {
  const NView& r = *vs[0];
  for (int64_t i0 = 0; i0 < r.size[0]; ++i0)
    for (int64_t i1 = 0; i1 < r.size[1]; ++i1)
      for (int64_t i2 = 0; i2 < r.size[2]; ++i2)
        for (int64_t i3 = 0; i3 < r.size[3]; ++i3) {
          char* row[N];
#pragma GCC unroll 16
          for (int k = 0; k < N; ++k)
            row[k] = vs[k] ? vs[k]->base + i0 * vs[k]->stride[0] + i1 * vs[k]->stride[1] +
                                 i2 * vs[k]->stride[2] + i3 * vs[k]->stride[3]
                           : nullptr;
          f(row, i0);
        }
}

// Calls f(ptrs, p) for every element in row-major order of views[0]; p is the index along
// views[0]'s dim 0 (its partition). Null views get null pointers. With `same`, all views have
// views[0]'s sizes and the walk is a plain loop nest the optimizer can vectorize (the loops over
// the views unrolled, so each view's pointer is its own value: the chain walks 13).
template <int N, class F>
NEURON_HOST_INLINE inline void each(const NView* const (&vs)[N], int same, F&& f) {
  const NView& r = *vs[0];
  if (same & neuron::native::kSameShape) {
    each_row(vs, [&](char** row, int64_t i0) __attribute__((always_inline)) {
      NEURON_INTERLEAVE
      for (int64_t i4 = 0; i4 < r.size[4]; ++i4) {
        char* ptrs[N];
#pragma GCC unroll 16
        for (int k = 0; k < N; ++k) ptrs[k] = vs[k] ? row[k] + i4 * vs[k]->stride[4] : nullptr;
        f(ptrs, i0);
      }
    });
    return;
  }
  const int64_t n = count_of(r);
  if (n == 0) return;
  const int64_t per = n / r.size[0];
  Cursor cs[N];
  for (int k = 0; k < N; ++k) cs[k] = Cursor(vs[k]);
  int64_t p = 0, f_in_p = 0;
  for (int64_t i = 0; i < n; ++i) {
    char* ptrs[N];
    for (int k = 0; k < N; ++k) ptrs[k] = cs[k].p;
    f(ptrs, p);
    for (int k = 0; k < N; ++k)
      if (vs[k]) cs[k].next();
    if (++f_in_p == per) {
      f_in_p = 0;
      ++p;
    }
  }
}

template <class F>
inline void each1(const NView& v, F&& f) {
  const NView* vs[1] = {&v};
  each(vs, 1, [&](char** p, int64_t) { f(p[0]); });
}

// Sets the PSUM flag bytes of every element of d to `value`, a row at a time where the
// innermost dim is contiguous (the usual tile).
inline void fill_flags(const NView& d, int esize, int value) {
  if (!d.flags) return;
  const bool rows = d.stride[kDims - 1] == esize;
  const int64_t inner = rows ? d.size[kDims - 1] * esize : esize;
  for (int64_t i0 = 0; i0 < d.size[0]; ++i0)
    for (int64_t i1 = 0; i1 < d.size[1]; ++i1)
      for (int64_t i2 = 0; i2 < d.size[2]; ++i2)
        for (int64_t i3 = 0; i3 < d.size[3]; ++i3) {
          const int64_t o =
              i0 * d.stride[0] + i1 * d.stride[1] + i2 * d.stride[2] + i3 * d.stride[3];
          if (rows) {
            std::memset(d.flags + o, value, static_cast<size_t>(inner));
          } else {
            for (int64_t i4 = 0; i4 < d.size[kDims - 1]; ++i4)
              std::memset(d.flags + o + i4 * d.stride[kDims - 1], value,
                          static_cast<size_t>(esize));
          }
        }
}

// A write to PSUM by anything but a matmul makes the next auto-accumulate matmul overwrite.
inline void clear_flags(const NView& d, int esize) {
  fill_flags(d, esize, 0);
}

// A reduction's results r (one per element of d, in its row-major order) into d, negated when
// asked (tensor_reduce, and a fused chain's reduction).
inline void store_reduced(const NView& d, int ddt, const float* r, bool negate) {
  int64_t i = 0;
  each1(d, [&](char* p) {
    const float v = r[i++];
    b::store_f32(p, dt(ddt), negate ? -v : v);
  });
  clear_flags(d, neuron::dtype_bytes(dt(ddt)));
}

// One value per partition of a [P, 1] operand tile, in its row-major order.
inline void column(const NView* c, int cdt, double imm, int64_t P, float* out) {
  if (!c) {
    for (int64_t p = 0; p < P; ++p) out[p] = static_cast<float>(imm);
    return;
  }
  int64_t i = 0;
  each1(*c, [&](char* p) { out[i++] = b::load_f32(p, dt(cdt)); });
}
inline void column_int(const NView* c, int cdt, double imm, int64_t P, int64_t* out) {
  if (!c) {
    for (int64_t p = 0; p < P; ++p) out[p] = static_cast<int64_t>(std::llround(imm));
    return;
  }
  int64_t i = 0;
  each1(*c, [&](char* p) { out[i++] = b::load_int(p, dt(cdt)); });
}

// Results a [P, F] -> [P, 1] reduction computes at once (builtins.hpp reduce_runs).
constexpr int kRowsAtOnce = 8;
// A fused chain's reduction buffers kRowsAtOnce rows of up to this many values (8 KiB) and
// reduces them at once; longer rows feed their lanes as they go (a buffer of 8 rows of 1024
// crowded the L1 cache: softmax backward bf16 [4096, 1024] +5%).
constexpr int64_t kGroupedRunMax = 256;

// Scratch of n elements: on the stack when small (the common [128, 1] column), else malloc.
template <class T, int kStack = 256>
struct Scratch {
  T local[kStack];
  T* heap = nullptr;
  T* data;
  explicit Scratch(int64_t n) {
    data = n <= kStack ? local : heap = static_cast<T*>(std::malloc(sizeof(T) * (n > 0 ? n : 1)));
  }
  ~Scratch() {
    if (heap) std::free(heap);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// The byte range [lo, hi) a view touches (empty when it has no elements).
inline void byte_range(const NView& v, int esize, const char*& lo, const char*& hi) {
  lo = hi = v.base;
  int64_t down = 0, up = 0;
  for (int i = 0; i < kDims; ++i) {
    if (v.size[i] == 0) return;
    const int64_t reach = v.stride[i] * (v.size[i] - 1);
    (reach < 0 ? down : up) += reach;
  }
  lo = v.base + down;
  hi = v.base + up + esize;
}

inline bool same_view(const NView& a, const NView& b) {
  if (a.base != b.base) return false;
  for (int i = 0; i < kDims; ++i)
    if (a.size[i] != b.size[i] || (a.size[i] > 1 && a.stride[i] != b.stride[i])) return false;
  return true;
}

// A view as a matrix: dim 0 (the partition) with its stride, and the free dims when they walk
// one arithmetic sequence of `cols` elements with stride `cs` bytes. False when they do not.
inline bool as_matrix(const NView& v, int64_t& rs, int64_t& cols, int64_t& cs) {
  rs = v.stride[0];
  cols = 1;
  cs = 0;
  for (int i = kDims - 1; i >= 1; --i) {
    if (v.size[i] == 1) continue;
    if (cols == 1) {
      cs = v.stride[i];
    } else if (v.stride[i] != cs * cols) {
      return false;
    }
    cols *= v.size[i];
  }
  return true;
}

// Whether two matrix views share no bytes although their byte ranges overlap: tiles of one
// on-chip memory interleave their rows (partition p of every tile lies at p * pitch), so two
// tiles' ranges overlap whatever their columns. True when both advance `rs` bytes a row, every
// row of each spans a_span / b_span bytes from its start, and within one period of rs the two
// spans are apart.
inline bool rows_apart(const char* a, int64_t a_span, int64_t rs, const char* b, int64_t b_span,
                       int64_t rs_b) {
  if (rs != rs_b || rs <= 0 || a_span <= 0 || b_span <= 0 || a_span > rs || b_span > rs)
    return false;
  int64_t r = (b - a) % rs;
  if (r < 0) r += rs;
  return r >= a_span && r + b_span <= rs;
}

// The simulator reads all of an instruction's sources before it writes the destination; the
// streaming kernels below read and write element by element. The two agree unless a source
// *partially* overlaps the destination (exactly in place, source == destination, streams the
// same). Each streaming entry point sends such a call down a cold, out-of-line path that copies
// the source first (found by the fuzzer: tensor_tensor(dst=t[:, 8:37], data1=t[:, 6:35], ...)),
// so the common path is still a plain loop the optimizer vectorizes.
// (A view's byte range runs from its first partition's row to its last one's, so two tiles'
// ranges overlap whenever they share partitions: their rows interleave. Rows one pitch apart
// whose column spans are apart within the pitch share no byte: a slice of a wide tile read at
// a loop-dependent column, written into another tile, took the cold path at 5.7 ns an element.)
[[gnu::always_inline]] inline bool partially_overlaps(const NView* s, int sdt, const NView* d,
                                                      int ddt) {
  if (!s || same_view(*s, *d)) return false;
  const int se = neuron::dtype_bytes(dt(sdt)), de = neuron::dtype_bytes(dt(ddt));
  const char *slo, *shi, *dlo, *dhi;
  byte_range(*s, se, slo, shi);
  byte_range(*d, de, dlo, dhi);
  if (slo == shi || dlo == dhi || slo >= dhi || dlo >= shi) return false;
  int64_t srs, scols, scs, drs, dcols, dcs;
  if (!as_matrix(*s, srs, scols, scs) || !as_matrix(*d, drs, dcols, dcs) || scs < 0 || dcs < 0)
    return true;
  return !rows_apart(s->base, (scols - 1) * scs + se, srs, d->base, (dcols - 1) * dcs + de, drs);
}

// One element of `e` bytes from s to d as one word of that size: a memcpy of a run-time size
// compiles to a byte loop in the library's copy (in the bitcode, `e` is a constant).
[[gnu::always_inline]] inline void copy_element(void* d, const void* s, int e) {
  switch (e) {
    case 1: return void(std::memcpy(d, s, 1));
    case 2: return void(std::memcpy(d, s, 2));
    case 4: return void(std::memcpy(d, s, 4));
    case 8: return void(std::memcpy(d, s, 8));
    default: std::memcpy(d, s, static_cast<size_t>(e));
  }
}

// Copies every element of vs[0] to vs[1], both of one dtype of `e` bytes, element by element
// with the size known to the compiler; in the library's compiled copy (host kernels), a row
// with one memmove where both views are contiguous along their last dim. (A memcpy of a
// run-time size per element compiled to a byte loop there: host kernels' copies were 9% of
// vLLM's paged-attention test, docs/native.md. JIT modules specialize this on constant views
// and dtypes, which vectorizes the element loop, so they keep it.)
inline void copy_elements(const NView* const (&vs)[2], int same, int e) {
#ifndef NEURON_KERNELS_BITCODE
  if ((same & neuron::native::kSameShape) && vs[0]->stride[4] == e && vs[1]->stride[4] == e) {
    const size_t bytes = static_cast<size_t>(vs[0]->size[4]) * static_cast<size_t>(e);
    each_row(vs, [&](char** row, int64_t) { std::memmove(row[1], row[0], bytes); });
    return;
  }
#endif
  auto words = [&](auto word) {
    each(vs, same, [](char** p, int64_t) { std::memcpy(p[1], p[0], sizeof word); });
  };
  switch (e) {
    case 1: return words(uint8_t{});
    case 2: return words(uint16_t{});
    case 4: return words(uint32_t{});
    case 8: return words(uint64_t{});
    default: each(vs, same, [&](char** p, int64_t) { copy_element(p[1], p[0], e); });
  }
}

// A source as the kernels should read it: itself, or a contiguous copy taken before anything is
// written when it partially overlaps the destination.
struct Snapshot {
  NView copy{};
  char* heap = nullptr;
  const NView* view;
  // across_partitions: the instruction moves data between partitions, so even a source that is
  // exactly the destination must be read whole before any row is written.
  Snapshot(const NView* s, int sdt, const NView* d, int ddt, bool across_partitions = false)
      : view(s) {
    const bool same = across_partitions && s && same_view(*s, *d);
    if (!same && !partially_overlaps(s, sdt, d, ddt)) return;
    const int se = neuron::dtype_bytes(dt(sdt));
    heap = static_cast<char*>(std::malloc(static_cast<size_t>(count_of(*s) * se)));
    copy.base = heap;
    int64_t stride = se;
    for (int i = kDims - 1; i >= 0; --i) {
      copy.size[i] = s->size[i];
      copy.stride[i] = stride;
      stride *= s->size[i];
    }
    const NView* vs[2] = {s, &copy};
    copy_elements(vs, neuron::native::kSameShape, se);
    view = &copy;
  }
  ~Snapshot() { std::free(heap); }
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
};

// out[f * P + p] = in[p * F + f] for one element type, in 8 x 8 blocks so both sides stay in
// cache lines (the transpose of a 128 x 128 tile is most of a linear layer's cost otherwise).
template <class T>
inline void transpose_blocks(char* d, int64_t drs, int64_t dcs, const char* s, int64_t srs,
                             int64_t scs, int64_t P, int64_t F) {
  constexpr int64_t B = 8;
  for (int64_t p0 = 0; p0 < P; p0 += B)
    for (int64_t f0 = 0; f0 < F; f0 += B) {
      const int64_t pe = p0 + B < P ? p0 + B : P, fe = f0 + B < F ? f0 + B : F;
      for (int64_t f = f0; f < fe; ++f)
        for (int64_t p = p0; p < pe; ++p)
          *reinterpret_cast<T*>(d + f * drs + p * dcs) =
              *reinterpret_cast<const T*>(s + p * srs + f * scs);
    }
}

// The same with a dtype conversion (through fp32, as everywhere): nl.matmul's transpose of a
// bf16 operand into an fp32 PSUM tile, for one.
inline void transpose_convert(char* d, int64_t drs, int64_t dcs, const char* s, int64_t srs,
                              int64_t scs, int64_t P, int64_t F, int ddt, int sdt) {
  constexpr int64_t B = 8;
  // bf16 -> fp32 is a 16-bit shift; other pairs go through the builtins' conversions.
  const bool widen =
      sdt == static_cast<int>(DType::bfloat16) && ddt == static_cast<int>(DType::float32);
  for (int64_t p0 = 0; p0 < P; p0 += B)
    for (int64_t f0 = 0; f0 < F; f0 += B) {
      const int64_t pe = p0 + B < P ? p0 + B : P, fe = f0 + B < F ? f0 + B : F;
      for (int64_t f = f0; f < fe; ++f)
        for (int64_t p = p0; p < pe; ++p) {
          const char* from = s + p * srs + f * scs;
          char* to = d + f * drs + p * dcs;
          if (widen) {
            uint16_t h;
            std::memcpy(&h, from, 2);
            const uint32_t u = static_cast<uint32_t>(h) << 16;
            std::memcpy(to, &u, 4);
          } else {
            b::store_f32(to, dt(ddt), b::load_f32(from, dt(sdt)));
          }
        }
    }
}

// The transpose of two matrix-shaped views that share no bytes, typed copies in blocks; false
// when the views do not qualify (the general path below runs instead).
inline bool transpose_fast(const NView& d, const NView& s, int ddt, int sdt) {
  int64_t srs, F, scs, drs, dP, dcs;
  if (!as_matrix(s, srs, F, scs) || !as_matrix(d, drs, dP, dcs)) return false;
  const int64_t P = s.size[0];
  if (d.size[0] != F || dP != P || P * F == 0) return false;
  const int es = neuron::dtype_bytes(dt(sdt));
  const int ds = neuron::dtype_bytes(dt(ddt));
  const char *slo, *shi, *dlo, *dhi;
  byte_range(s, es, slo, shi);
  byte_range(d, ds, dlo, dhi);
  const int64_t s_span = scs < 0 ? -1 : (F - 1) * scs + es;
  const int64_t d_span = dcs < 0 ? -1 : (P - 1) * dcs + ds;
  if (slo < dhi && dlo < shi && !rows_apart(s.base, s_span, srs, d.base, d_span, drs))
    return false;
  if (ddt != sdt)
    transpose_convert(d.base, drs, dcs, s.base, srs, scs, P, F, ddt, sdt);
  else if (es == 4 && dcs == 4 && scs == 4)
    neuron_transpose32(d.base, drs, s.base, srs, P, F);  // contiguous rows: SIMD when it can
  else if (es == 2 && dcs == 2 && scs == 2)
    neuron_transpose16(d.base, drs, s.base, srs, P, F);
  else if (es == 4)
    transpose_blocks<uint32_t>(d.base, drs, dcs, s.base, srs, scs, P, F);
  else if (es == 2)
    transpose_blocks<uint16_t>(d.base, drs, dcs, s.base, srs, scs, P, F);
  else if (es == 1)
    transpose_blocks<uint8_t>(d.base, drs, dcs, s.base, srs, scs, P, F);
  else
    return false;
  return true;
}

// The cold path of the streaming entry points, a source partially overlapping the destination,
// lives in the library only (see the end of this file).

inline bool is_unary(AluOp op) {
  return op == AluOp::bypass || op == AluOp::abs || op == AluOp::rsqrt || op == AluOp::reciprocal ||
         op == AluOp::logical_not;
}
inline bool is_int(int t) {
  return !neuron::dtype_is_float(dt(t));
}

}  // namespace

// The library's copy is built for baseline x86-64, where every `fma` of the builtins' exp is a
// call to libm's fmaf; the activation kernel gets a clone for x86-64-v3 CPUs (AVX2, FMA), picked
// when the library loads, where it is the instruction (the same bits: one rounding either way;
// built with -ffp-contract=off, CMakeLists.txt). The simulator runs it too.
// NEURON_HOST_VECTORIZE: the library is built at -O2, whose cost model leaves a loop with a
// remainder scalar; the row loops of the host-only paths (matmul operands widened, fp32 <->
// bf16 / fp16 copies, fp32 arithmetic) ask for more.
#if !defined(NEURON_KERNELS_BITCODE) && defined(__x86_64__) && !defined(__clang__)
#define NEURON_HOST_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define NEURON_HOST_VECTORIZE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define NEURON_HOST_CLONES
#define NEURON_HOST_VECTORIZE
#endif

// The activation `exp` of fp32 rows and fp32 -> bf16 copies on AVX-512 (builtins_avx512.hpp:
// the same bits as the scalar definitions, 16 lanes at a time). Used where the CPU has the ISA:
// the library's copy asks the CPU; in the JIT's bitcode the flags below are set from the host's
// features before optimization, and the bodies a host lacks the ISA for are removed
// (lower_program.cpp).
#if defined(__x86_64__)
#ifdef NEURON_KERNELS_BITCODE
extern "C" {
int neuron_k_host_avx512 = 0;      // AVX-512 F, BW, DQ, VL and FMA
int neuron_k_host_avx512bf16 = 0;  // and AVX512-BF16
}
inline bool host_avx512() {
  return neuron_k_host_avx512 != 0;
}
inline bool host_avx512bf16() {
  return neuron_k_host_avx512bf16 != 0;
}
#else
// The matmul dispatch's own check of the avx512 variant's ISA (matmul_kernel.cpp `supports`),
// asked once (static state in the library's copy only; the bitcode's flags are above).
inline bool host_avx512() {
  static const bool yes = neuron_matmul_variant_supported("avx512") != 0;
  return yes;
}
inline bool host_avx512bf16() {
  static const bool yes = host_avx512() && __builtin_cpu_supports("avx512bf16");
  return yes;
}
#endif

namespace x86 = neuron::builtins::avx512;

// exp(s[i] * sc + bias) for the first n - n % 32 of n contiguous fp32 values into d, as the
// activation kernel's value() and store. With `lane` (a reduction at a multiple of 16), value i
// is also added into lane[i mod 16] in increasing i: reduce_run's order. They return how many
// values they did; the caller does the rest. (Two loops, not a template: a function may inline
// only code compiled for a subset of its own ISA, and the bf16 store needs AVX512-BF16.)
// lower_program.cpp finds them by their prefix.
extern "C" NEURON_AVX512 int64_t neuron_x86_exp_rows_f32(const float* s, float* d, float sc,
                                                         float bias, int64_t n, float* lane) {
  const __m512 vsc = _mm512_set1_ps(sc), vb = _mm512_set1_ps(bias);
  __m512 acc = lane ? _mm512_loadu_ps(lane) : _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = x86::exp_affine16(s + i, vsc, vb), c = x86::exp_affine16(s + i + 16, vsc, vb);
    if (lane) acc = _mm512_add_ps(_mm512_add_ps(acc, a), c);
    _mm512_storeu_ps(d + i, a);
    _mm512_storeu_ps(d + i + 16, c);
  }
  if (lane) _mm512_storeu_ps(lane, acc);
  return i;
}
extern "C" NEURON_AVX512BF16 int64_t neuron_x86_exp_rows_bf16(const float* s, uint16_t* d, float sc,
                                                              float bias, int64_t n, float* lane) {
  const __m512 vsc = _mm512_set1_ps(sc), vb = _mm512_set1_ps(bias);
  __m512 acc = lane ? _mm512_loadu_ps(lane) : _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = x86::exp_affine16(s + i, vsc, vb), c = x86::exp_affine16(s + i + 16, vsc, vb);
    if (lane) acc = _mm512_add_ps(_mm512_add_ps(acc, a), c);
    x86::store_bf16x32(d + i, a, c);
  }
  if (lane) _mm512_storeu_ps(lane, acc);
  return i;
}
// f32_to_bf16 of the first n - n % 32 of n contiguous values (tensor_copy's rows: PSUM
// evacuations into bf16, attention's p); how many.
extern "C" NEURON_AVX512BF16 int64_t neuron_x86_bf16_rows(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    x86::store_bf16x32(d + i, _mm512_loadu_ps(s + i), _mm512_loadu_ps(s + i + 16));
  return i;
}
#endif

namespace {

// Whether activation(d <- func(s * scale + bias)) may take the AVX-512 exp rows: fp32 source
// rows and fp32 or bf16 destination rows, contiguous, the reduction (if any) a sum.
[[gnu::always_inline]] inline bool exp_rows_apply(neuron::ActFunc func, const NView& d,
                                                  const NView& s, int ddt, int sdt, bool reduces,
                                                  AluOp rop, int same) {
#if defined(__x86_64__)
  if (func != neuron::ActFunc::exp || dt(sdt) != DType::float32 ||
      !(same & neuron::native::kSameShape) || s.stride[4] != 4 || (reduces && rop != AluOp::add))
    return false;
  if (dt(ddt) == DType::float32) return d.stride[4] == 4 && host_avx512();
  if (dt(ddt) == DType::bfloat16) return d.stride[4] == 2 && host_avx512bf16();
#else
  (void)func, (void)d, (void)s, (void)ddt, (void)sdt, (void)reduces, (void)rop, (void)same;
#endif
  return false;
}

// Whether tensor_copy(d <- s) may take neuron_x86_bf16_rows: fp32 into bf16, contiguous rows.
[[gnu::always_inline]] inline bool bf16_rows_apply(const NView& d, const NView& s, int ddt, int sdt,
                                                   int same) {
#if defined(__x86_64__)
  return dt(sdt) == DType::float32 && dt(ddt) == DType::bfloat16 &&
         (same & neuron::native::kSameShape) && s.stride[4] == 4 && d.stride[4] == 2 &&
         host_avx512bf16();
#else
  (void)d, (void)s, (void)ddt, (void)sdt, (void)same;
  return false;
#endif
}

[[gnu::always_inline]] inline int64_t bf16_rows(const char* s, char* d, int64_t n) {
#if defined(__x86_64__)
  return neuron_x86_bf16_rows(reinterpret_cast<const float*>(s), reinterpret_cast<uint16_t*>(d), n);
#else
  (void)s, (void)d, (void)n;
  return 0;
#endif
}

// The rows' first values (a multiple of 32) by the AVX-512 exp; how many.
[[gnu::always_inline]] inline int64_t exp_rows(const char* s, char* d, int ddt, float sc,
                                               float bias, int64_t n, float* lane) {
#if defined(__x86_64__)
  const float* sf = reinterpret_cast<const float*>(s);
  if (dt(ddt) == DType::bfloat16)
    return neuron_x86_exp_rows_bf16(sf, reinterpret_cast<uint16_t*>(d), sc, bias, n, lane);
  return neuron_x86_exp_rows_f32(sf, reinterpret_cast<float*>(d), sc, bias, n, lane);
#else
  (void)s, (void)d, (void)ddt, (void)sc, (void)bias, (void)n, (void)lane;
  return 0;
#endif
}

}  // namespace

// The cold path of the streaming entry points below: copy the sources that partially overlap
// the destination, then call the entry point again (now without overlap). It is out of line so
// the entry points stay small enough to be inlined and specialized, and not self-recursive
// (LLVM never inlines those); its views are copies made on the cold path, so the caller's own
// views never escape (escaped views would be reloaded in every loop of the hot path). JIT
// modules call the library's compiled copy, "neuron_host_k_snapshot_*" (bound by
// codegen/llvm/jit.cpp), so no module carries these copies for LLVM to optimize (with them,
// cold compiles took twice as long).
#ifdef NEURON_KERNELS_BITCODE
#define NEURON_SNAPSHOT(name) neuron_host_k_snapshot_##name

extern "C" {
#define X(n) decltype(neuron_k_snapshot_##n) neuron_host_k_snapshot_##n;
NEURON_INSTR_SNAPSHOTS(X)
#undef X
}
#else
#define NEURON_SNAPSHOT(name) neuron_k_snapshot_##name
#endif

// n elements from S to D, `from` and `to` contiguous: T fixed, so the row is one loop with no
// dtype switch (it vectorizes). The row loop of the host-only copy below and of a matmul
// operand widened to fp32.
template <DType S, DType D>
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void convert_row(const char* from, char* to, int64_t n) {
  const int64_t se = neuron::dtype_bytes(S), de = neuron::dtype_bytes(D);
  for (int64_t i = 0; i < n; ++i) b::store_f32(to + i * de, D, b::load_f32(from + i * se, S));
}

// Host kernels (the library's compiled copy): a copy between the common float dtypes, both
// views contiguous along their rows, one convert_row per row (the generic walk converts through
// a dtype switch per element: a PSUM evacuation to bf16 took 7 ns per element there). JIT
// modules specialize the generic walk on constant dtypes instead.
#ifndef NEURON_KERNELS_BITCODE
template <DType S, DType D>
void convert_rows(const NView* const (&vs)[2]) {
  const int64_t n = vs[0]->size[kDims - 1];
  each_row(vs, [&](char** row, int64_t) { convert_row<S, D>(row[0], row[1], n); });
}
#endif

// True when it made the copy.
inline bool convert_rows(const NView* const (&vs)[2], int same, int sdt, int ddt) {
#ifdef NEURON_KERNELS_BITCODE
  (void)vs, (void)same, (void)sdt, (void)ddt;
  return false;
#else
  if (!(same & neuron::native::kSameShape) ||
      vs[0]->stride[kDims - 1] != neuron::dtype_bytes(dt(sdt)) ||
      vs[1]->stride[kDims - 1] != neuron::dtype_bytes(dt(ddt)))
    return false;
  constexpr DType f32 = DType::float32, bf16 = DType::bfloat16, f16 = DType::float16;
  const DType from = dt(sdt), to = dt(ddt);
  if (from == f32 && to == bf16) return convert_rows<f32, bf16>(vs), true;
  if (from == bf16 && to == f32) return convert_rows<bf16, f32>(vs), true;
  if (from == f32 && to == f16) return convert_rows<f32, f16>(vs), true;
  if (from == f16 && to == f32) return convert_rows<f16, f32>(vs), true;
  return false;
#endif
}

extern "C" {

void neuron_k_copy(const NView* d, const NView* s, int ddt, int sdt, int same) {
  if ((same & kMayOverlap) && partially_overlaps(s, sdt, d, ddt)) {
    NView dc = *d, sc = *s;
    return NEURON_SNAPSHOT(copy)(&dc, &sc, ddt, sdt, same);
  }
  const NView* vs[2] = {s, d};
  if (ddt == sdt) {
    copy_elements(vs, same, neuron::dtype_bytes(dt(ddt)));
  } else if (bf16_rows_apply(*d, *s, ddt, sdt, same)) {
    const int64_t n = s->size[kDims - 1];
    each_row(
        vs, [&](char** row, int64_t) __attribute__((always_inline)) {
          for (int64_t i = bf16_rows(row[0], row[1], n); i < n; ++i)
            b::store_f32(row[1] + 2 * i, DType::bfloat16,
                         b::load_f32(row[0] + 4 * i, DType::float32));
        });
  } else if (convert_rows(vs, same, sdt, ddt)) {
  } else {
    each(vs, same,
         [&](char** p, int64_t) { b::store_f32(p[1], dt(ddt), b::load_f32(p[0], dt(sdt))); });
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

}  // extern "C"

// Host kernels: fp32 tensor_tensor and tensor_scalar with add, subtract, multiply or divide on
// views contiguous along their rows, one row loop per op (alu's expression for it), so that it
// vectorizes; the generic walk calls alu with a run-time op for every element (3.4 ns per
// element in the library's copy). JIT modules specialize the generic walk on the constant ops.
#ifndef NEURON_KERNELS_BITCODE
template <AluOp Op>
[[gnu::always_inline]] inline float arith(float a, float b) {
  if constexpr (Op == AluOp::add) return a + b;
  if constexpr (Op == AluOp::subtract) return a - b;
  if constexpr (Op == AluOp::multiply) return a * b;
  if constexpr (Op == AluOp::divide) return a / b;
}

template <AluOp Op>
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void arithmetic_rows(const NView* const (&vs)[3]) {
  const int64_t n = vs[0]->size[kDims - 1];
  each_row(vs, [&](char** row, int64_t) {
    const float* x = reinterpret_cast<const float*>(row[0]);
    const float* y = reinterpret_cast<const float*>(row[1]);
    float* z = reinterpret_cast<float*>(row[2]);
    for (int64_t i = 0; i < n; ++i) z[i] = arith<Op>(x[i], y[i]);
  });
}

// z = x op o (o op x with `rev`) over one row.
template <AluOp Op>
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void scalar_row(const float* x, float* z, int64_t n,
                                                         float o, bool rev) {
  if (rev)
    for (int64_t i = 0; i < n; ++i) z[i] = arith<Op>(o, x[i]);
  else
    for (int64_t i = 0; i < n; ++i) z[i] = arith<Op>(x[i], o);
}

inline bool is_arith(AluOp op) {
  return op == AluOp::add || op == AluOp::subtract || op == AluOp::multiply ||
         op == AluOp::divide;
}

inline void scalar_row(AluOp op, const float* x, float* z, int64_t n, float o, bool rev) {
  switch (op) {
    case AluOp::add: return scalar_row<AluOp::add>(x, z, n, o, rev);
    case AluOp::subtract: return scalar_row<AluOp::subtract>(x, z, n, o, rev);
    case AluOp::multiply: return scalar_row<AluOp::multiply>(x, z, n, o, rev);
    default: return scalar_row<AluOp::divide>(x, z, n, o, rev);
  }
}

template <int N>
inline bool f32_rows(const NView* const (&vs)[N], int same) {
  if (!(same & neuron::native::kSameShape)) return false;
  for (const NView* v : vs)
    if (v->stride[kDims - 1] != 4) return false;
  return true;
}
#endif

// True when it computed the instruction.
inline bool arithmetic_rows_f32(const NView* const (&vs)[3], int same, AluOp op, int ddt, int adt,
                                int bdt) {
#ifdef NEURON_KERNELS_BITCODE
  (void)vs, (void)same, (void)op, (void)ddt, (void)adt, (void)bdt;
  return false;
#else
  const int f32 = static_cast<int>(DType::float32);
  if (ddt != f32 || adt != f32 || bdt != f32 || !is_arith(op) || !f32_rows(vs, same))
    return false;
  switch (op) {
    case AluOp::add: return arithmetic_rows<AluOp::add>(vs), true;
    case AluOp::subtract: return arithmetic_rows<AluOp::subtract>(vs), true;
    case AluOp::multiply: return arithmetic_rows<AluOp::multiply>(vs), true;
    default: return arithmetic_rows<AluOp::divide>(vs), true;
  }
#endif
}

// tensor_scalar's fp32 form of the same: op0 with the partition's first operand over the row,
// then op1 (if any) over the result in place; each step rounds to fp32 as alu's does. True when
// it computed the instruction.
inline bool scalar_rows_f32(const NView* const (&vs)[2], int same, AluOp op0, AluOp op1, bool r0,
                            bool r1, int ddt, int sdt, const float* k0, const float* k1) {
#ifdef NEURON_KERNELS_BITCODE
  (void)vs, (void)same, (void)op0, (void)op1, (void)r0, (void)r1, (void)ddt, (void)sdt, (void)k0,
      (void)k1;
  return false;
#else
  const int f32 = static_cast<int>(DType::float32);
  const bool two = op1 != AluOp::bypass;
  if (ddt != f32 || sdt != f32 || !is_arith(op0) || (two && !is_arith(op1)) || !f32_rows(vs, same))
    return false;
  const int64_t n = vs[0]->size[kDims - 1];
  each_row(vs, [&](char** row, int64_t part) {
    const float* x = reinterpret_cast<const float*>(row[0]);
    float* z = reinterpret_cast<float*>(row[1]);
    scalar_row(op0, x, z, n, k0[part], r0);
    if (two) scalar_row(op1, z, z, n, k1[part], r1);
  });
  return true;
#endif
}

extern "C" {

void neuron_k_tensor_tensor(const NView* d, const NView* a, const NView* bv, int ddt, int adt,
                            int bdt, int op_, int same) {
  if ((same & kMayOverlap) &&
      (partially_overlaps(a, adt, d, ddt) || partially_overlaps(bv, bdt, d, ddt))) {
    NView dc = *d, ac = *a, bc = *bv;
    return NEURON_SNAPSHOT(tensor_tensor)(&dc, &ac, &bc, ddt, adt, bdt, op_, same);
  }
  const AluOp op = static_cast<AluOp>(op_);
  const NView* vs[3] = {a, bv, d};
  if (arithmetic_rows_f32(vs, same, op, ddt, adt, bdt)) {
  } else if (b::alu_is_bitvec(op) && is_int(ddt) && is_int(adt) && is_int(bdt)) {
    const bool shift = op == AluOp::right_shift;
    each(vs, same, [&](char** p, int64_t) {
      int64_t x = b::load_int(p[0], dt(adt));
      if (shift) x = b::shift_operand(x, dt(adt));
      b::store_int_bits(p[2], dt(ddt), b::alu_bits(op, x, b::load_int(p[1], dt(bdt))));
    });
  } else if (b::alu_is_int_exact(op) && is_int(adt) && is_int(bdt)) {
    // Two integer tiles: exact integers (NKI_API.md 3.2, GpSimd's integer ALU), stored once.
    const b::IntWrap w = b::int_wrap(dt(adt), dt(bdt));
    each(vs, same, [&](char** p, int64_t) {
      b::store_int(p[2], dt(ddt),
                   b::alu_int(op, b::load_int(p[0], dt(adt)), b::load_int(p[1], dt(bdt)), w));
    });
  } else {
    each(vs, same, [&](char** p, int64_t) {
      b::store_f32(p[2], dt(ddt),
                   b::alu(op, b::load_f32(p[0], dt(adt)), b::load_f32(p[1], dt(bdt))));
    });
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_tensor_scalar(const NView* d, const NView* s, const NView* c0, const NView* c1,
                            int ddt, int sdt, int c0dt, int c1dt, int op0_, int op1_, int rev0,
                            int rev1, double imm0, double imm1, int same) {
  if ((same & kMayOverlap) && partially_overlaps(s, sdt, d, ddt)) {
    NView dc = *d, sc = *s;
    return NEURON_SNAPSHOT(tensor_scalar)(&dc, &sc, c0, c1, ddt, sdt, c0dt, c1dt, op0_, op1_, rev0,
                                          rev1, imm0, imm1, same);
  }
  const AluOp op0 = static_cast<AluOp>(op0_), op1 = static_cast<AluOp>(op1_);
  const bool two = op1 != AluOp::bypass;
  const int64_t P = s->size[0];
  const NView* vs[2] = {s, d};
  // Integers exactly when every value is one: integer tiles and integral immediates (a
  // fractional immediate such as 2.5 takes the fp32 path, where it rounds like any fp32 value).
  auto int_operand = [](const NView* c, int cdt, double imm) {
    return c ? is_int(cdt) : (std::trunc(imm) == imm && std::fabs(imm) < 0x1p62);
  };
  if (b::alu_is_bitvec(op0) && (!two || b::alu_is_bitvec(op1)) && is_int(ddt) && is_int(sdt) &&
      int_operand(c0, c0dt, imm0) && (!two || int_operand(c1, c1dt, imm1))) {
    Scratch<int64_t> k0(P), k1(P);
    column_int(c0, c0dt, imm0, P, k0.data);
    column_int(c1, c1dt, imm1, P, k1.data);
    const bool shift0 = op0 == AluOp::right_shift;  // shifts a narrow element's own bits
    each(vs, same, [&](char** p, int64_t part) {
      int64_t v = b::load_int(p[0], dt(sdt));
      int64_t o0 = k0.data[part];
      const int64_t o1 = k1.data[part];
      if (shift0 && !rev0) v = b::shift_operand(v, dt(sdt));
      if (shift0 && rev0 && c0) o0 = b::shift_operand(o0, dt(c0dt));
      v = rev0 ? b::alu_bits(op0, o0, v) : b::alu_bits(op0, v, o0);
      if (two) v = rev1 ? b::alu_bits(op1, o1, v) : b::alu_bits(op1, v, o1);
      b::store_int_bits(p[1], dt(ddt), v);
    });
  } else {
    Scratch<float> k0(P), k1(P);
    column(c0, c0dt, imm0, P, k0.data);
    column(c1, c1dt, imm1, P, k1.data);
    const bool r0 = rev0 && !is_unary(op0), r1 = rev1 && !is_unary(op1);
    if (scalar_rows_f32(vs, same, op0, op1, r0, r1, ddt, sdt, k0.data, k1.data))
      return clear_flags(*d, 4);
    each(vs, same, [&](char** p, int64_t part) {
      float v = b::load_f32(p[0], dt(sdt));
      const float o0 = k0.data[part], o1 = k1.data[part];
      v = r0 ? b::alu(op0, o0, v) : b::alu(op0, v, o0);
      if (two) v = r1 ? b::alu(op1, o1, v) : b::alu(op1, v, o1);
      b::store_f32(p[1], dt(ddt), v);
    });
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

NEURON_HOST_CLONES
void neuron_k_activation(const NView* d, const NView* s, const NView* bias, const NView* scale,
                         const NView* rr, int ddt, int sdt, int bdt, int scdt, int rrdt, int func_,
                         int reduce_op, double scale_imm, int same) {
  if ((same & kMayOverlap) && partially_overlaps(s, sdt, d, ddt)) {
    NView dc = *d, sc = *s;
    return NEURON_SNAPSHOT(activation)(&dc, &sc, bias, scale, rr, ddt, sdt, bdt, scdt, rrdt, func_,
                                       reduce_op, scale_imm, same);
  }
  const auto func = static_cast<neuron::ActFunc>(func_);
  const AluOp rop =
      static_cast<AluOp>(reduce_op) == AluOp::bypass ? AluOp::add : static_cast<AluOp>(reduce_op);
  const int64_t P = s->size[0];
  Scratch<float> bi(P), sc(P);
  column(bias, bdt, 0.0, P, bi.data);
  column(scale, scdt, scale_imm, P, sc.data);
  auto value = [&](const char* p, int64_t part) __attribute__((always_inline)) {
    float t = b::load_f32(p, dt(sdt)) * sc.data[part];
    t = t + bi.data[part];
    return b::activate(func, t);
  };
  const NView* vs[2] = {s, d};
  const bool fast = exp_rows_apply(func, *d, *s, ddt, sdt, rr != nullptr, rop, same);
  if (!rr && fast) {
    const int64_t n = s->size[4];
    const int64_t de = neuron::dtype_bytes(dt(ddt));
    each_row(
        vs, [&](char** row, int64_t i0) __attribute__((always_inline)) {
          for (int64_t i4 = exp_rows(row[0], row[1], ddt, sc.data[i0], bi.data[i0], n, nullptr);
               i4 < n; ++i4)
            b::store_f32(row[1] + i4 * de, dt(ddt), value(row[0] + i4 * 4, i0));
        });
    clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
    return;
  }
  if (!rr) {
    // (always_inline: a lambda is not cloned with NEURON_HOST_CLONES, so it must be inlined)
    each(vs, same, [&](char** p, int64_t part) __attribute__((always_inline)) {
      b::store_f32(p[1], dt(ddt), value(p[0], part));
    });
    clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
    return;
  }
  // With reduce_res: each partition's values, in row-major order, in the lane-blocked order of
  // builtins.hpp. A row's values are kept in fp32 (dst may be narrower) and reduced after it,
  // so both loops vectorize.
  Scratch<float> red(P);
  if (same & neuron::native::kSameShape) {
    const NView& r = *s;
    Scratch<float, 2048> row(r.size[4]);  // a row of up to 8 KiB without a malloc per call
    for (int64_t i0 = 0; i0 < r.size[0]; ++i0) {
      float lane[b::kReduceLanes];
      b::reduce_init(lane, rop);
      int64_t pos = 0;
      for (int64_t i1 = 0; i1 < r.size[1]; ++i1)
        for (int64_t i2 = 0; i2 < r.size[2]; ++i2)
          for (int64_t i3 = 0; i3 < r.size[3]; ++i3) {
            const char* ps = s->base + i0 * s->stride[0] + i1 * s->stride[1] +
                             i2 * s->stride[2] + i3 * s->stride[3];
            char* pd = d->base + i0 * d->stride[0] + i1 * d->stride[1] + i2 * d->stride[2] +
                       i3 * d->stride[3];
            // The AVX-512 rows feed the lanes themselves, from a position a multiple of 16.
            const int64_t done =
                fast && pos % b::kReduceLanes == 0
                    ? exp_rows(ps, pd, ddt, sc.data[i0], bi.data[i0], r.size[4], lane)
                    : 0;
            NEURON_INTERLEAVE
            for (int64_t i4 = done; i4 < r.size[4]; ++i4) {
              const float v = value(ps + i4 * s->stride[4], i0);
              b::store_f32(pd + i4 * d->stride[4], dt(ddt), v);
              row.data[i4] = v;
            }
            b::reduce_run(lane, rop, pos + done, r.size[4] - done,
                          [&](int64_t k) { return row.data[done + k]; });
            pos += r.size[4];
          }
      red.data[i0] = b::reduce_finish(lane, rop);
    }
  } else {
    // Operands of different shapes stream in the source's row-major order, one partition
    // after another: the k-th value of a partition goes to lane k mod 16.
    Scratch<float> lanes(P * b::kReduceLanes);
    Scratch<int64_t> seen(P);
    for (int64_t p = 0; p < P; ++p) {
      b::reduce_init(lanes.data + p * b::kReduceLanes, rop);
      seen.data[p] = 0;
    }
    each(vs, same, [&](char** p, int64_t part) __attribute__((always_inline)) {
      const float v = value(p[0], part);
      b::store_f32(p[1], dt(ddt), v);
      float& l = lanes.data[part * b::kReduceLanes + (seen.data[part]++ & (b::kReduceLanes - 1))];
      l = b::alu(rop, l, v);
    });
    for (int64_t p = 0; p < P; ++p)
      red.data[p] = b::reduce_finish(lanes.data + p * b::kReduceLanes, rop);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
  int64_t i = 0;
  each1(*rr, [&](char* p) { b::store_f32(p, dt(rrdt), red.data[i++]); });
  clear_flags(*rr, neuron::dtype_bytes(dt(rrdt)));
}

// One step of a fused chain on one element: what its instruction's kernel computes from the
// chain value v (the element it reads), its second operand's element and its columns' values
// (c0: tensor_scalar's operand0 or activation's bias, c1: operand1 or scale). Each case is the
// float path of the kernel above (the chain takes float dtypes only).
[[gnu::always_inline]] inline float chain_step(const int64_t* s, float v, const char* other,
                                               float c0, float c1) {
  using namespace neuron::native;
  switch (s[kChKind]) {
    case kChTensorScalar: {
      const auto op0 = static_cast<AluOp>(s[kChOp0]), op1 = static_cast<AluOp>(s[kChOp1]);
      v = s[kChRev0] && !is_unary(op0) ? b::alu(op0, c0, v) : b::alu(op0, v, c0);
      if (op1 == AluOp::bypass) return v;
      return s[kChRev1] && !is_unary(op1) ? b::alu(op1, c1, v) : b::alu(op1, v, c1);
    }
    case kChTensorTensor: {
      const auto op = static_cast<AluOp>(s[kChOp0]);
      const float o = b::load_f32(other, dt(static_cast<int>(s[kChOdt])));
      return s[kChOtherFirst] ? b::alu(op, o, v) : b::alu(op, v, o);
    }
    case kChActivation: {
      float t = v * c1;
      t = t + c0;
      return b::activate(static_cast<neuron::ActFunc>(s[kChOp0]), t);
    }
    default:  // a copy
      return v;
  }
}

// The value a step's destination holds: v rounded to its dtype (what the next step reads).
[[gnu::always_inline]] inline float chain_rounded(int ddt, float v) {
  if (dt(ddt) == DType::float32) return v;
  char tmp[4];
  b::store_f32(tmp, dt(ddt), v);
  return b::load_f32(tmp, dt(ddt));
}

// Stores v into a `ddt` element; `exact`: v is a value of ddt already (a bf16's bits are its
// top 16, so they are stored without the rounding code, which the compiler cannot drop).
[[gnu::always_inline]] inline void chain_store(char* p, int ddt, float v, bool exact) {
  if (exact && dt(ddt) == DType::bfloat16) {
    const uint16_t h = static_cast<uint16_t>(b::f32_bits(v) >> 16);
    std::memcpy(p, &h, 2);
    return;
  }
  b::store_f32(p, dt(ddt), v);
}

}  // extern "C"

namespace {

// Streaming stores (a chain's kChStream): a kernel output much larger than the caches is
// written in whole 64-byte blocks with non-temporal stores, which skip reading each line into
// the cache before overwriting it (a third of a streaming loop's memory traffic) and leave the
// caches to data that is read again. Only the JIT's copy (clang) streams; the library's copy
// (the simulator's build) stores the same bytes plainly.
constexpr int64_t kStreamBlock = 64;

// Whether d's rows (its innermost dim, elements of esize bytes) are whole aligned blocks.
inline bool streamable(const NView& d, int esize) {
  if (d.stride[kDims - 1] != esize || (d.size[kDims - 1] * esize) % kStreamBlock ||
      reinterpret_cast<uintptr_t>(d.base) % kStreamBlock)
    return false;
  for (int i = 0; i < kDims - 1; ++i)
    if (d.size[i] > 1 && d.stride[i] % kStreamBlock) return false;
  return true;
}

// In two halves of 32 bytes: a block of 16-bit elements is computed as two 32-byte vectors
// (16 lanes of fp32 each), and one 64-byte load of them would wait for both stores to retire
// instead of taking their data (store forwarding); the core joins the halves' non-temporal
// stores into one line write.
inline void stream_block(char* dst, const char* src) {
#if defined(__clang__)
  typedef int Half __attribute__((vector_size(kStreamBlock / 2)));
  for (int h = 0; h < 2; ++h) {
    Half v;
    std::memcpy(&v, src + h * sizeof(Half), sizeof(Half));
    __builtin_nontemporal_store(v, reinterpret_cast<Half*>(dst + h * sizeof(Half)));
  }
#else
  std::memcpy(dst, src, kStreamBlock);
#endif
}

// each() over same-shape views (kSameShape) of which vs[last] is streamable(): the innermost dim
// goes one block of vs[last] at a time; f(ptrs, partition, slot) writes its vs[last] element to
// `slot` of a local block, which then goes out with one non-temporal store. An element reads
// its own position of every view only, so writing its block after the block's reads changes
// nothing even where a view is vs[last] itself.
template <int N, class F>
inline void each_streamed(const NView* const (&vs)[N], int last, int esize, F&& f) {
  const int64_t per = kStreamBlock / esize, n = vs[0]->size[4];
  each_row(vs, [&](char** row, int64_t i0) __attribute__((always_inline)) {
    for (int64_t i4 = 0; i4 < n; i4 += per) {
      alignas(kStreamBlock) char block[kStreamBlock];
      for (int64_t j = 0; j < per; ++j) {
        char* ptrs[N];
#pragma GCC unroll 16
        for (int k = 0; k < N; ++k)
          ptrs[k] = vs[k] ? row[k] + (i4 + j) * vs[k]->stride[4] : nullptr;
        f(ptrs, i0, block + j * esize);
      }
      stream_block(row[last] + i4 * esize, block);
    }
  });
}

}  // namespace

extern "C" {

void neuron_k_chain(const char* code_bytes, const char* view_bytes) {
  using namespace neuron::native;
  const auto* code = reinterpret_cast<const int64_t*>(code_bytes);
  const auto* views = reinterpret_cast<const NView* const*>(view_bytes);
  const int64_t n = code[0];
  const int64_t P = views[0]->size[0];
  // Every step's two columns, one value per partition (at most 128: fused_chains.cpp), read
  // before the loop as the kernels do. A plain local array, so the loop's stores provably miss it.
  float cols[2 * kChainMax * 128];
  // The walked views: the source, then each step's destination and second operand.
  const NView* walk[1 + 2 * kChainMax];
  walk[0] = views[0];
#pragma GCC unroll 6
  for (int k = 0; k < kChainMax; ++k) {
    const int64_t* s = code + 1 + k * kChainFields;
    const NView* const* v = views + 1 + 4 * k;
    walk[1 + 2 * k] = k < n ? v[0] : nullptr;
    walk[2 + 2 * k] = k < n ? v[1] : nullptr;
    if (k >= n) continue;
    double imm0, imm1;
    std::memcpy(&imm0, &s[kChImm0], sizeof imm0);
    std::memcpy(&imm1, &s[kChImm1], sizeof imm1);
    column(v[2], static_cast<int>(s[kChC0dt]), imm0, P, cols + 2 * k * P);
    column(v[3], static_cast<int>(s[kChC1dt]), imm1, P, cols + (2 * k + 1) * P);
  }
  // One element of every step; the last step's value goes to `out` and is returned as its
  // destination holds it.
  auto element = [&](char** p, int64_t part, char* out) __attribute__((always_inline)) {
    float v = b::load_f32(p[0], dt(static_cast<int>(code[1 + kChXdt])));
#pragma GCC unroll 6
    for (int k = 0; k < kChainMax; ++k) {
      if (k >= n) continue;
      const int64_t* s = code + 1 + k * kChainFields;
      const float* c = cols + 2 * k * P;
      v = chain_step(s, v, p[2 + 2 * k], c[part], c[P + part]);
      const int ddt = static_cast<int>(s[kChDdt]);
      // A copy into the dtype the value already holds (a bf16 result's store) keeps it as is:
      // no second rounding.
      const bool kept = k > 0 && s[kChKind] == kChCopy && s[kChXdt] == ddt;
      if (s[kChStore]) chain_store(k == n - 1 ? out : p[1 + 2 * k], ddt, v, kept);
      if (!kept) v = chain_rounded(ddt, v);
    }
    return v;
  };
  const int last = static_cast<int>(n - 1);
  const int64_t* ls = code + 1 + last * kChainFields;
  const int lsize = neuron::dtype_bytes(dt(static_cast<int>(ls[kChDdt])));
  const int64_t* red = code + kChainReduceAt;
  if (red[kChRedOn]) {
    // The reduction: tensor_reduce's lanes (builtins.hpp) over each partition's last values in
    // row-major order. `grouped` (every partition one run of at most kGroupedRunMax values, the
    // usual [P, F] -> [P, 1]): the chain's loop writes kRowsAtOnce partitions' values into a
    // buffer, which then reduces them at once as tensor_reduce does: 8 chains of 16-lane max or
    // add operations in flight instead of one that waits on itself (a [128, 128] multiply then
    // max, Intel Xeon: 14 -> 2.4 us; the two instructions unfused took 3). Else 16 values at a
    // time go from the loop into a register group, then into the partition's lanes. The chain
    // is inlined once: handed to reduce_run itself it was inlined 18 times (its unrolled group
    // of 16, head and tail), which cost every chain's compile ~30 ms.
    const AluOp rop = static_cast<AluOp>(red[kChRedOp]);
    const NView& shape = *views[0];
    const int64_t n4 = shape.size[4];
    const bool grouped = shape.size[1] * shape.size[2] * shape.size[3] == 1 && n4 <= kGroupedRunMax;
    Scratch<float> res(P), runs(grouped ? kRowsAtOnce * n4 : 0);
    float lane[b::kReduceLanes];
    int64_t cur = -1, pos = 0;
    int filled = 0;  // partitions buffered (grouped)
    // Values computed per inner loop: a grouped row's whole run in one loop (vectorized with
    // one overlap check per row; in groups of 16 it was a loop of one vector per group, with
    // the checks each time: a [128, 128] subtract, multiply, add, max 6.0 -> 5.2 us, Intel
    // Xeon), else a register group.
    const int64_t step = grouped ? n4 : b::kReduceLanes;
    each_row(
        walk, [&](char** r, int64_t i0) __attribute__((always_inline)) {
          if (!grouped && i0 != cur) {  // a partition's runs, each into its lanes as it comes
            if (cur >= 0) res.data[cur] = b::reduce_finish(lane, rop);
            b::reduce_init(lane, rop);
            cur = i0;
            pos = 0;
          }
          float* vals = runs.data + filled * n4;
          for (int64_t i4 = 0; i4 < n4; i4 += step) {
            const int64_t m = n4 - i4 < step ? n4 - i4 : step;
            float group[b::kReduceLanes];
            float* dst = grouped ? vals + i4 : group;
            for (int64_t j = 0; j < m; ++j) {
              char* ptrs[1 + 2 * kChainMax];
#pragma GCC unroll 16
              for (int k = 0; k < 1 + 2 * kChainMax; ++k)
                ptrs[k] = walk[k] ? r[k] + (i4 + j) * walk[k]->stride[4] : nullptr;
              dst[j] = element(ptrs, i0, ptrs[1 + 2 * last]);
            }
            if (!grouped)
              b::reduce_run(lane, rop, pos + i4, m, [&](int64_t k) { return group[k]; });
          }
          if (grouped) {  // partition i0's whole row: reduced with the next ones
            if (++filled < kRowsAtOnce) return;
            b::reduce_rows<kRowsAtOnce>(
                res.data + i0 - (kRowsAtOnce - 1), rop, n4,
                [&](int row, int64_t k) { return runs.data[row * n4 + k]; });
            filled = 0;
            return;
          }
          pos += n4;
        });
    for (int row = 0; row < filled; ++row) {  // the last partitions, fewer than kRowsAtOnce
      b::reduce_init(lane, rop);
      b::reduce_run(lane, rop, 0, n4, [&](int64_t k) { return runs.data[row * n4 + k]; });
      res.data[P - filled + row] = b::reduce_finish(lane, rop);
    }
    if (cur >= 0) res.data[cur] = b::reduce_finish(lane, rop);
    store_reduced(*views[kChainViews - 1], static_cast<int>(red[kChRedDdt]), res.data,
                  red[kChRedNegate]);
  } else if (ls[kChStream] && ls[kChStore] && streamable(*views[1 + 4 * last], lsize)) {
    each_streamed(walk, 1 + 2 * last, lsize, element);  // the worker fences (stream_fence)
  } else {
    each(walk, kSameShape, [&](char** p, int64_t part) { element(p, part, p[1 + 2 * last]); });
  }
  // Constant indices only (here and above): once the chain is inlined, `code` and `views`
  // fold into constants and SSA values (jit.cpp specialize_chains).
#pragma GCC unroll 6
  for (int k = 0; k < kChainMax; ++k) {
    const int ddt = static_cast<int>(code[1 + k * kChainFields + kChDdt]);
    if (k < n && code[1 + k * kChainFields + kChStore])
      clear_flags(*views[1 + 4 * k], neuron::dtype_bytes(dt(ddt)));
  }
}

void neuron_k_tensor_reduce(const NView* d, const NView* s, int ddt, int sdt, int op_, int reduced,
                            int negate) {
  const AluOp op = static_cast<AluOp>(op_);
  int64_t out_n = 1;
  int64_t kept[kDims];  // loop extents over the kept dims (1 for reduced ones)
  for (int i = 0; i < kDims; ++i) {
    kept[i] = (reduced >> i) & 1 ? 1 : s->size[i];
    out_n *= kept[i];
  }
  // The reduced dims longer than 1, in order: the last is walked as a run (contiguous in the
  // usual [P, F] -> [P, 1] reduction), the others around it.
  int rd[kDims], nr = 0;
  for (int i = 0; i < kDims; ++i)
    if (((reduced >> i) & 1) && s->size[i] > 1) rd[nr++] = i;
  int64_t run_n = 1, run_stride = 0, outer_n = 1;
  if (nr > 0) {
    --nr;
    run_n = s->size[rd[nr]];
    run_stride = s->stride[rd[nr]];
  }
  for (int m = 0; m < nr; ++m) outer_n *= s->size[rd[m]];
  // Where each result's values start, in result order.
  Scratch<const char*> bases(out_n);
  int64_t o = 0;
  for (int64_t i0 = 0; i0 < kept[0]; ++i0)
    for (int64_t i1 = 0; i1 < kept[1]; ++i1)
      for (int64_t i2 = 0; i2 < kept[2]; ++i2)
        for (int64_t i3 = 0; i3 < kept[3]; ++i3)
          for (int64_t i4 = 0; i4 < kept[4]; ++i4)
            bases.data[o++] = s->base + i0 * s->stride[0] + i1 * s->stride[1] +
                              i2 * s->stride[2] + i3 * s->stride[3] + i4 * s->stride[4];
  if (b::alu_is_bitvec(op) && is_int(sdt) && is_int(ddt)) {
    // Bit patterns of integer elements, exactly (no trip through fp32), in row-major order.
    int64_t i = 0;
    each1(*d, [&](char* out) {
      int64_t acc = op == AluOp::bitwise_and ? -1 : 0, idx[kDims] = {0, 0, 0, 0, 0};
      for (int64_t t = 0; t < outer_n; ++t) {
        const char* p = bases.data[i];
        for (int m = 0; m < nr; ++m) p += idx[m] * s->stride[rd[m]];
        for (int64_t k = 0; k < run_n; ++k)
          acc = b::alu_bits(op, acc, b::load_int(p + k * run_stride, dt(sdt)));
        for (int m = nr - 1; m >= 0; --m) {
          if (++idx[m] < s->size[rd[m]]) break;
          idx[m] = 0;
        }
      }
      b::store_int_bits(out, dt(ddt), acc);
      ++i;
    });
    return clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
  }
  Scratch<float> acc(out_n);
  o = 0;
  if (nr == 0) {
    // One run per result: kRowsAtOnce results at a time, each in its own lanes.
    for (; o + kRowsAtOnce <= out_n; o += kRowsAtOnce) {
      const char* const* row = bases.data + o;
      b::reduce_rows<kRowsAtOnce>(acc.data + o, op, run_n, [&](int r, int64_t k) {
        return b::load_f32(row[r] + k * run_stride, dt(sdt));
      });
    }
  }
  for (; o < out_n; ++o) {
    float lane[b::kReduceLanes];
    b::reduce_init(lane, op);
    int64_t idx[kDims] = {0, 0, 0, 0, 0}, pos = 0;
    for (int64_t t = 0; t < outer_n; ++t) {
      const char* p = bases.data[o];
      for (int m = 0; m < nr; ++m) p += idx[m] * s->stride[rd[m]];
      b::reduce_run(lane, op, pos, run_n,
                    [&](int64_t k) { return b::load_f32(p + k * run_stride, dt(sdt)); });
      pos += run_n;
      for (int m = nr - 1; m >= 0; --m) {
        if (++idx[m] < s->size[rd[m]]) break;
        idx[m] = 0;
      }
    }
    acc.data[o] = b::reduce_finish(lane, op);
  }
  store_reduced(*d, ddt, acc.data, negate);
}

void neuron_k_transpose(const NView* d, const NView* s, int ddt, int sdt) {
  if (transpose_fast(*d, *s, ddt, sdt)) return clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
  // Gather first: the simulator reads the whole source before writing.
  const int64_t P = s->size[0], n = count_of(*s), F = P ? n / P : 0;
  Scratch<float, 1> vals(n);
  const int es = neuron::dtype_bytes(dt(sdt));
  if (ddt == sdt) {
    Scratch<char, 1> raw(n * es);
    int64_t i = 0;
    each1(*s, [&](char* p) { copy_element(raw.data + (i++) * es, p, es); });
    // Destination element j = f * P + p holds source element p * F + f.
    i = 0;
    each1(*d, [&](char* p) {
      const int64_t f = i / P, q = i % P;
      copy_element(p, raw.data + (q * F + f) * es, es);
      ++i;
    });
  } else {
    int64_t i = 0;
    each1(*s, [&](char* p) { vals.data[i++] = b::load_f32(p, dt(sdt)); });
    i = 0;
    each1(*d, [&](char* p) {
      const int64_t f = i / P, q = i % P;
      b::store_f32(p, dt(ddt), vals.data[q * F + f]);
      ++i;
    });
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

// nc_matmul's accumulate=auto (-1) rule, one decision for the whole tile when its PSUM flags
// agree: 1 (add) when every element was written since it was last read out, 0 (overwrite) when
// none was (or the destination has no flags), -1 (per element) when they differ.
inline int accumulate_mode(const NView& d, int accumulate, int64_t count) {
  if (accumulate != -1) return accumulate;
  if (!d.flags) return 0;
  bool any = false, all = true;
  each1(d, [&](char* p) {
    const bool f = d.flags[p - d.base] != 0;
    any |= f;
    all &= f;
  });
  return all && count > 0 ? 1 : any ? -1 : 0;
}

// d[m, n] (+)= sum over k of a[k * lda + m] * b[k * ldb + n] through the matmul kernels
// (`kernel`: neuron_matmul_f32, one fma per k in increasing k, or neuron_matmul_bf16, the rule
// of neuron/base/bf16_dot.hpp), for a destination they cannot write in place: each element
// starts at its old value where acc_mode (accumulate_mode) says to add, else at 0, in an fp32
// copy, and is stored back in d's dtype.
extern "C++" {  // templates, in this extern "C" block
template <class T, class Kernel>
inline void matmul_into(const NView& d, int ddt, const T* a, int64_t lda, const T* b, int64_t ldb,
                        int64_t K, int64_t M, int64_t N, int acc_mode, Kernel kernel) {
  Scratch<float, 1> c(M * N);
  Scratch<int64_t, 1> doff(M * N);
  int64_t i = 0;
  each1(d, [&](char* p) { doff.data[i++] = p - d.base; });
  for (i = 0; acc_mode != 0 && i < M * N; ++i) {
    const int64_t o = doff.data[i];
    const bool keep = acc_mode == 1 || d.flags[o];
    c.data[i] = keep ? b::load_f32(d.base + o, dt(ddt)) : 0.0f;
  }
  kernel(c.data, N, a, lda, b, ldb, M, N, K, acc_mode != 0);
  for (i = 0; i < M * N; ++i) b::store_f32(d.base + doff.data[i], dt(ddt), c.data[i]);
}

// Rows [K, cols] of a tile whose columns are contiguous, widened to fp32 values.
template <DType T>
void widen_rows(const NView& v, float* out, int64_t K, int64_t cols) {
  for (int64_t k = 0; k < K; ++k)
    convert_row<T, DType::float32>(v.base + k * v.stride[0], reinterpret_cast<char*>(out + k * cols),
                                   cols);
}

// A tile's elements in order as fp32 values (`rows`: [K, ..., cols] with contiguous columns).
inline void gather_f32(const NView& v, int vdt, bool rows, float* out, int64_t K, int64_t cols) {
  if (rows) switch (dt(vdt)) {
      case DType::float16:
        return widen_rows<DType::float16>(v, out, K, cols);
      case DType::bfloat16:
        return widen_rows<DType::bfloat16>(v, out, K, cols);
      case DType::float8_e4m3:
        return widen_rows<DType::float8_e4m3>(v, out, K, cols);
      case DType::float8_e4m3fn:
        return widen_rows<DType::float8_e4m3fn>(v, out, K, cols);
      case DType::float8_e5m2:
        return widen_rows<DType::float8_e5m2>(v, out, K, cols);
      default:
        break;
    }
  int64_t i = 0;
  each1(v, [&](char* p) { out[i++] = b::load_f32(p, dt(vdt)); });
}

// An operand of the matmul kernels: the tile itself where it is in their layout (`rows`: [K,
// ..., cols] with contiguous columns) and dtype, else its elements in order, gathered as the
// kernel's dtype (bf16 as its bits, anything else as fp32 values) into K contiguous rows.
template <class T>
struct MatmulOperand {
  Scratch<T, 1> copy;
  const T* data;
  int64_t ld;
  MatmulOperand(const NView& v, int vdt, bool rows, bool in_place, int64_t K, int64_t cols)
      : copy(in_place ? 0 : K * cols),
        data(in_place ? reinterpret_cast<const T*>(v.base) : copy.data),
        ld(in_place ? v.stride[0] / static_cast<int64_t>(sizeof(T)) : cols) {
    if (in_place) return;
    if constexpr (sizeof(T) == 2) {
      int64_t i = 0;
      each1(v, [&](char* p) { std::memcpy(copy.data + i++, p, 2); });
    } else {
      gather_f32(v, vdt, rows, copy.data, K, cols);
    }
  }
};

}  // extern "C++"

// The most rows of K neuron_k_matmul sums without the blocked matmul kernels when M is 1.
constexpr int64_t kColumnSumRows = 4;

void neuron_k_matmul(const NView* d, const NView* st, const NView* mv, int ddt, int sdt, int mdt,
                     int accumulate, int layout) {
  const bool fast = layout & kMatmulFast;
  const int64_t K = st->size[0], M = count_of(*st) / (K ? K : 1), N = count_of(*mv) / (K ? K : 1);
  const int esize = neuron::dtype_bytes(dt(ddt));
  const int acc_mode = accumulate_mode(*d, accumulate, M * N);
  const int f32 = static_cast<int>(DType::float32), bf16 = static_cast<int>(DType::bfloat16);
  const bool in_place_c = fast && acc_mode != -1 && ddt == f32;
  if (sdt == bf16 && mdt == bf16) {
    // Both bfloat16: the bf16 rule. A gathered B is a new copy, never "the same B" as before.
    const MatmulOperand<uint16_t> s(*st, sdt, fast, fast, K, M), v(*mv, mdt, fast, fast, K, N);
    auto kernel =
        fast && (layout & kMatmulSameMoving) ? neuron_matmul_bf16_same_b : neuron_matmul_bf16;
    if (in_place_c)
      kernel(reinterpret_cast<float*>(d->base), d->stride[0] / 4, s.data, s.ld, v.data, v.ld, M, N,
             K, acc_mode);
    else
      matmul_into(*d, ddt, s.data, s.ld, v.data, v.ld, K, M, N, acc_mode, kernel);
  } else {
    // Every other pair of dtypes (fp32, fp16, fp8, tf32, mixed): the fp32 fma chain on the
    // operands' values, exact in fp32 (docs/numerics.md, "Matmul").
    // tf32 holds its values as fp32 bits (docs/numerics.md): read in place as fp32.
    auto f32_bits = [&](int t) { return t == f32 || t == static_cast<int>(DType::tfloat32); };
    if (in_place_c && M == 1 && K <= kColumnSumRows && f32_bits(sdt) && f32_bits(mdt)) {
      // One column of a few rows (a partition block's rows of a column sum, ones.T @ v): the
      // chain as one vector loop per row of K, without the matmul kernel's dispatch, panels
      // and register tiles (~4x the work of a row of 512 columns).
      neuron_matmul_f32_rows(reinterpret_cast<float*>(d->base), d->stride[0] / 4,
                             reinterpret_cast<const float*>(st->base), st->stride[0] / 4,
                             reinterpret_cast<const float*>(mv->base), mv->stride[0] / 4, M, N, K,
                             acc_mode);
      return fill_flags(*d, esize, 1);
    }
    const bool b_in_place = fast && f32_bits(mdt);
    const MatmulOperand<float> s(*st, sdt, fast, fast && f32_bits(sdt), K, M),
        v(*mv, mdt, fast, b_in_place, K, N);
    // A converted B is a new copy, never "the same B" as before.
    auto kernel =
        b_in_place && (layout & kMatmulSameMoving) ? neuron_matmul_f32_same_b : neuron_matmul_f32;
    if (in_place_c)
      kernel(reinterpret_cast<float*>(d->base), d->stride[0] / 4, s.data, s.ld, v.data, v.ld, M, N,
             K, acc_mode);
    else
      matmul_into(*d, ddt, s.data, s.ld, v.data, v.ld, K, M, N, acc_mode, kernel);
  }
  fill_flags(*d, esize, 1);
}

void neuron_k_matmul_at(const NView* d, const NView* s, const NView* mv, int sdt, int accumulate,
                        int canonical_zero) {
  const int64_t M = s->size[0], K = count_of(*s) / (M ? M : 1), N = count_of(*mv) / (K ? K : 1);
  if (dt(sdt) == DType::bfloat16)
    neuron_matmul_bf16_at(reinterpret_cast<float*>(d->base), d->stride[0] / 4,
                          reinterpret_cast<const uint16_t*>(s->base), s->stride[0] / 2,
                          reinterpret_cast<const uint16_t*>(mv->base), mv->stride[0] / 2, M, N, K,
                          accumulate);
  else
    neuron_matmul_f32_at(reinterpret_cast<float*>(d->base), d->stride[0] / 4,
                         reinterpret_cast<const float*>(s->base), s->stride[0] / 4,
                         reinterpret_cast<const float*>(mv->base), mv->stride[0] / 4, M, N, K,
                         accumulate, canonical_zero);
  fill_flags(*d, 4, 1);
}

void neuron_k_copy_predicated(const NView* d, const NView* s, const NView* pred, int ddt, int sdt,
                              int pdt, int same) {
  if ((same & kMayOverlap) &&
      (partially_overlaps(s, sdt, d, ddt) || partially_overlaps(pred, pdt, d, ddt))) {
    NView dc = *d, sc = *s, pc = *pred;
    return NEURON_SNAPSHOT(copy_predicated)(&dc, &sc, &pc, ddt, sdt, pdt, same);
  }
  const NView* vs[3] = {s, pred, d};
  const int e = neuron::dtype_bytes(dt(ddt));
  if (ddt == sdt && e == 4) {
    // Written as a select of bit patterns (every element stored, unselected ones with their own
    // bits) so that specialized code vectorizes it: ~20x faster than a branch per element.
    each(vs, same, [&](char** p, int64_t) {
      uint32_t a, old;
      std::memcpy(&a, p[0], 4);
      std::memcpy(&old, p[2], 4);
      const uint32_t v = b::load_f32(p[1], dt(pdt)) != 0.0f ? a : old;
      std::memcpy(p[2], &v, 4);
    });
  } else {
    each(vs, same, [&](char** p, int64_t) {
      if (b::load_f32(p[1], dt(pdt)) == 0.0f) return;
      if (ddt == sdt)
        copy_element(p[2], p[0], e);
      else
        b::store_f32(p[2], dt(ddt), b::load_f32(p[0], dt(sdt)));
    });
  }
  clear_flags(*d, e);
}

void neuron_k_memset(const NView* d, int ddt, double value) {
  char enc[8];  // copy_element reads up to 8 bytes for an 8-byte dtype
  b::store_f64(enc, dt(ddt), value);
  const int e = neuron::dtype_bytes(dt(ddt));
  each1(*d, [&](char* p) { copy_element(p, enc, e); });
  clear_flags(*d, e);
}

void neuron_k_psum_flags_set(const NView* d, const NView* s, int ddt, int sdt) {
  if (!d->flags) return;  // code compiled without flags (plan.hpp reads_psum_flags)
  const NView* vs[2] = {s, d};
  const int e = neuron::dtype_bytes(dt(ddt));
  each(vs, 0, [&](char** p, int64_t) {
    std::memset(d->flags + (p[1] - d->base), b::load_f32(p[0], dt(sdt)) != 0.0f ? 1 : 0,
                static_cast<size_t>(e));
  });
}

void neuron_k_psum_flags_get(const NView* d, const NView* s, int ddt, int sdt) {
  (void)sdt;
  const NView* vs[2] = {s, d};
  each(vs, 0, [&](char** p, int64_t) {
    b::store_f32(p[1], dt(ddt), s->flags && s->flags[p[0] - s->base] ? 1.0f : 0.0f);
  });
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

}  // extern "C"

namespace {
// Calls row(i) for each innermost row i = {i0, i1, i2, i3} of a view of d's sizes; at(v, i) is
// that row's start in view v (bytes, or pattern units for a value pattern).
template <class Row>
[[gnu::always_inline]] inline void each_row(const NView& d, Row&& row) {
  for (int64_t i0 = 0; i0 < d.size[0]; ++i0)
    for (int64_t i1 = 0; i1 < d.size[1]; ++i1)
      for (int64_t i2 = 0; i2 < d.size[2]; ++i2)
        for (int64_t i3 = 0; i3 < d.size[3]; ++i3) row(std::array<int64_t, 4>{i0, i1, i2, i3});
}
inline int64_t at(const NView& v, const std::array<int64_t, 4>& i) {
  return i[0] * v.stride[0] + i[1] * v.stride[1] + i[2] * v.stride[2] + i[3] * v.stride[3];
}

// iota where dst and the pattern have the same sizes: one loop per innermost row, whose values
// are a + c * j (FlexAttention's key positions, [128, 128] per program, went from ~90 to a few
// us). The values and their conversion are the element walk's.
template <class T>
void iota_rows(const NView& d, const NView& pat, int64_t offset) {
  const int64_t n = d.size[kDims - 1], c = pat.stride[kDims - 1], dj = d.stride[kDims - 1];
  each_row(d, [&](const std::array<int64_t, 4>& i) {
    const int64_t a = offset + at(pat, i);
    char* row = d.base + at(d, i);
    for (int64_t j = 0; j < n; ++j) {
      const auto v =
          static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(a + c * j)));
      const T t = static_cast<T>(v);
      std::memcpy(row + j * dj, &t, sizeof(T));
    }
  });
}
}  // namespace

extern "C" {

void neuron_k_iota(const NView* d, const NView* pat, int ddt, int64_t offset) {
  bool same = true;
  for (int k = 0; k < kDims; ++k) same = same && d->size[k] == pat->size[k];
  if (same && dt(ddt) == DType::float32) {
    iota_rows<float>(*d, *pat, offset);
    return clear_flags(*d, 4);
  }
  if (same && dt(ddt) == DType::int32) {
    iota_rows<int32_t>(*d, *pat, offset);
    return clear_flags(*d, 4);
  }
  ValueCursor c(pat);
  each1(*d, [&](char* p) {
    const int64_t x = c.value;
    b::store_int(p, dt(ddt),
                 static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(x + offset))));
    c.next();
  });
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

}  // extern "C"

namespace {
inline bool same_sizes(const NView& a, const NView& b) {
  for (int k = 0; k < kDims; ++k)
    if (a.size[k] != b.size[k]) return false;
  return true;
}

// affine_select when dst, on_true and the pattern have the same sizes and dst and on_true the
// same dtype (a causal mask's usual case): one loop per innermost row, where the pattern's value
// is a + c * j, so the loop is a compare and a select the optimizer vectorizes. Same bits as the
// element walk below (a bit copy or the fill's bits).
template <class T, class Keep>
[[gnu::always_inline]] inline void select_rows_with(const NView& d, const NView& s,
                                                    const NView& pat, int64_t offset,
                                                    const char* fill_bits, Keep keep) {
  T fill;
  std::memcpy(&fill, fill_bits, sizeof(T));
  const int64_t n = d.size[kDims - 1], c = pat.stride[kDims - 1];
  const int64_t dj = d.stride[kDims - 1], sj = s.stride[kDims - 1];
  each_row(d, [&](const std::array<int64_t, 4>& i) {
    const int64_t a = offset + at(pat, i);
    char* pd = d.base + at(d, i);
    const char* ps = s.base + at(s, i);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t x =
          static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(a + c * j)));
      T v;
      std::memcpy(&v, ps + j * sj, sizeof(T));
      v = keep(x) ? v : fill;
      std::memcpy(pd + j * dj, &v, sizeof(T));
    }
  });
}

// The comparison chosen once per call, not per element (the library's copy would otherwise
// switch on it for every element): compare_int's six integer comparisons, else compare_int.
template <class T>
inline void select_rows(const NView& d, const NView& s, const NView& pat, int64_t offset,
                        AluOp op, const char* fill_bits) {
  auto run = [&](auto keep) { select_rows_with<T>(d, s, pat, offset, fill_bits, keep); };
  switch (op) {
    case AluOp::equal: return run([](int64_t x) { return x == 0; });
    case AluOp::not_equal: return run([](int64_t x) { return x != 0; });
    case AluOp::greater: return run([](int64_t x) { return x > 0; });
    case AluOp::greater_equal: return run([](int64_t x) { return x >= 0; });
    case AluOp::less: return run([](int64_t x) { return x < 0; });
    case AluOp::less_equal: return run([](int64_t x) { return x <= 0; });
    default: return run([op](int64_t x) { return b::compare_int(op, x, 0); });
  }
}
}  // namespace

extern "C" {

void neuron_k_affine_select(const NView* d, const NView* s, const NView* pat, int ddt, int sdt,
                            int64_t offset, int cmp_op, double on_false) {
  if (partially_overlaps(s, sdt, d, ddt)) {
    NView dc = *d, sc = *s, pc = *pat;
    return NEURON_SNAPSHOT(affine_select)(&dc, &sc, &pc, ddt, sdt, offset, cmp_op, on_false);
  }
  char off_enc[8];  // as memset's enc
  b::store_f64(off_enc, dt(ddt), on_false);
  const int e = neuron::dtype_bytes(dt(ddt));
  if (ddt == sdt && (e == 4 || e == 2) && same_sizes(*d, *s) && same_sizes(*d, *pat)) {
    const AluOp op = static_cast<AluOp>(cmp_op);
    if (e == 4)
      select_rows<uint32_t>(*d, *s, *pat, offset, op, off_enc);
    else
      select_rows<uint16_t>(*d, *s, *pat, offset, op, off_enc);
    clear_flags(*d, e);
    return;
  }
  ValueCursor c(pat);
  Cursor cs(s);
  each1(*d, [&](char* p) {
    const int64_t x =
        static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(c.value + offset)));
    if (!b::compare_int(static_cast<AluOp>(cmp_op), x, 0))
      copy_element(p, off_enc, e);
    else if (ddt == sdt)
      copy_element(p, cs.p, e);
    else
      b::store_f32(p, dt(ddt), b::load_f32(cs.p, dt(sdt)));
    c.next();
    cs.next();
  });
  clear_flags(*d, e);
}

// The flat element `i` (row-major over dims 1..) of partition row `row` of v.
inline char* element(const NView& v, char* row, int64_t i) {
  // The usual tile, [P, n]: no divisions (a predictable branch; this runs per element).
  if (v.size[1] == 1 && v.size[2] == 1 && v.size[3] == 1) return row + i * v.stride[kDims - 1];
  for (int d = kDims - 1; d >= 1; --d) {
    row += (i % v.size[d]) * v.stride[d];
    i /= v.size[d];
  }
  return row;
}
inline int64_t per_partition(const NView& v) {
  return v.size[0] ? count_of(v) / v.size[0] : 0;
}
inline void move_element(char* to, int tdt, const char* from, int fdt) {
  if (tdt == fdt)
    copy_element(to, from, neuron::dtype_bytes(dt(tdt)));
  else
    b::store_f32(to, dt(tdt), b::load_f32(from, dt(fdt)));
}
// Element p (row-major over all its dims) of an index operand, as an integer.
inline int64_t index_at(const NView& idx, int idt, int64_t p) {
  const int64_t per = per_partition(idx);
  return b::load_int(element(idx, idx.base + (p / per) * idx.stride[0], p % per), dt(idt));
}

void neuron_k_dma_indirect(const NView* d, const NView* s, const NView* idx, int ddt, int sdt,
                           int idt, int side, int64_t rows, int oob_skip, int instr) {
  const int64_t P = d->size[0], n = per_partition(*d);
  for (int64_t p = 0; p < P; ++p) {
    const int64_t r = index_at(*idx, idt, p);
    if (r < 0 || r >= rows) {
      if (!oob_skip) neuron_k_fault(neuron::native::kFaultRowIndex, instr, r, rows, p, 0);
      continue;
    }
    char* from = s->base + (side == 1 ? r : p) * s->stride[0];
    char* to = d->base + (side == 2 ? r : p) * d->stride[0];
    for (int64_t i = 0; i < n; ++i)
      move_element(element(*d, to, i), ddt, element(*s, from, i), sdt);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

// nc_n_gather's common case: d and s of one 4-byte dtype, int32 indices, every operand's free
// dims one unit-stride run (a FlexAttention score_mod's table reads: 13 ns an element through
// element() above, a plain indexed load here). The indices are checked first, so the gather
// loop has no branch; false (nothing written) when a view or an index does not fit.
inline bool gather_fast(const NView& d, const NView& s, const NView& idx, int ddt, int sdt,
                        int idt) {
  int64_t drs, dn, dcs, srs, sn, scs, irs, in, ics;
  if (ddt != sdt || neuron::dtype_bytes(dt(ddt)) != 4 || dt(idt) != DType::int32 ||
      !as_matrix(d, drs, dn, dcs) || !as_matrix(s, srs, sn, scs) ||
      !as_matrix(idx, irs, in, ics) || in != dn || (dn > 1 && dcs != 4) ||
      (sn > 1 && scs != 4) || (in > 1 && ics != 4))
    return false;
  const int64_t P = d.size[0];
  for (int64_t p = 0; p < P; ++p) {
    const auto* ix = reinterpret_cast<const int32_t*>(idx.base + p * irs);
    uint32_t worst = 0;  // an index below 0 is a large unsigned one
    for (int64_t j = 0; j < dn; ++j) worst = std::max(worst, static_cast<uint32_t>(ix[j]));
    if (dn && worst >= static_cast<uint64_t>(sn)) return false;
  }
  for (int64_t p = 0; p < P; ++p) {
    const auto* ix = reinterpret_cast<const int32_t*>(idx.base + p * irs);
    const auto* row = reinterpret_cast<const uint32_t*>(s.base + p * srs);
    auto* out = reinterpret_cast<uint32_t*>(d.base + p * drs);
    for (int64_t j = 0; j < dn; ++j) out[j] = row[ix[j]];
  }
  return true;
}

void neuron_k_gather(const NView* d, const NView* s, const NView* idx, int ddt, int sdt, int idt,
                     int instr) {
  const int64_t P = d->size[0], n = per_partition(*d), F = per_partition(*s);
  if (gather_fast(*d, *s, *idx, ddt, sdt, idt)) {
    clear_flags(*d, 4);
    return;
  }
  for (int64_t p = 0; p < P; ++p) {
    char* row = s->base + p * s->stride[0];
    char* out = d->base + p * d->stride[0];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = b::load_int(element(*idx, idx->base + p * idx->stride[0], j), dt(idt));
      if (k < 0 || k >= F) {
        neuron_k_fault(neuron::native::kFaultGatherIndex, instr, k, F, p, 0);
        continue;
      }
      move_element(element(*d, out, j), ddt, element(*s, row, k), sdt);
    }
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

}  // extern "C"

namespace {
// tensor_tensor_scan with op0 multiply and op1 add on fp32 views: r = x * r + y per element,
// the two roundings of alu's multiply and add, written out so that nothing is dispatched per
// element; 16 partitions step together, so 16 independent chains are in flight. Element i of
// a partition is at the same offset from the partition's start in every partition.
void scan_multiply_add(const NView& d, const NView& a, const NView& bv, const float* init,
                       int64_t P, int64_t per, int rev0, int rev1) {
  const NView* vs[3] = {&a, &bv, &d};
  Scratch<int64_t, 1> off[3] = {Scratch<int64_t, 1>(per), Scratch<int64_t, 1>(per),
                                Scratch<int64_t, 1>(per)};
  for (int v = 0; v < 3; ++v) {
    Cursor c(vs[v]);
    for (int64_t i = 0; i < per; ++i, c.next()) off[v].data[i] = c.p - vs[v]->base;
  }
  constexpr int64_t kGroup = 16;
  for (int64_t p0 = 0; p0 < P; p0 += kGroup) {
    const int64_t n = P - p0 < kGroup ? P - p0 : kGroup;
    float r[kGroup];
    for (int64_t j = 0; j < n; ++j) r[j] = init[p0 + j];
    const char* ra = a.base + p0 * a.stride[0];
    const char* rb = bv.base + p0 * bv.stride[0];
    char* rd = d.base + p0 * d.stride[0];
    for (int64_t i = 0; i < per; ++i) {
      const char* xa = ra + off[0].data[i];
      const char* xb = rb + off[1].data[i];
      char* xd = rd + off[2].data[i];
      for (int64_t j = 0; j < n; ++j) {
        float x, y;
        std::memcpy(&x, xa + j * a.stride[0], 4);
        std::memcpy(&y, xb + j * bv.stride[0], 4);
        const float t = rev0 ? r[j] * x : x * r[j];
        r[j] = rev1 ? y + t : t + y;
        std::memcpy(xd + j * d.stride[0], &r[j], 4);
      }
    }
  }
  clear_flags(d, 4);
}
}  // namespace

extern "C" {

void neuron_k_tensor_tensor_scan(const NView* d, const NView* a, const NView* bv,
                                 const NView* init, int ddt, int adt, int bdt, int idt, int op0_,
                                 int op1_, int rev0, int rev1, double init_imm) {
  const AluOp op0 = static_cast<AluOp>(op0_), op1 = static_cast<AluOp>(op1_);
  const int64_t P = d->size[0], per = P > 0 ? count_of(*d) / P : 0;
  Scratch<float> r0(P);
  column(init, idt, init_imm, P, r0.data);
  // Sources are read before the destination is written, as the simulator does elsewhere.
  Snapshot sa(a, adt, d, ddt), sb(bv, bdt, d, ddt);
  const int f32 = static_cast<int>(DType::float32);
  if (op0 == AluOp::multiply && op1 == AluOp::add && adt == f32 && bdt == f32 && ddt == f32 &&
      sa.view->size[0] == P && sb.view->size[0] == P) {
    // The published kernels' scan (Mamba's state update, nki-library's cumsum) on fp32 tiles.
    return scan_multiply_add(*d, *sa.view, *sb.view, r0.data, P, per, rev0, rev1);
  }
  Cursor ca(sa.view), cb(sb.view), cd(d);
  for (int64_t p = 0; p < P; ++p) {
    float r = r0.data[p];
    for (int64_t i = 0; i < per; ++i) {
      const float x = b::load_f32(ca.p, dt(adt)), y = b::load_f32(cb.p, dt(bdt));
      const float t = rev0 ? b::alu(op0, r, x) : b::alu(op0, x, r);
      r = rev1 ? b::alu(op1, y, t) : b::alu(op1, t, y);
      b::store_f32(cd.p, dt(ddt), r);
      ca.next();
      cb.next();
      cd.next();
    }
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_local_gather(const NView* d, const NView* s, const NView* idx, int ddt, int sdt,
                           int idt, int64_t per, int64_t valid, int instr) {
  const int64_t P = d->size[0], F = per_partition(*s), I = per_partition(*idx);
  for (int64_t g = 0; g < P / 16; ++g) {
    // The group's indices, partition-first: index k is idx[16g + k % 16, k / 16].
    for (int64_t k = 0; k < valid; ++k) {
      const int64_t q = 16 * g + k % 16, c = k / 16;
      if (c >= I) break;
      const int64_t start =
          b::load_int(element(*idx, idx->base + q * idx->stride[0], c), dt(idt));
      if (start < 0 || start + per > F) {
        neuron_k_fault(neuron::native::kFaultGatherIndex, instr, start, F, q, 0);
        continue;
      }
      for (int64_t p = 16 * g; p < 16 * g + 16; ++p) {
        char* row = s->base + p * s->stride[0];
        char* out = d->base + p * d->stride[0];
        for (int64_t e = 0; e < per; ++e)
          move_element(element(*d, out, k * per + e), ddt, element(*s, row, start + e), sdt);
      }
    }
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

}  // extern "C"

// ---- vector selection and statistics (max8, nc_find_index8, nc_match_replace8, bn_stats,
// bn_aggr) and partition reduction. Values compare and accumulate in fp32. Each works on a
// partition's values as one contiguous fp32 row (the row itself, or a converted copy), so that
// its loops vectorize in the library's copy (these are host calls, docs/native.md): element by
// element, with a dtype switch per value, max8 took 3.0 ns a value and bn_stats 2.6.
namespace {

// Whether v's partition rows are dense runs of esize-byte elements (the usual [P, n] tile).
inline bool dense_rows(const NView& v, int esize) {
  return v.size[1] == 1 && v.size[2] == 1 && v.size[3] == 1 && v.stride[kDims - 1] == esize;
}

// Partition row `row` of v (n values) as contiguous fp32: the row itself when v is a dense fp32
// [P, n] view, else its values converted into buf (n floats).
const float* f32_row(const NView& v, char* row, int vdt, int64_t n, float* buf) {
  if (vdt == static_cast<int>(DType::float32) && dense_rows(v, 4))
    return reinterpret_cast<const float*>(row);
  for (int64_t j = 0; j < n; ++j) buf[j] = b::load_f32(element(v, row, j), dt(vdt));
  return buf;
}

// max8's rule: the values of x[0..n) (n >= 8) inserted in order into a list of 8 sorted in
// descending order, a value entering after the equal ones already there (earlier elements
// rank first) and, once the list is full, only when it is above the last.
struct Top8 {
  float top[8];
  int have = 0;
  void insert(float v) {
    if (have == 8 && !(v > top[7])) return;
    int k = have < 8 ? have++ : 7;
    while (k > 0 && v > top[k - 1]) {
      top[k] = top[k - 1];
      --k;
    }
    top[k] = v;
  }
};

// Three steps on 16 floats at a time, in SSE (every x86-64 CPU has it; a scalar loop elsewhere):
// g++ 12 left their plain loops scalar, with a branch or a dependent step per value.
// The 16 lane maxima of x[0..n) (lane l: the largest of x[l], x[16 + l], ... over its whole
// groups of 16), or false when x[0..n) holds a NaN.
inline bool lane_maxima(const float* x, int64_t n, float out[16]) {
  int64_t j = 0;
  bool nan = false;
#if defined(__SSE2__)
  __m128 m[4], bad = _mm_setzero_ps();
  for (int q = 0; q < 4; ++q) m[q] = _mm_loadu_ps(x + 4 * q);
  for (; j + 16 <= n; j += 16)
    for (int q = 0; q < 4; ++q) {
      const __m128 v = _mm_loadu_ps(x + j + 4 * q);
      bad = _mm_or_ps(bad, _mm_cmpunord_ps(v, v));
      m[q] = _mm_max_ps(v, m[q]);  // v > m ? v : m
    }
  for (int q = 0; q < 4; ++q) _mm_storeu_ps(out + 4 * q, m[q]);
  nan = _mm_movemask_ps(bad) != 0;
#else
  for (int l = 0; l < 16; ++l) out[l] = x[l];
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) {
      nan |= x[j + l] != x[j + l];
      out[l] = x[j + l] > out[l] ? x[j + l] : out[l];
    }
#endif
  for (; j < n; ++j) nan |= x[j] != x[j];
  return !nan;
}

// Whether any of x[0..16) is at least t.
inline bool any16_at_least(const float* x, float t) {
#if defined(__SSE2__)
  const __m128 tt = _mm_set1_ps(t);
  __m128 any = _mm_setzero_ps();
  for (int q = 0; q < 4; ++q) any = _mm_or_ps(any, _mm_cmpge_ps(_mm_loadu_ps(x + 4 * q), tt));
  return _mm_movemask_ps(any) != 0;
#else
  bool any = false;
  for (int l = 0; l < 16; ++l) any |= x[l] >= t;
  return any;
#endif
}

// How many of x[0..16) equal v.
inline int count16_equal(const float* x, float v) {
#if defined(__SSE2__)
  const __m128 vv = _mm_set1_ps(v);
  int c = 0;
  for (int q = 0; q < 4; ++q)
    c += __builtin_popcount(
        static_cast<unsigned>(_mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + 4 * q), vv))));
  return c;
#else
  int c = 0;
  for (int l = 0; l < 16; ++l) c += x[l] == v;
  return c;
#endif
}

// Without NaNs the rule keeps the first 8 of the row stably sorted by descending value, so
// leaving out values below the 8th of the result changes nothing. The 8th largest of the 16
// lane maxima is at most that (8 distinct elements reach it): only the values that reach it
// are inserted, found 16 at a time (on uniform values about 11 of 512 reach it), instead of a
// branch per value that mispredicts at every insertion. Rows with a NaN (their
// comparisons fail) or under 16 values take the rule value by value.
NEURON_HOST_CLONES void top8(const float* x, int64_t n, float top[8]) {
  Top8 t;
  float lanes[16];
  if (n >= 16 && lane_maxima(x, n, lanes)) {
    Top8 g;
    for (float v : lanes) g.insert(v);
    const float floor = g.top[7];
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
      if (any16_at_least(x + j, floor))
        for (int l = 0; l < 16; ++l)
          if (x[j + l] >= floor) t.insert(x[j + l]);
    for (; j < n; ++j)
      if (x[j] >= floor) t.insert(x[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) t.insert(x[j]);
  }
  for (int k = 0; k < 8; ++k) top[k] = t.top[k];
}

// The position of the (skip + 1)-th value equal to v in x[0..n), or -1. Groups of 16 with no
// more than `skip` equal values are counted whole.
NEURON_HOST_CLONES int64_t nth_equal(const float* x, int64_t n, float v, int skip) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const int c = count16_equal(x + j, v);
    if (c > skip) break;
    skip -= c;
  }
  for (; j < n; ++j)
    if (x[j] == v && skip-- == 0) return j;
  return -1;
}

// The positions in the row x (n values) of the 8 values v: value k matches the first
// occurrence not already matched by an equal value before it (-1: none). Reversed
// (nc_match_replace8's order), the values are taken from k = 7 down: of equal values the last
// slot gets the first occurrence.
void match8(const float* x, int64_t n, const float v[8], int64_t pos[8], bool reverse) {
  for (int k = 0; k < 8; ++k) {
    int skip = 0;
    for (int j = 0; j < 8; ++j) skip += (reverse ? j > k : j < k) && v[j] == v[k];
    pos[k] = nth_equal(x, n, v[k], skip);
  }
}

// bn_stats of one parity of a row: the count, the mean and M2 (the sum of squared deviations)
// of x[parity], x[parity + 2], ... (n values in all in the row), both sums in the lane-blocked
// order of every free-axis reduction (builtins.hpp reduce_run; docs/numerics.md "Reductions").
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void bn_moments(const float* x, int64_t n, int parity,
                                                         float out[3]) {
  const int64_t c = (n - parity + 1) / 2;
  float lane[b::kReduceLanes];
  b::reduce_init(lane, AluOp::add);
  b::reduce_run(lane, AluOp::add, 0, c, [&](int64_t i) { return x[parity + 2 * i]; });
  const float count = static_cast<float>(c);
  const float mean = c > 0 ? b::reduce_finish(lane, AluOp::add) / count : 0.0f;
  b::reduce_init(lane, AluOp::add);
  b::reduce_run(lane, AluOp::add, 0, c, [&](int64_t i) {
    const float e = x[parity + 2 * i] - mean;
    return e * e;
  });
  out[0] = count;
  out[1] = mean;
  out[2] = b::reduce_finish(lane, AluOp::add);
}

// acc[j] = op(acc[j], r[j]): one step of tensor_partition_reduce's chain for every column.
template <AluOp Op>
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void combine_row(float* acc, const float* r, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] = b::alu(Op, acc[j], r[j]);
}
void combine_row(AluOp op, float* acc, const float* r, int64_t n) {
  switch (op) {
    case AluOp::add:
      return combine_row<AluOp::add>(acc, r, n);
    case AluOp::maximum:
      return combine_row<AluOp::maximum>(acc, r, n);
    case AluOp::minimum:
      return combine_row<AluOp::minimum>(acc, r, n);
    default:
      for (int64_t j = 0; j < n; ++j) acc[j] = b::alu(op, acc[j], r[j]);
  }
}

}  // namespace

extern "C" {

void neuron_k_max8(const NView* d, const NView* s, int ddt, int sdt) {
  const int64_t P = d->size[0], n = per_partition(*s);
  Scratch<float> buf(n);
  for (int64_t p = 0; p < P; ++p) {
    float top[8];
    top8(f32_row(*s, s->base + p * s->stride[0], sdt, n, buf.data), n, top);
    char* out = d->base + p * d->stride[0];
    for (int k = 0; k < 8; ++k) b::store_f32(element(*d, out, k), dt(ddt), top[k]);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

namespace {
// The 8 values of vals' partition p, as fp32.
void vals8(const NView& vals, int vdt, int64_t p, float v[8]) {
  char* row = vals.base + p * vals.stride[0];
  for (int k = 0; k < 8; ++k) v[k] = b::load_f32(element(vals, row, k), dt(vdt));
}
}  // namespace

void neuron_k_find_index8(const NView* d, const NView* data, const NView* vals, int ddt, int sdt,
                          int vdt, int reverse) {
  const int64_t P = d->size[0], n = per_partition(*data);
  Scratch<float> buf(n);
  for (int64_t p = 0; p < P; ++p) {
    float v[8];
    vals8(*vals, vdt, p, v);
    int64_t pos[8];
    match8(f32_row(*data, data->base + p * data->stride[0], sdt, n, buf.data), n, v, pos,
           reverse != 0);
    char* out = d->base + p * d->stride[0];
    for (int k = 0; k < 8; ++k)  // -1: all ones
      b::store_int_bits(element(*d, out, k), dt(ddt), pos[k]);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_match_replace8(const NView* d, const NView* data, const NView* vals, int ddt,
                             int sdt, int vdt, double imm) {
  Snapshot sd(data, sdt, d, ddt), sv(vals, vdt, d, ddt);
  const NView& src = *sd.view;
  const int64_t P = d->size[0], n = per_partition(*d);
  const int esize = neuron::dtype_bytes(dt(ddt));
  Scratch<float> buf(n);
  for (int64_t p = 0; p < P; ++p) {
    char* row = src.base + p * src.stride[0];
    float v[8];
    vals8(*sv.view, vdt, p, v);
    int64_t pos[8];
    match8(f32_row(src, row, sdt, n, buf.data), n, v, pos, true);
    char* out = d->base + p * d->stride[0];
    if (ddt == sdt && dense_rows(*d, esize) && dense_rows(src, esize)) {
      if (out != row) std::memcpy(out, row, static_cast<size_t>(n * esize));  // exactly d, or apart
    } else {
      for (int64_t j = 0; j < n; ++j)
        move_element(element(*d, out, j), ddt, element(src, row, j), sdt);
    }
    for (int k = 0; k < 8; ++k)
      if (pos[k] >= 0) b::store_f32(element(*d, out, pos[k]), dt(ddt), static_cast<float>(imm));
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_bn_stats(const NView* d, const NView* s, int ddt, int sdt) {
  const int64_t P = d->size[0], n = per_partition(*s);
  Scratch<float> buf(n);
  for (int64_t p = 0; p < P; ++p) {
    const float* x = f32_row(*s, s->base + p * s->stride[0], sdt, n, buf.data);
    char* out = d->base + p * d->stride[0];
    for (int parity = 0; parity < 2; ++parity) {  // even-indexed, then odd-indexed elements
      float m[3];
      bn_moments(x, n, parity, m);
      for (int i = 0; i < 3; ++i) b::store_f32(element(*d, out, 3 * parity + i), dt(ddt), m[i]);
    }
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_bn_aggr(const NView* d, const NView* s, int ddt, int sdt) {
  const int64_t P = d->size[0], triples = per_partition(*s) / 3;
  for (int64_t p = 0; p < P; ++p) {
    char* row = s->base + p * s->stride[0];
    auto at = [&](int64_t t, int i) { return b::load_f32(element(*s, row, 3 * t + i), dt(sdt)); };
    float count = 0, weighted = 0;
    for (int64_t t = 0; t < triples; ++t) {
      count += at(t, 0);
      weighted += at(t, 0) * at(t, 1);
    }
    const float mean = count > 0 ? weighted / count : 0.0f;
    float m2 = 0;  // Chan et al.: M2 = sum(M2_t + n_t (mean_t - mean)^2)
    for (int64_t t = 0; t < triples; ++t) {
      const float e = at(t, 1) - mean;
      m2 += at(t, 2) + at(t, 0) * e * e;
    }
    char* out = d->base + p * d->stride[0];
    b::store_f32(element(*d, out, 0), dt(ddt), mean);
    b::store_f32(element(*d, out, 1), dt(ddt), count > 0 ? m2 / count : 0.0f);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

// Column j of the result is op(... op(op(x[0][j], x[1][j]), x[2][j]) ..., x[P-1][j]); the
// partitions are walked outside, so each step runs along the row (combine_row).
void neuron_k_partition_reduce(const NView* d, const NView* s, int ddt, int sdt, int op_) {
  const AluOp op = static_cast<AluOp>(op_);
  const int64_t P = s->size[0], n = per_partition(*s);
  char* out = d->base;
  if (b::alu_is_bitvec(op) && is_int(ddt) && is_int(sdt)) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = b::load_int(element(*s, s->base, j), dt(sdt));
      for (int64_t p = 1; p < P; ++p)
        acc = b::alu_bits(op, acc,
                          b::load_int(element(*s, s->base + p * s->stride[0], j), dt(sdt)));
      b::store_int_bits(element(*d, out, j), dt(ddt), acc);
    }
  } else {
    Scratch<float> acc(n), buf(n);
    const float* first = f32_row(*s, s->base, sdt, n, buf.data);
    std::memcpy(acc.data, first, sizeof(float) * static_cast<size_t>(n));
    for (int64_t p = 1; p < P; ++p)
      combine_row(op, acc.data, f32_row(*s, s->base + p * s->stride[0], sdt, n, buf.data), n);
    for (int64_t j = 0; j < n; ++j) b::store_f32(element(*d, out, j), dt(ddt), acc.data[j]);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_stream_shuffle(const NView* d, const NView* s, int ddt, int sdt, int64_t m0,
                             int64_t m1, int64_t m2, int64_t m3) {
  Snapshot ss(s, sdt, d, ddt, /*across_partitions=*/true);
  const NView& src = *ss.view;
  const int64_t P = d->size[0], n = per_partition(*d);
  const int64_t packed[4] = {m0, m1, m2, m3};
  for (int64_t p = 0; p < P; ++p) {
    const int64_t i = p % 32;
    const int64_t from = (static_cast<uint64_t>(packed[i / 8]) >> (8 * (i % 8))) & 0xff;
    if (from == 255) continue;  // this partition keeps its value
    char* row = src.base + (p - i + from) * src.stride[0];
    char* out = d->base + p * d->stride[0];
    for (int64_t j = 0; j < n; ++j) move_element(element(*d, out, j), ddt, element(src, row, j), sdt);
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

// Registers are 32-bit: a loaded value wraps to int32 (float elements convert by rounding).
// ---- random numbers (instr_kernels.hpp) ----

namespace {
struct RngState {
  uint64_t key, counter;
};
uint32_t word(const NView& st, int64_t p, int k) {
  uint32_t w;
  std::memcpy(&w, element(st, st.base + p * st.stride[0], k), 4);
  return w;
}
void set_word(const NView& st, int64_t p, int k, uint32_t w) {
  std::memcpy(element(st, st.base + p * st.stride[0], k), &w, 4);
}
RngState rng_state(const NView& st, int64_t p) {
  return {word(st, p, 0) | static_cast<uint64_t>(word(st, p, 1)) << 32,
          word(st, p, 2) | static_cast<uint64_t>(word(st, p, 3)) << 32};
}
// rng's values for one dense fp32 row (the same expression as the general loop in
// neuron_k_rng, without a dtype switch per value): value i from counter + i, a value that
// reaches a positive `high` (clamp) replaced by `below`, the float under it.
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void rng_row_f32(float* out, int64_t n, RngState s,
                                                          double low, double high, bool clamp,
                                                          float below) {
  const float hi = static_cast<float>(high);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = b::rng_bits(s.key, s.counter + static_cast<uint64_t>(i));
    const float v = static_cast<float>(low + (high - low) * b::rng_unit(bits));
    out[i] = clamp && v >= hi ? below : v;
  }
}

// dropout of one row of 4-byte elements (dense rows): an element whose draw is under prob
// becomes 0 (all zero bits in every 4-byte dtype), the others keep their bits.
NEURON_HOST_CLONES NEURON_HOST_VECTORIZE void dropout_row32(uint32_t* out, const uint32_t* in,
                                                            int64_t n, RngState s, float prob) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = b::rng_unit(b::rng_bits(s.key, s.counter + static_cast<uint64_t>(i)));
    out[i] = in[i] & (0u - static_cast<uint32_t>(!(u < prob)));  // a mask, not a branch
  }
}

void set_rng_state(const NView& st, int64_t p, RngState s) {
  set_word(st, p, 0, static_cast<uint32_t>(s.key));
  set_word(st, p, 1, static_cast<uint32_t>(s.key >> 32));
  set_word(st, p, 2, static_cast<uint32_t>(s.counter));
  set_word(st, p, 3, static_cast<uint32_t>(s.counter >> 32));
}
}  // namespace

void neuron_k_rng(const NView* d, const NView* st, int ddt, double low, double high) {
  const int64_t P = d->size[0], n = per_partition(*d);
  const bool fl = neuron::dtype_is_float(dt(ddt));
  // A value that rounds up to a positive `high` in the destination's type (bf16 draws of [0, 1)
  // above 1 - 2^-9, or a wide rand2 interval) becomes the largest value below it: the bit
  // pattern of `high` less one, for any float type.
  unsigned char below_high[4] = {};
  const int esize = neuron::dtype_bytes(dt(ddt));
  if (fl && high > 0 && high > low) {
    b::store_f32(below_high, dt(ddt), static_cast<float>(high));
    uint32_t v = 0;
    std::memcpy(&v, below_high, esize);
    --v;
    std::memcpy(below_high, &v, esize);
  }
  const bool clamp = fl && high > 0 && high > low;
  if (ddt == static_cast<int>(DType::float32) && dense_rows(*d, 4)) {
    float below;
    std::memcpy(&below, below_high, 4);
    for (int64_t p = 0; p < P; ++p)
      rng_row_f32(reinterpret_cast<float*>(d->base + p * d->stride[0]), n, rng_state(*st, p), low,
                  high, clamp, below);
    return clear_flags(*d, 4);
  }
  for (int64_t p = 0; p < P; ++p) {
    const RngState s = rng_state(*st, p);
    char* row = d->base + p * d->stride[0];
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t bits = b::rng_bits(s.key, s.counter + static_cast<uint64_t>(i));
      char* e = element(*d, row, i);
      if (fl) {
        b::store_f32(e, dt(ddt), static_cast<float>(low + (high - low) * b::rng_unit(bits)));
        if (clamp && b::load_f32(e, dt(ddt)) >= static_cast<float>(high))
          std::memcpy(e, below_high, esize);
      } else
        b::store_int_bits(e, dt(ddt), static_cast<int64_t>(bits & 0xffffffffu));
    }
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_dropout(const NView* d, const NView* s, const NView* st, const NView* prob, int ddt,
                      int sdt, int pdt, double prob_imm) {
  const int64_t P = d->size[0], n = per_partition(*d);
  const int esize = neuron::dtype_bytes(dt(ddt));
  Scratch<float> pr(P);
  column(prob, pdt, prob_imm, P, pr.data);
  if (ddt == sdt && esize == 4 && dense_rows(*d, 4) && dense_rows(*s, 4)) {
    for (int64_t p = 0; p < P; ++p)
      dropout_row32(reinterpret_cast<uint32_t*>(d->base + p * d->stride[0]),
                    reinterpret_cast<const uint32_t*>(s->base + p * s->stride[0]), n,
                    rng_state(*st, p), pr.data[p]);
    return clear_flags(*d, 4);
  }
  for (int64_t p = 0; p < P; ++p) {
    const RngState rs = rng_state(*st, p);
    char* row = d->base + p * d->stride[0];
    char* srow = s->base + p * s->stride[0];
    for (int64_t i = 0; i < n; ++i) {
      const float u = b::rng_unit(b::rng_bits(rs.key, rs.counter + static_cast<uint64_t>(i)));
      char* e = element(*d, row, i);
      const char* from = element(*s, srow, i);
      // A select, not a branch: half the elements of a rate-0.5 dropout mispredicted one.
      // 0.0 is all zero bits in every 2- and 4-byte dtype; a kept element of the same dtype is
      // its bits.
      const bool drop = u < pr.data[p];
      if (ddt == sdt && esize == 4) {
        uint32_t w;
        std::memcpy(&w, from, 4);
        w = drop ? 0u : w;
        std::memcpy(e, &w, 4);
      } else if (ddt == sdt && esize == 2) {
        uint16_t w;
        std::memcpy(&w, from, 2);
        w = drop ? uint16_t{0} : w;
        std::memcpy(e, &w, 2);
      } else if (drop) {
        b::store_f32(e, dt(ddt), 0.0f);
      } else {
        move_element(e, ddt, from, sdt);
      }
    }
  }
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

void neuron_k_rng_seed(const NView* d, const NView* seed, int sdt, double seed_imm) {
  const int64_t P = d->size[0];
  const int64_t rows = seed ? seed->size[0] : 1;
  Scratch<int64_t> v(rows);
  column_int(seed, sdt, seed_imm, rows, v.data);
  for (int64_t p = 0; p < P; ++p)
    set_rng_state(*d, p, {b::rng_key(static_cast<uint32_t>(v.data[rows == 1 ? 0 : p]), p), 0});
}

void neuron_k_rng_skip(const NView* d, const NView* st, int64_t count) {
  for (int64_t p = 0; p < d->size[0]; ++p) {
    RngState s = rng_state(*st, p);
    s.counter += static_cast<uint64_t>(count);
    set_rng_state(*d, p, s);
  }
}

// ---- MX (instr_kernels.hpp) ----

namespace {
// An MX operand [K, X] (x4 elements) with its scales applied: out[(k * 4 + q) * X + x] is value
// q of element x on partition k times 2^(scale - 127), the scale of block k / 8 on partition
// (k / 32) * 32 + (k / 8) % 4 of `sc`, column x. Each code's value comes from a table made once
// per call (b::mx_value of every code: the same floats, without a decode per value).
void mx_operand(const NView& v, int vdt, const NView& sc, float* out) {
  const int64_t K = v.size[0], X = per_partition(v);
  const bool fp4 = dt(vdt) == DType::float4_e2m1fn_x4;
  float code_value[256];
  for (int c = 0; c < 256; ++c) {
    const uint8_t bytes[4] = {static_cast<uint8_t>(c), static_cast<uint8_t>(c), 0, 0};
    code_value[c] = b::mx_value(bytes, dt(vdt), 0);  // fp4: the low nibble's value
  }
  // Column x's byte offsets within a row, the same on every partition.
  Scratch<int64_t, 1> voff(X), soff(X);
  for (int64_t x = 0; x < X; ++x) {
    voff.data[x] = element(v, v.base, x) - v.base;
    soff.data[x] = element(sc, sc.base, x) - sc.base;
  }
  Scratch<float, 1> scale(X);
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* row = reinterpret_cast<const uint8_t*>(v.base + k * v.stride[0]);
    const int64_t g = k / 8;
    const uint8_t* srow =
        reinterpret_cast<const uint8_t*>(sc.base + ((g / 4) * 32 + g % 4) * sc.stride[0]);
    for (int64_t x = 0; x < X; ++x) scale.data[x] = b::mx_scale(srow[soff.data[x]]);
    for (int q = 0; q < 4; ++q) {
      float* o = out + (k * 4 + q) * X;
      for (int64_t x = 0; x < X; ++x) {
        const uint8_t* e = row + voff.data[x];
        const int code = fp4 ? (e[q / 2] >> (4 * (q % 2))) & 0xf : e[q];
        o[x] = code_value[code] * scale.data[x];
      }
    }
  }
}
}  // namespace

void neuron_k_matmul_mx(const NView* d, const NView* st, const NView* mv, const NView* ss,
                        const NView* ms, int ddt, int sdt, int mdt, int accumulate) {
  const int64_t K = st->size[0], M = per_partition(*st), N = per_partition(*mv);
  Scratch<float, 1> s(K * M * 4), v(K * N * 4);
  mx_operand(*st, sdt, *ss, s.data);
  mx_operand(*mv, mdt, *ms, v.data);
  // Value q of element k is row k * 4 + q of a K * 4-row product: the chain runs over k, then q.
  matmul_into(*d, ddt, s.data, M, v.data, N, K * 4, M, N, accumulate_mode(*d, accumulate, M * N),
              neuron_matmul_f32);
  fill_flags(*d, neuron::dtype_bytes(dt(ddt)), 1);
}

void neuron_k_quantize_mx(const NView* d, const NView* sc, const NView* s, int ddt, int sdt) {
  const int64_t P = s->size[0], X = per_partition(*d);
  for (int64_t g = 0; g < P / 8; ++g) {
    char* srow = sc->base + ((g / 4) * 32 + g % 4) * sc->stride[0];
    for (int64_t x = 0; x < X; ++x) {
      float vals[8][4];
      uint32_t max_exp = 0;
      for (int r = 0; r < 8; ++r)
        for (int q = 0; q < 4; ++q) {
          vals[r][q] = b::load_f32(element(*s, s->base + (g * 8 + r) * s->stride[0], x * 4 + q),
                                   dt(sdt));
          const uint32_t e = (b::f32_bits(vals[r][q]) >> 23) & 0xffu;
          max_exp = e > max_exp ? e : max_exp;
        }
      const uint32_t scale = b::mx_block_scale(max_exp, dt(ddt));
      *reinterpret_cast<uint8_t*>(element(*sc, srow, x)) = static_cast<uint8_t>(scale);
      for (int r = 0; r < 8; ++r) {
        auto* e = reinterpret_cast<uint8_t*>(element(*d, d->base + (g * 8 + r) * d->stride[0], x));
        for (int q = 0; q < 4; ++q) e[q] = b::mx_quantize(vals[r][q], scale, dt(ddt));
      }
    }
  }
}

// dma_copy with bitcast: the bytes of s in its row-major element order, written into d's.
void neuron_k_copy_bytes(const NView* d, const NView* s, int ddt, int sdt) {
  const int de = neuron::dtype_bytes(dt(ddt)), se = neuron::dtype_bytes(dt(sdt));
  const int64_t n = count_of(*s) * se;
  Scratch<char, 1> bytes(n);
  int64_t i = 0;
  each1(*s, [&](char* p) {
    std::memcpy(bytes.data + i, p, static_cast<size_t>(se));
    i += se;
  });
  i = 0;
  each1(*d, [&](char* p) {
    std::memcpy(p, bytes.data + i, static_cast<size_t>(de));
    i += de;
  });
  clear_flags(*d, de);
}

// A register is 32-bit: an integer element wraps to it, a float element converts like any
// fp32 -> int32 conversion (round to nearest even, NaN -> 0, saturate; an infinity does not
// wrap to -1).
int64_t neuron_k_load_scalar(const NView* s, int sdt) {
  if (!is_int(sdt))
    return b::f64_to_int_sat(b::load_f32(s->base, dt(sdt)), INT32_MIN, INT32_MAX);
  const int64_t v = b::load_int(s->base, dt(sdt));
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
}

void neuron_k_store_scalar(const NView* d, int ddt, int64_t value) {
  const int64_t v = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(value)));
  b::store_int(d->base, dt(ddt), v);
  clear_flags(*d, neuron::dtype_bytes(dt(ddt)));
}

// ---- the cold paths (declared in instr_abi.hpp) ----

[[gnu::noinline, gnu::cold]] void neuron_k_snapshot_copy(const NView* d, const NView* s, int ddt,
                                                         int sdt, int same) {
  Snapshot ss(s, sdt, d, ddt);
  neuron_k_copy(d, ss.view, ddt, sdt, same);
}
[[gnu::noinline, gnu::cold]] void neuron_k_snapshot_tensor_tensor(const NView* d, const NView* a,
                                                                  const NView* bv, int ddt, int adt,
                                                                  int bdt, int op, int same) {
  Snapshot sa(a, adt, d, ddt), sb(bv, bdt, d, ddt);
  neuron_k_tensor_tensor(d, sa.view, sb.view, ddt, adt, bdt, op, same);
}
// c0/c1 and bias/scale are gathered into per-partition columns before anything is written.
[[gnu::noinline, gnu::cold]] void neuron_k_snapshot_tensor_scalar(
    const NView* d, const NView* s, const NView* c0, const NView* c1, int ddt, int sdt, int c0dt,
    int c1dt, int op0, int op1, int rev0, int rev1, double imm0, double imm1, int same) {
  Snapshot ss(s, sdt, d, ddt);
  neuron_k_tensor_scalar(d, ss.view, c0, c1, ddt, sdt, c0dt, c1dt, op0, op1, rev0, rev1, imm0, imm1,
                         same);
}
[[gnu::noinline, gnu::cold]] void neuron_k_snapshot_activation(
    const NView* d, const NView* s, const NView* bias, const NView* scale, const NView* rr, int ddt,
    int sdt, int bdt, int scdt, int rrdt, int func, int reduce_op, double scale_imm, int same) {
  Snapshot ss(s, sdt, d, ddt);
  neuron_k_activation(d, ss.view, bias, scale, rr, ddt, sdt, bdt, scdt, rrdt, func, reduce_op,
                      scale_imm, same);
}
[[gnu::noinline, gnu::cold]] void neuron_k_snapshot_copy_predicated(const NView* d, const NView* s,
                                                                    const NView* pred, int ddt,
                                                                    int sdt, int pdt, int same) {
  Snapshot ss(s, sdt, d, ddt), sp(pred, pdt, d, ddt);
  neuron_k_copy_predicated(d, ss.view, sp.view, ddt, sdt, pdt, same);
}
[[gnu::noinline, gnu::cold]] void neuron_k_snapshot_affine_select(const NView* d, const NView* s,
                                                                  const NView* pat, int ddt,
                                                                  int sdt, int64_t offset,
                                                                  int cmp_op, double on_false) {
  Snapshot ss(s, sdt, d, ddt);
  neuron_k_affine_select(d, ss.view, pat, ddt, sdt, offset, cmp_op, on_false);
}

}  // extern "C"
