// Private to the matmul kernel: bf16 nc_matmul on fp32 SIMD (the AVX-512 and AVX2 variants when
// the CPU has no AMX), computing the bits of neuron/base/bf16_dot.hpp's rule.
//
// Included by a variant's source after `#pragma GCC target(...)` (like matmul_blocked.hpp), so
// everything here is in an anonymous namespace. The traits P provide: reg, W (fp32 lanes), MR
// (rows of C per block), NV (vectors per row), zero(), load(p), fma(a, b, c), add(a, b),
// bcast2(p) (the pair p[0], p[1] in every even/odd lane pair), pack_pairs(dst, r0, r1) (W / 2
// columns of two bf16 rows, widened and interleaved: dst[2n] = r0[n], dst[2n + 1] = r1[n]) and
// finish(c, acc, cols, load_c) (adds each lane pair, then c[0:cols] = (c or 0) + those sums).
//
// How it gets the rule's bits: even and odd rows of a 32-row block are summed in adjacent lanes
// (lane 2n holds the even partial sum of column n, lane 2n + 1 the odd one), both starting at
// 0, one fma per row; `finish` adds the pair and then adds that to C. MXCSR's flush-to-zero and
// denormals-are-zero make every fma and add flush exactly as the rule says (x86 detects
// tininess after rounding, as the rule does), so they are switched on for the call.
#pragma once

namespace {

constexpr int64_t kPairBlock = 16;  // pairs of rows per block (32 rows: bf16dot::kBlock)
constexpr int64_t kPairMC = 128;    // rows of C per packed chunk
constexpr int64_t kPairNC = 512;    // columns of C per packed chunk

inline float widen1(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// dst[2n], dst[2n + 1] = rows r0, r1 at column n for n < cols. A missing second row (k >= K)
// reads as `missing`: +0.0 for A and -0.0 for B, so its product is -0.0, which changes no partial
// sum (the rule: rows past K contribute nothing).
template <class P>
void pack_rows(float* dst, const uint16_t* r0, const uint16_t* r1, int64_t cols, int64_t padded,
               float missing) {
  constexpr int64_t H = P::W / 2;
  int64_t n = 0;
  if (r1)
    for (; n + H <= cols; n += H) P::pack_pairs(dst + 2 * n, r0 + n, r1 + n);
  for (; n < cols; ++n) {
    dst[2 * n] = widen1(r0[n]);
    dst[2 * n + 1] = r1 ? widen1(r1[n]) : missing;
  }
  for (; n < padded; ++n) dst[2 * n] = dst[2 * n + 1] = 0.0f;  // columns past the edge: unused
}

// C[0:MR, 0:NV*W/2] (+)= one block of `pairs` row pairs; only `last` columns of the last vector.
template <class P, int MR, int NV>
__attribute__((noinline)) void pairs_kernel(const float* ap, int64_t astride, const float* bp,
                                            int64_t bstride, int64_t pairs, float* c, int64_t ldc,
                                            int last, bool load_c) {
  using R = typename P::reg;
  constexpr int H = P::W / 2;
  R acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = P::zero();
  for (int64_t j = 0; j < pairs; ++j) {
    R bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = P::load(bp + j * bstride + v * P::W);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const R av = P::bcast2(ap + j * astride + 2 * i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = P::fma(av, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      P::finish(c + i * ldc + v * H, acc[i][v], v == NV - 1 ? last : H, load_c);
}

template <class P, int MR, int NV>
void pairs_dispatch(int mr, int nv, const float* ap, int64_t astride, const float* bp,
                    int64_t bstride, int64_t pairs, float* c, int64_t ldc, int last, bool load_c) {
  if (nv < NV) {
    if constexpr (NV > 1)
      pairs_dispatch<P, MR, NV - 1>(mr, nv, ap, astride, bp, bstride, pairs, c, ldc, last, load_c);
    return;
  }
  if (mr < MR) {
    if constexpr (MR > 1)
      pairs_dispatch<P, MR - 1, NV>(mr, nv, ap, astride, bp, bstride, pairs, c, ldc, last, load_c);
    return;
  }
  pairs_kernel<P, MR, NV>(ap, astride, bp, bstride, pairs, c, ldc, last, load_c);
}

template <class P>
constexpr size_t pairs_scratch_floats() {
  return static_cast<size_t>(kPairBlock * 2 * (kPairMC + kPairNC + P::W * P::NV));
}

template <class P>
void matmul_bf16_pairs(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                       int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate,
                       float* scratch) {
  constexpr int64_t H = P::W / 2, NR = H * P::NV;
  neuron::native::FlushDenormals flush;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) c[m * ldc + n] = 0.0f;
    return;
  }
  for (int64_t n0 = 0; n0 < N; n0 += kPairNC) {
    const int64_t nc = N - n0 < kPairNC ? N - n0 : kPairNC;
    const int64_t npad = (nc + NR - 1) / NR * NR;
    for (int64_t m0 = 0; m0 < M; m0 += kPairMC) {
      const int64_t mc = M - m0 < kPairMC ? M - m0 : kPairMC;
      for (int64_t k0 = 0; k0 < K; k0 += 2 * kPairBlock) {
        const int64_t pairs = (K - k0 + 1) / 2 < kPairBlock ? (K - k0 + 1) / 2 : kPairBlock;
        float* bp = scratch;                     // [pairs][npad][2]
        float* ap = scratch + pairs * npad * 2;  // [pairs][mc][2]
        for (int64_t j = 0; j < pairs; ++j) {
          const int64_t k = k0 + 2 * j;
          const bool both = k + 1 < K;
          pack_rows<P>(bp + j * npad * 2, b + k * ldb + n0, both ? b + (k + 1) * ldb + n0 : nullptr,
                       nc, npad, -0.0f);
          pack_rows<P>(ap + j * mc * 2, a + k * lda + m0, both ? a + (k + 1) * lda + m0 : nullptr,
                       mc, mc, 0.0f);
        }
        // The first block of an overwrite starts from 0; every later one adds to C.
        const bool load_c = accumulate || k0 > 0;
        for (int64_t mb = 0; mb < mc; mb += P::MR) {
          const int mr = static_cast<int>(mc - mb < P::MR ? mc - mb : P::MR);
          for (int64_t nb = 0; nb < nc; nb += NR) {
            const int64_t cols = nc - nb < NR ? nc - nb : NR;
            const int nv = static_cast<int>((cols + H - 1) / H);
            const int last = static_cast<int>(cols - (nv - 1) * H);
            pairs_dispatch<P, P::MR, P::NV>(mr, nv, ap + mb * 2, mc * 2, bp + nb * 2, npad * 2,
                                            pairs, c + (m0 + mb) * ldc + n0 + nb, ldc, last,
                                            load_c);
          }
        }
      }
    }
  }
}

}  // namespace
