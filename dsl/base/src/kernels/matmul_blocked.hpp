// Private to the matmul kernel: the register-blocked fp32 driver shared by the SIMD variants
// (bf16 has its own rule and kernels: matmul_bf16_pairs.hpp, matmul_amx.cpp).
//
// Included by each variant's source after `#pragma GCC target(...)`, so every function here is
// compiled for that ISA; everything is in an anonymous namespace so no ISA-specific copy can
// leak to other translation units through the linker. Include the standard headers before the
// pragma; this file includes none.
//
// V (the vector traits) provides: reg, W (lanes), MR (rows of C per block), NV (vectors of C per
// row per block), zero(), load(p), load_part(p, n) (lanes >= n are 0), bcast(p),
// fma(a, b, c) = a * b + c with one rounding, add(a, b), store(p, r), store_part(p, r, n), and
// copy_a(float* dst, src) copying MR elements of a row of A.
//
// Numerics: each C(m, n) lives in one accumulator lane from its first to its last k of a K chunk
// and gets one fma per k in increasing k; between K chunks it is stored to C and reloaded,
// which is exact in fp32. Packing only copies, so every variant is
// bit-identical to the scalar loop in the header's contract.
#pragma once

namespace {

constexpr int64_t kKC = 128;  // rows of A and B per packed chunk (one instruction's K)
constexpr int64_t kMC = 128;  // columns of A packed at once

inline float to_f32(float x) {
  return x;
}

template <class V>
inline typename V::reg load_any(const float* p) {
  return V::load(p);
}
template <class V>
inline typename V::reg load_any_part(const float* p, int n) {
  return V::load_part(p, n);
}

// Packed A holds kMC columns rounded up to whole panels of MR.
template <class V>
constexpr int64_t packed_a_floats() {
  return (kMC + V::MR - 1) / V::MR * V::MR * kKC;
}

// A block's operands: its packed A panel (kc rows of MR floats) and packed B panel (kc rows of
// NR = W * NV floats). With kPackA / kPackB the kernel also reads that panel from its source
// (a, lda / b, ldb) and writes the packed copy as it goes: the copy rides along in the load and
// store slots the FMAs leave idle, instead of being a separate pass that waits on memory.
// In the transposed-A form (kAT, matmul_at_blocked) the kernel reads A(k, m) unpacked from
// a[m * lda + k] (with -0 already read as +0 where the caller asked: matmul_at_blocked).
template <class T>
struct BlockOperands {
  float* ap;
  const T* a;
  int64_t lda;
  float* bp;
  const T* b;
  int64_t ldb;
};

// C[0:MR, 0:NV*W] (+)= A^T B over kc rows; only `last` lanes of the last vector are C.
// Kept out of line so each block shape is one compact loop and the driver stays small. Partial
// (masked) accesses are used only when the last vector really is partial: AVX2's are slow.
template <class V, int MR, int NV, class T, bool kPackA, bool kPackB, bool kAT = false>
__attribute__((noinline)) void micro_kernel(const BlockOperands<T>& op, int64_t kc, float* c,
                                            int64_t ldc, int last, bool load_c) {
  static_assert(!kPackA || MR == V::MR, "packing A needs a full panel");
  static_assert(!(kPackA && kAT), "the transposed form reads A unpacked");
  using R = typename V::reg;
  constexpr int W = V::W, NR = V::W * V::NV;
  float* const ap = op.ap;
  float* const bp = op.bp;
  const T* const asrc = op.a;
  const T* const bsrc = op.b;
  const int64_t lda = op.lda, ldb = op.ldb;
  // B's rows may be a forwarded load's HBM rows (lower_program.cpp), a page or more apart, where
  // no hardware prefetcher follows: fetch the first rows now and each row 16 ahead in the loop
  // (Intel Xeon, 2048^3 fp32 at 2 threads, when nc_matmul's B was still packed here: +3-4%; a
  // B of one K chunk is now packed whole before the blocks, pack_whole_b).
  if constexpr (kPackB)
    for (int64_t r = 0; r < 16; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) __builtin_prefetch(bsrc + r * ldb + v * W);
  R acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (!load_c)
        acc[i][v] = V::zero();
      else if (v == NV - 1 && last < W)
        acc[i][v] = V::load_part(c + i * ldc + v * W, last);
      else
        acc[i][v] = V::load(c + i * ldc + v * W);
    }
  for (int64_t k = 0; k < kc; ++k) {
    // The next row panel's C block (the driver's next call, same columns), one line per k:
    // C tiles (PSUM) mostly live in L3 by the time a K chunk comes back to them.
    if (k < MR * NV) __builtin_prefetch(c + (MR + k / NV) * ldc + (k % NV) * W);
    R bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if constexpr (kPackB) {
        __builtin_prefetch(bsrc + (k + 16) * ldb + v * W);
        const T* src = bsrc + k * ldb + v * W;
        bv[v] = v == NV - 1 && last < W ? load_any_part<V>(src, last) : load_any<V>(src);
        V::store(bp + k * NR + v * W, bv[v]);
      } else {
        bv[v] = V::load(bp + k * NR + v * W);
      }
    }
    if constexpr (kPackA) {
      // The stationary tile's rows are a partition apart and usually come from L3 (a row
      // group's A panel outgrows L2): fetch each row's next line, where the next panels
      // read, so their blocks do not wait on it.
      V::copy_a(ap + k * MR, asrc + k * lda);
      __builtin_prefetch(asrc + k * lda + 16);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      R av;
      if constexpr (kAT)
        av = V::bcast(asrc + i * lda + k);
      else
        av = V::bcast(ap + k * V::MR + i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(av, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1 && last < W)
        V::store_part(c + i * ldc + v * W, acc[i][v], last);
      else
        V::store(c + i * ldc + v * W, acc[i][v]);
    }
}

// Full panels of A may pack A and/or B on the fly; partial ones (mr < MR) read packed panels.
// `at`: the transposed-A form (pack_a false).
template <class V, int MR, int NV, class T>
void dispatch_mr(int mr, bool pack_a, bool pack_b, bool at, const BlockOperands<T>& op, int64_t kc,
                 float* c, int64_t ldc, int last, bool load_c) {
  if (mr == MR) {
    if constexpr (MR == V::MR) {
      if (at && pack_b)
        return micro_kernel<V, MR, NV, T, false, true, true>(op, kc, c, ldc, last, load_c);
      if (at) return micro_kernel<V, MR, NV, T, false, false, true>(op, kc, c, ldc, last, load_c);
      if (pack_a && pack_b)
        return micro_kernel<V, MR, NV, T, true, true>(op, kc, c, ldc, last, load_c);
      if (pack_a) return micro_kernel<V, MR, NV, T, true, false>(op, kc, c, ldc, last, load_c);
      if (pack_b) return micro_kernel<V, MR, NV, T, false, true>(op, kc, c, ldc, last, load_c);
    }
    if (at) return micro_kernel<V, MR, NV, T, false, false, true>(op, kc, c, ldc, last, load_c);
    return micro_kernel<V, MR, NV, T, false, false>(op, kc, c, ldc, last, load_c);
  }
  if constexpr (MR > 1)
    dispatch_mr<V, MR - 1, NV>(mr, pack_a, pack_b, at, op, kc, c, ldc, last, load_c);
}

template <class V, int NV, class T>
void dispatch_nv(int nv, int mr, bool pack_a, bool pack_b, bool at, const BlockOperands<T>& op,
                 int64_t kc, float* c, int64_t ldc, int last, bool load_c) {
  if (nv == NV)
    return dispatch_mr<V, V::MR, NV>(mr, pack_a, pack_b, at, op, kc, c, ldc, last, load_c);
  if constexpr (NV > 1)
    dispatch_nv<V, NV - 1>(nv, mr, pack_a, pack_b, at, op, kc, c, ldc, last, load_c);
}

// Ap: for each panel of MR columns m, rows k = 0..kc-1 of MR contiguous floats (zero padded).
template <class V, class T>
void pack_a(float* ap, const T* a, int64_t lda, int64_t kc, int64_t mc) {
  constexpr int MR = V::MR;
  for (int64_t p = 0; p < mc; p += MR) {
    const int64_t mr = mc - p < MR ? mc - p : MR;
    float* dst = ap + p * kc;
    for (int64_t k = 0; k < kc; ++k) {
      const T* row = a + k * lda + p;
      if (mr == MR) {
        V::copy_a(dst + k * MR, row);
      } else {
        for (int i = 0; i < MR; ++i) dst[k * MR + i] = i < mr ? to_f32(row[i]) : 0.0f;
      }
    }
  }
}

// Bp: rows k = 0..kc-1 of NR = W * NV floats; columns past nw are zero.
template <class V, class T>
void pack_b(float* bp, const T* b, int64_t ldb, int64_t kc, int64_t nw) {
  constexpr int W = V::W, NR = V::W * V::NV;
  for (int64_t k = 0; k < kc; ++k) {
    const T* row = b + k * ldb;
    float* dst = bp + k * NR;
    if (nw == NR) {
#pragma GCC unroll 4
      for (int v = 0; v < V::NV; ++v) V::store(dst + v * W, load_any<V>(row + v * W));
    } else {
      for (int v = 0; v * W < nw; ++v) {
        const int64_t left = nw - v * W;
        V::store(dst + v * W, left >= W ? load_any<V>(row + v * W)
                                        : load_any_part<V>(row + v * W, static_cast<int>(left)));
      }
    }
  }
}

// C[0:M, 0:N] (+)= A^T B for M <= kSkinnyM (a few rows of C: the column sums of B, a vector
// times B). Packing B pays off only when several panels of A reuse it; here one would, so B is
// read where it lies. Each C(m, n) gets the blocked path's fma chain in increasing k (one
// accumulator lane from the first k to the last), so the bits are the same.
constexpr int64_t kSkinnyM = 2;

// MM (the rows of C) and NV are constants, so the MM x NV accumulators live in registers (a
// runtime row count kept them on the stack: a load and a store around every fma).
template <class V, int NV, int MM>
inline void skinny_block(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                         int64_t ldb, int64_t K, bool load_c, int last) {
  using R = typename V::reg;
  constexpr int W = V::W;
  R acc[MM][NV];
#pragma GCC unroll 2
  for (int i = 0; i < MM; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const int lanes = v == NV - 1 ? last : W;
      acc[i][v] = !load_c        ? V::zero()
                  : lanes < W    ? V::load_part(c + i * ldc + v * W, lanes)
                                 : V::load(c + i * ldc + v * W);
    }
  for (int64_t k = 0; k < K; ++k) {
    R bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const int lanes = v == NV - 1 ? last : W;
      bv[v] = lanes < W ? V::load_part(b + k * ldb + v * W, lanes) : V::load(b + k * ldb + v * W);
    }
#pragma GCC unroll 2
    for (int i = 0; i < MM; ++i) {
      const R av = V::bcast(a + k * lda + i);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(av, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < MM; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const int lanes = v == NV - 1 ? last : W;
      if (lanes < W)
        V::store_part(c + i * ldc + v * W, acc[i][v], lanes);
      else
        V::store(c + i * ldc + v * W, acc[i][v]);
    }
}

// K = 0: each C(m, n) is the sum of nothing, 0, or keeps its value when accumulating.
inline void empty_sum(float* c, int64_t ldc, int64_t M, int64_t N, bool accumulate) {
  if (!accumulate)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) c[m * ldc + n] = 0.0f;
}

// The column panel of C from column n0 of N: `cols` columns in `vectors` vectors of V::W lanes,
// `last` of them in the last.
template <class V>
struct Panel {
  int64_t cols;
  int vectors, last;
  Panel(int64_t n0, int64_t N) {
    constexpr int64_t NR = V::W * V::NV;
    cols = N - n0 < NR ? N - n0 : NR;
    vectors = static_cast<int>((cols + V::W - 1) / V::W);
    last = static_cast<int>(cols - (vectors - 1) * V::W);
  }
};

// Eight accumulators in flight whatever MM (fma latency x throughput).
template <class V, int MM>
void matmul_skinny_rows(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                        int64_t ldb, int64_t N, int64_t K, bool accumulate) {
  constexpr int NV = 8 / MM;
  constexpr int64_t W = V::W, NR = NV * V::W;
  int64_t n0 = 0;
  for (; n0 + NR <= N; n0 += NR)
    skinny_block<V, NV, MM>(c + n0, ldc, a, lda, b + n0, ldb, K, accumulate, W);
  for (; n0 < N; n0 += W) {
    const int lanes = static_cast<int>(N - n0 < W ? N - n0 : W);
    skinny_block<V, 1, MM>(c + n0, ldc, a, lda, b + n0, ldb, K, accumulate, lanes);
  }
}

template <class V>
void matmul_skinny(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb,
                   int64_t M, int64_t N, int64_t K, bool accumulate) {
  static_assert(kSkinnyM == 2, "one instantiation per row count");
  if (M == 1) return matmul_skinny_rows<V, 1>(c, ldc, a, lda, b, ldb, N, K, accumulate);
  matmul_skinny_rows<V, 2>(c, ldc, a, lda, b, ldb, N, K, accumulate);
}

// A B of one K chunk and at most kWholeN columns (an nc_matmul's moving tile) is packed whole
// before the blocks run (pack_whole_b), so a next call over the same B (a row group's subtiles,
// same_b) and the row chunks past the first reuse it. Floats it takes:
constexpr int64_t kWholeN = 512;
template <class V>
constexpr int64_t whole_b_floats() {
  constexpr int64_t NR = V::W * V::NV;
  return kKC * ((kWholeN + NR - 1) / NR * NR);
}

// A whole B's panels (kc rows of NR floats each, side by side), packed row by row: each row of
// B read once, front to back. B's rows may be a forwarded load's HBM rows, pages apart; packed
// panel by panel (by the first row panel's blocks), each block read 192 bytes of every row and
// waited on most of them (Intel Xeon, 2048^3 fp32: +3-4%).
template <class V, class T>
void pack_whole_b(float* bp, const T* b, int64_t ldb, int64_t kc, int64_t N) {
  constexpr int W = V::W, NR = V::W * V::NV;
  for (int64_t k = 0; k < kc; ++k) {
    const T* row = b + k * ldb;
    for (int64_t n0 = 0; n0 < N; n0 += NR) {
      float* dst = bp + n0 / NR * kc * NR + k * NR;
      for (int v = 0; v < V::NV && n0 + v * W < N; ++v) {
        const int64_t left = N - n0 - v * W;
        V::store(dst + v * W, left >= W
                                  ? load_any<V>(row + n0 + v * W)
                                  : load_any_part<V>(row + n0 + v * W, static_cast<int>(left)));
      }
    }
  }
}

thread_local neuron::native::PackedB packed_b;  // kept when B is packed whole

template <class V, class T>
void matmul_blocked(float* c, int64_t ldc, const T* a, int64_t lda, const T* b, int64_t ldb,
                    int64_t M, int64_t N, int64_t K, bool accumulate, float* scratch,
                    bool same_b = false) {
  constexpr int64_t NR = V::W * V::NV;
  if (K <= 0) return empty_sum(c, ldc, M, N, accumulate);
  if (M <= kSkinnyM) {
    // B is not packed here: a later call must not take an older packing.
    packed_b = neuron::native::PackedB{};
    return matmul_skinny<V>(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
  }
  float* ap = scratch;
  float* bp = scratch + packed_a_floats<V>();
  const bool whole = K <= kKC && N <= kWholeN;
  const bool reuse = packed_b.take(same_b, whole, b, ldb, N, K, scratch);
  if (whole && !reuse) pack_whole_b<V>(bp, b, ldb, K, N);
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = K - k0 < kKC ? K - k0 : kKC;
    const bool load_c = accumulate || k0 > 0;
    for (int64_t m0 = 0; m0 < M; m0 += kMC) {
      const int64_t mc = M - m0 < kMC ? M - m0 : kMC;
      // The first column panel of B packs the A panels; the first A panel packs each B panel
      // unless B is packed whole (above).
      for (int64_t n0 = 0; n0 < N; n0 += NR) {
        const Panel<V> pn(n0, N);
        const int64_t nw = pn.cols;
        const int nv = pn.vectors, last = pn.last;
        float* const bpn = whole ? bp + n0 / NR * kc * NR : bp;
        for (int64_t p = 0; p < mc; p += V::MR) {
          const int mr = static_cast<int>(mc - p < V::MR ? mc - p : V::MR);
          bool pack_a_now = n0 == 0, pack_b_now = p == 0 && !whole;
          const T* asrc = a + k0 * lda + m0 + p;
          const T* bsrc = b + k0 * ldb + n0;
          if (mr < V::MR) {
            // A partial panel cannot pack on the fly; it only occurs as the last panel.
            if (pack_a_now) pack_a<V>(ap + p * kc, asrc, lda, kc, mr);
            if (pack_b_now) pack_b<V>(bpn, bsrc, ldb, kc, nw);
            pack_a_now = pack_b_now = false;
          }
          BlockOperands<T> op{ap + p * kc, asrc, lda, bpn, bsrc, ldb};
          dispatch_nv<V, V::NV>(nv, mr, pack_a_now, pack_b_now, false, op, kc,
                                c + (m0 + p) * ldc + n0, ldc, last, load_c);
        }
      }
    }
  }
}

// Whether at [M, K] (rows ldat apart) holds a -0. Vector code: it runs before every product
// whose A must read -0 as +0.
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic"))) inline bool
has_negative_zero(const float* at, int64_t ldat, int64_t M, int64_t K) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = at + m * ldat;
    unsigned found = 0;
    for (int64_t k = 0; k < K; ++k) {
      unsigned u;
      __builtin_memcpy(&u, row + k, 4);
      found |= u == 0x80000000u;
    }
    if (found) return true;
  }
  return false;
}

// C[0:M, 0:N] (+)= A^T B with A given transposed: A(k, m) = at[m * ldat + k] + a_zero, the
// layout of a [M, K] tile whose transpose the Tensor engine would feed as the stationary operand
// (plan.hpp "transposed matmuls"). No A panel is packed: the kernel broadcasts A's values from
// at's rows, MR rows at a time. Each C(m, n) gets the same fma chain as matmul_blocked.
// Adding a_zero changes a value only where a_zero is +0 and the value -0: -0 + -0 is -0, and a
// signaling NaN it would quiet comes out of the fma quieted anyway (x86 picks the NaN by operand
// position, whichever kind). So A is read as it lies, unless a_zero is +0 and A holds a -0: then
// from a copy (in `scratch`, at_scratch_floats) with its -0 made +0. (Adding a_zero to each
// broadcast value cost the product 16%: attention's p @ v, [128, 128] x [128, 64], 19 -> 16 us.)
template <class V>
void matmul_at_blocked(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                       int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate, float a_zero,
                       float* scratch) {
  constexpr int64_t NR = V::W * V::NV;
  if (K <= 0) return empty_sum(c, ldc, M, N, accumulate);
  float* bp = scratch + packed_a_floats<V>();
  if (!__builtin_signbit(a_zero) && has_negative_zero(at, ldat, M, K)) {
    float* copy = bp + whole_b_floats<V>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) copy[m * K + k] = at[m * ldat + k] + a_zero;
    at = copy;
    ldat = K;
  }
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = K - k0 < kKC ? K - k0 : kKC;
    const bool load_c = accumulate || k0 > 0;
    // Each column panel of B is packed by the first row panel of A that uses it.
    for (int64_t n0 = 0; n0 < N; n0 += NR) {
      const Panel<V> pn(n0, N);
      const int64_t nw = pn.cols;
      const int nv = pn.vectors, last = pn.last;
      const float* bsrc = b + k0 * ldb + n0;
      for (int64_t p = 0; p < M; p += V::MR) {
        const int mr = static_cast<int>(M - p < V::MR ? M - p : V::MR);
        bool pack_b_now = p == 0;
        if (pack_b_now && mr < V::MR) {
          pack_b<V>(bp, bsrc, ldb, kc, nw);  // a partial panel cannot pack on the fly
          pack_b_now = false;
        }
        BlockOperands<float> op{nullptr, at + p * ldat + k0, ldat, bp, bsrc, ldb};
        dispatch_nv<V, V::NV>(nv, mr, false, pack_b_now, true, op, kc, c + p * ldc + n0, ldc, last,
                              load_c);
      }
    }
  }
}

// Scratch floats matmul_blocked and matmul_at_blocked need.
template <class V>
constexpr size_t blocked_scratch_floats() {
  return static_cast<size_t>(packed_a_floats<V>() + whole_b_floats<V>());
}
// matmul_at_blocked's: room for a copy of A where -0 must read as +0.
template <class V>
size_t at_scratch_floats(int64_t M, int64_t K, float a_zero) {
  const int64_t copy = __builtin_signbit(a_zero) || K <= 0 ? 0 : M * K;
  return blocked_scratch_floats<V>() + static_cast<size_t>(copy);
}

}  // namespace
