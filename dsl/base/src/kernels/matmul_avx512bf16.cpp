// The AVX512-BF16 nc_matmul variant for bf16 (fp32 uses the AVX-512 one): VDPBF16PS, two bf16
// products per fp32 lane, on CPUs without AMX (AMD Zen 4, Intel Cooper Lake).
//
// VDPBF16PS does, in each lane, acc = fma(a[1], b[1], acc) then acc = fma(a[0], b[0], acc)
// (the pair's second element first), each rounded and flushed, inputs read with
// denormals-as-zero: two steps of one chain of neuron/base/bf16_dot.hpp's rule. Measured on a
// Zen 4 against the rule's fma_flush over 10^8 random lanes spanning every exponent, subnormals
// and overflow included: identical except for which NaN comes out when NaNs meet (IEEE 754 leaves
// that open; docs/numerics.md). So the rule's two chains map onto two sets of accumulators: a
// pair holds rows (k + 2, k) of one chain, k first, and a 32-row block is 8 pairs per chain. At
// the block's end C = (C or 0) + (even + odd) in fp32 under MXCSR's flush-to-zero and
// denormals-are-zero, as in the pairs kernel (matmul_bf16_pairs.hpp).
//
// Operands are repacked per call into those pairs: B for a chunk of columns, A for a chunk of
// rows, the whole K of both. Rows past K are +0.0 in A and -0.0 in B (products -0.0 change no
// partial sum); columns past N are computed on zeros and never stored.
#include <cstddef>
#include <cstdint>

#include "matmul_variants.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")

namespace neuron::native {
namespace {

constexpr int64_t kBlockRows = 32;  // bf16dot::kBlock
constexpr int64_t kSteps = 8;       // pairs per chain per block
constexpr int64_t kChunkM = 128;    // rows of C per packed chunk
constexpr int64_t kChunkN = 512;    // columns of C per packed chunk
constexpr int MR = 6;               // rows of C per micro-tile
constexpr int NV = 2;               // 16-column vectors of C per micro-tile
constexpr int64_t NR = 16 * NV;

constexpr uint16_t kPlusZero = 0x0000, kMinusZero = 0x8000;

// dst[n] = (first[n] in the high half, second[n] in the low half) for n < cols, 0 up to padded.
// A null row (past K) reads as `missing` in every column.
void pack_pair(uint32_t* dst, const uint16_t* first, const uint16_t* second, int64_t cols,
               int64_t padded, uint16_t missing) {
  const __m512i miss = _mm512_set1_epi32(missing);
  int64_t n = 0;
  for (; n + 16 <= cols; n += 16) {
    const __m512i hi =
        first
            ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + n)))
            : miss;
    const __m512i lo = second ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                    reinterpret_cast<const __m256i*>(second + n)))
                              : miss;
    _mm512_storeu_si512(dst + n, _mm512_or_si512(_mm512_slli_epi32(hi, 16), lo));
  }
  for (; n < cols; ++n)
    dst[n] =
        static_cast<uint32_t>(first ? first[n] : missing) << 16 | (second ? second[n] : missing);
  for (; n < padded; ++n) dst[n] = 0;
}

// Packs `cols` columns of K rows (row k at src + k * ld) as [block][chain][step][padded]: chain 0
// holds rows 4s, 4s + 2 of the block, chain 1 rows 4s + 1, 4s + 3.
void pack_operand(uint32_t* dst, const uint16_t* src, int64_t ld, int64_t K, int64_t cols,
                  int64_t padded, uint16_t missing) {
  for (int64_t k0 = 0; k0 < K; k0 += kBlockRows)
    for (int chain = 0; chain < 2; ++chain)
      for (int64_t s = 0; s < kSteps; ++s, dst += padded) {
        const int64_t k = k0 + 4 * s + chain;
        pack_pair(dst, k < K ? src + k * ld : nullptr, k + 2 < K ? src + (k + 2) * ld : nullptr,
                  cols, padded, missing);
      }
}

// C[0:mr, 0:NV*16] of one micro-tile over all `blocks` of K; `last` valid columns in the last
// vector. ap/bp: the packed operands at this tile, astride/bstride between steps.
template <int R, int V>
__attribute__((noinline)) void tile_kernel(const uint32_t* ap, int64_t astride, const uint32_t* bp,
                                           int64_t bstride, int64_t blocks, float* c, int64_t ldc,
                                           int last, bool accumulate) {
  for (int64_t blk = 0; blk < blocks; ++blk) {
    __m512 even[R][V], odd[R][V];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) even[i][v] = odd[i][v] = _mm512_setzero_ps();
    for (int64_t s = 0; s < kSteps; ++s) {
      const uint32_t* be = bp + s * bstride;
      const uint32_t* bo = be + kSteps * bstride;
      const uint32_t* ae = ap + s * astride;
      const uint32_t* ao = ae + kSteps * astride;
      __m512bh bev[V], bov[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        bev[v] = (__m512bh)_mm512_loadu_si512(be + 16 * v);
        bov[v] = (__m512bh)_mm512_loadu_si512(bo + 16 * v);
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(ae[i]));
        const __m512bh y = (__m512bh)_mm512_set1_epi32(static_cast<int>(ao[i]));
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          even[i][v] = _mm512_dpbf16_ps(even[i][v], x, bev[v]);
          odd[i][v] = _mm512_dpbf16_ps(odd[i][v], y, bov[v]);
        }
      }
    }
    const bool load_c = accumulate || blk > 0;
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const int n = v == V - 1 ? last : 16;
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
        float* out = c + i * ldc + 16 * v;
        const __m512 sum = _mm512_add_ps(even[i][v], odd[i][v]);
        const __m512 old = load_c ? _mm512_maskz_loadu_ps(m, out) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(out, m, _mm512_add_ps(old, sum));
      }
    ap += 2 * kSteps * astride;
    bp += 2 * kSteps * bstride;
  }
}

template <int R, int V>
void tile_dispatch(int mr, int nv, const uint32_t* ap, int64_t astride, const uint32_t* bp,
                   int64_t bstride, int64_t blocks, float* c, int64_t ldc, int last,
                   bool accumulate) {
  if constexpr (V > 1)
    if (nv < V)
      return tile_dispatch<R, V - 1>(mr, nv, ap, astride, bp, bstride, blocks, c, ldc, last,
                                     accumulate);
  if constexpr (R > 1)
    if (mr < R)
      return tile_dispatch<R - 1, V>(mr, nv, ap, astride, bp, bstride, blocks, c, ldc, last,
                                     accumulate);
  tile_kernel<R, V>(ap, astride, bp, bstride, blocks, c, ldc, last, accumulate);
}

}  // namespace

void matmul_bf16_avx512bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                            const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                            bool accumulate) {
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) c[m * ldc + n] = 0.0f;
    return;
  }
  FlushDenormals flush;
  const int64_t blocks = (K + kBlockRows - 1) / kBlockRows;
  const int64_t steps = blocks * 2 * kSteps;  // packed rows of each operand
  const int64_t npad_max = (kChunkN + NR - 1) / NR * NR;
  uint32_t* scratch = reinterpret_cast<uint32_t*>(
      matmul_scratch(static_cast<size_t>(steps * (npad_max + kChunkM))));
  for (int64_t n0 = 0; n0 < N; n0 += kChunkN) {
    const int64_t nc = N - n0 < kChunkN ? N - n0 : kChunkN;
    const int64_t npad = (nc + NR - 1) / NR * NR;
    uint32_t* bp = scratch;
    pack_operand(bp, b + n0, ldb, K, nc, npad, kMinusZero);
    for (int64_t m0 = 0; m0 < M; m0 += kChunkM) {
      const int64_t mc = M - m0 < kChunkM ? M - m0 : kChunkM;
      uint32_t* ap = scratch + steps * npad;
      pack_operand(ap, a + m0, lda, K, mc, mc, kPlusZero);
      for (int64_t mb = 0; mb < mc; mb += MR) {
        const int mr = static_cast<int>(mc - mb < MR ? mc - mb : MR);
        for (int64_t nb = 0; nb < nc; nb += NR) {
          const int64_t cols = nc - nb < NR ? nc - nb : NR;
          const int nv = static_cast<int>((cols + 15) / 16);
          const int last = static_cast<int>(cols - (nv - 1) * 16);
          tile_dispatch<MR, NV>(mr, nv, ap + mb, mc, bp + nb, npad, blocks,
                                c + (m0 + mb) * ldc + n0 + nb, ldc, last, accumulate);
        }
      }
    }
  }
}

}  // namespace neuron::native

#pragma GCC pop_options
#pragma GCC diagnostic pop

#else  // not x86-64: the variant is never selected (see supports()); keep the symbol defined.

namespace neuron::native {
void matmul_bf16_avx512bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                            const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                            bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
}  // namespace neuron::native

#endif
