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
// Operands are repacked per call into those pairs, the whole K of both: B for a chunk of columns
// in panels of one micro-tile's width, A for a chunk of rows. Consecutive nc_matmuls over one
// moving tile (a row group's subtiles) pack B once (neuron_matmul_bf16_same_b). Rows past K are
// +0.0 in A and -0.0 in B (products -0.0 change no partial sum); columns past N are computed on
// zeros and never stored.
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

// The pairs (first[n] in the high half, second[n] in the low half) of 32 columns from n, the
// `valid` ones loaded (the rest 0): columns n..n+15 in out[0], n+16..n+31 in out[1]. A null row
// (past K) reads as `missing` in every column. Two word interleaves (VPERMT2W) of one load from
// each row.
class Interleave {
 public:
  explicit Interleave(uint16_t missing)
      : lo_(_mm512_load_si512(kIndex.lo)),
        hi_(_mm512_load_si512(kIndex.hi)),
        missing_(_mm512_set1_epi16(static_cast<short>(missing))) {}

  void pairs(__m512i out[2], const uint16_t* first, const uint16_t* second, int64_t n,
             __mmask32 valid) const {
    const __m512i f = first ? _mm512_maskz_loadu_epi16(valid, first + n)
                            : _mm512_maskz_mov_epi16(valid, missing_);
    const __m512i s = second ? _mm512_maskz_loadu_epi16(valid, second + n)
                             : _mm512_maskz_mov_epi16(valid, missing_);
    out[0] = _mm512_permutex2var_epi16(s, lo_, f);
    out[1] = _mm512_permutex2var_epi16(s, hi_, f);
  }

 private:
  struct Index {
    uint16_t lo[32], hi[32];
  };
  alignas(64) static constexpr Index kIndex = [] {
    Index t{};
    for (int j = 0; j < 16; ++j) {
      t.lo[2 * j] = static_cast<uint16_t>(j), t.lo[2 * j + 1] = static_cast<uint16_t>(32 + j);
      t.hi[2 * j] = static_cast<uint16_t>(16 + j), t.hi[2 * j + 1] = static_cast<uint16_t>(48 + j);
    }
    return t;
  }();
  __m512i lo_, hi_, missing_;
};

// The first `width` bits set where n >= width, the first n where 0 < n < width.
inline uint64_t lanes(int64_t n, int width) {
  return n >= width ? ~0ull >> (64 - width) : n <= 0 ? 0ull : (1ull << n) - 1;
}

// dst[n] = Interleave's pairs of the rows for n < cols, 0 up to padded, each 32 columns at
// dst + (n / 32) * stride (32: contiguous; B's panel size: one row of each panel).
void pack_pair(uint32_t* dst, int64_t stride, const uint16_t* first, const uint16_t* second,
               int64_t cols, int64_t padded, uint16_t missing) {
  const Interleave il(missing);
  for (int64_t n = 0; n < padded; n += 32, dst += stride) {
    __m512i p[2];
    il.pairs(p, first, second, n, static_cast<__mmask32>(lanes(cols - n, 32)));
    _mm512_mask_storeu_epi32(dst, static_cast<__mmask16>(lanes(padded - n, 16)), p[0]);
    _mm512_mask_storeu_epi32(dst + 16, static_cast<__mmask16>(lanes(padded - n - 16, 16)), p[1]);
  }
}

// Calls emit(r, k, k2) for every packed pair row r in order [block][step][chain]: chain 0 pairs
// rows k = 4s and k2 = 4s + 2 of the block, chain 1 rows 4s + 1 and 4s + 3; -1 for rows past K.
template <typename Emit>
void for_each_pair_row(int64_t K, Emit emit) {
  int64_t r = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kBlockRows)
    for (int64_t s = 0; s < kSteps; ++s)
      for (int chain = 0; chain < 2; ++chain, ++r) {
        const int64_t k = k0 + 4 * s + chain;
        emit(r, k < K ? k : -1, k + 2 < K ? k + 2 : -1);
      }
}

// B's `cols` columns as panels of NR: [panel][pair row][NR], so a micro-tile streams one
// contiguous panel. Each source row is read once, front to back (a panel at a time would read
// every row NR columns at a time, once per panel: B's rows are SBUF partitions, far apart, and
// fall out of L1 between panels).
static_assert(NR == 32, "pack_pair's 32-column step fills one panel row");
void pack_b(uint32_t* dst, const uint16_t* src, int64_t ld, int64_t K, int64_t cols,
            int64_t pair_rows) {
  const int64_t padded = (cols + NR - 1) / NR * NR;
  for_each_pair_row(K, [&](int64_t r, int64_t k, int64_t k2) {
    pack_pair(dst + r * NR, pair_rows * NR, k >= 0 ? src + k * ld : nullptr,
              k2 >= 0 ? src + k2 * ld : nullptr, cols, padded, kMinusZero);
  });
}

// A's `rows` rows of C as [pair row][rows].
void pack_a(uint32_t* dst, const uint16_t* src, int64_t ld, int64_t K, int64_t rows) {
  for_each_pair_row(K, [&](int64_t r, int64_t k, int64_t k2) {
    pack_pair(dst + r * rows, 32, k >= 0 ? src + k * ld : nullptr,
              k2 >= 0 ? src + k2 * ld : nullptr, rows, rows, kPlusZero);
  });
}

// The end of a 32-row block for 16 columns of C (the `m` ones that are C): C = (C or 0) +
// (even + odd), the two chains' partial sums added first, as the rule says. All 16 columns
// take plain loads and stores: masked ones made a Zen 4's tile kernel ~3% slower.
[[gnu::always_inline]] inline void end_block(float* out, __mmask16 m, __m512 even, __m512 odd,
                                             bool load_c) {
  const __m512 sum = _mm512_add_ps(even, odd);
  if (m == 0xffff) {
    const __m512 old = load_c ? _mm512_loadu_ps(out) : _mm512_setzero_ps();
    _mm512_storeu_ps(out, _mm512_add_ps(old, sum));
    return;
  }
  const __m512 old = load_c ? _mm512_maskz_loadu_ps(m, out) : _mm512_setzero_ps();
  _mm512_mask_storeu_ps(out, m, _mm512_add_ps(old, sum));
}

// C[0:R, 0:V*16] of one micro-tile over all `blocks` of K; `last` valid columns in the last
// vector. ap: A's packed pair rows at this tile, astride apart; bp: this tile's B panel.
template <int R, int V>
__attribute__((noinline)) void tile_kernel(const uint32_t* ap, int64_t astride, const uint32_t* bp,
                                           int64_t blocks, float* c, int64_t ldc, int last,
                                           bool accumulate) {
  for (int64_t blk = 0; blk < blocks; ++blk) {
    __m512 even[R][V], odd[R][V];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) even[i][v] = odd[i][v] = _mm512_setzero_ps();
    for (int64_t s = 0; s < kSteps; ++s, ap += 2 * astride, bp += 2 * NR) {
      __m512bh bev[V], bov[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        bev[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
        bov[v] = (__m512bh)_mm512_loadu_si512(bp + NR + 16 * v);
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i]));
        const __m512bh y = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[astride + i]));
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
        end_block(c + i * ldc + 16 * v, static_cast<__mmask16>((1u << n) - 1u), even[i][v],
                  odd[i][v], load_c);
      }
  }
}

// One or two rows of C (M <= kSkinnyRows: a decode step's matmul): B is not packed. Packing
// would write and read again every element of B for one or two products each; instead each
// step interleaves its four rows of B in registers, exactly as pack_pair stores them, and the
// chains are tile_kernel's: the same products in the same order, so the same bits. [1, 4096] x
// 4096 x 4096 through neuron.ops.linear, 2 threads: 1.9-2.3 -> 1.5-1.8 ms; at 3 rows even, at
// 4 slower than packing (1.9 -> 2.1-2.5 ms).
constexpr int kSkinnyRows = 2;

// ap: A packed by pack_a (R rows).
template <int R>
__attribute__((noinline)) void skinny(float* c, int64_t ldc, const uint32_t* ap, const uint16_t* b,
                                      int64_t ldb, int64_t N, int64_t K, bool accumulate) {
  const Interleave il(kMinusZero);
  auto b_row = [&](int64_t k) { return k < K ? b + k * ldb : nullptr; };
  // Blocks of K outside, columns inside: a block's 32 rows of B (SBUF partitions, far apart)
  // are read front to back while they stay in L1, C's few rows stay there too.
  for (int64_t k0 = 0, blk = 0; k0 < K; k0 += kBlockRows, ++blk)
    for (int64_t n = 0; n < N; n += 32) {
      const __mmask32 valid = static_cast<__mmask32>(lanes(N - n, 32));
      const __mmask16 m0 = static_cast<__mmask16>(lanes(N - n, 16));
      const __mmask16 m1 = static_cast<__mmask16>(lanes(N - n - 16, 16));
      // the block's pair rows of A, chain 0 then chain 1 of each step
      const uint32_t* a_step = ap + blk * 2 * kSteps * R;
      __m512 even[R][2], odd[R][2];
      for (int i = 0; i < R; ++i)
        for (int v = 0; v < 2; ++v) even[i][v] = odd[i][v] = _mm512_setzero_ps();
      for (int64_t s = 0; s < kSteps; ++s, a_step += 2 * R) {
        const int64_t k = k0 + 4 * s;  // chain 0 pairs rows k, k + 2; chain 1 k + 1, k + 3
        __m512i bev[2], bov[2];
        il.pairs(bev, b_row(k), b_row(k + 2), n, valid);
        il.pairs(bov, b_row(k + 1), b_row(k + 3), n, valid);
        for (int i = 0; i < R; ++i) {
          const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_step[i]));
          const __m512bh y = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_step[R + i]));
          for (int v = 0; v < 2; ++v) {
            even[i][v] = _mm512_dpbf16_ps(even[i][v], x, (__m512bh)bev[v]);
            odd[i][v] = _mm512_dpbf16_ps(odd[i][v], y, (__m512bh)bov[v]);
          }
        }
      }
      const bool load_c = accumulate || k0 > 0;
      for (int i = 0; i < R; ++i)
        for (int v = 0; v < 2; ++v)
          end_block(c + i * ldc + n + 16 * v, v == 0 ? m0 : m1, even[i][v], odd[i][v], load_c);
    }
}

template <int R, int V>
void tile_dispatch(int mr, int nv, const uint32_t* ap, int64_t astride, const uint32_t* bp,
                   int64_t blocks, float* c, int64_t ldc, int last, bool accumulate) {
  if constexpr (V > 1)
    if (nv < V)
      return tile_dispatch<R, V - 1>(mr, nv, ap, astride, bp, blocks, c, ldc, last, accumulate);
  if constexpr (R > 1)
    if (mr < R)
      return tile_dispatch<R - 1, V>(mr, nv, ap, astride, bp, blocks, c, ldc, last, accumulate);
  tile_kernel<R, V>(ap, astride, bp, blocks, c, ldc, last, accumulate);
}

}  // namespace

namespace {

thread_local PackedB packed_b;  // kept when B is one chunk of at most kChunkN columns

void run(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
         int64_t M, int64_t N, int64_t K, bool accumulate, bool same_b) {
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) c[m * ldc + n] = 0.0f;
    return;
  }
  FlushDenormals flush;
  if (M <= 0) return;
  if (M <= kSkinnyRows) {
    packed_b = PackedB{};  // B is not packed here: a later call must not take an older packing
    const int64_t pair_rows = (K + kBlockRows - 1) / kBlockRows * 2 * kSteps;
    uint32_t* ap = reinterpret_cast<uint32_t*>(matmul_scratch(static_cast<size_t>(pair_rows * M)));
    pack_a(ap, a, lda, K, M);
    if (M == 1) return skinny<1>(c, ldc, ap, b, ldb, N, K, accumulate);
    return skinny<2>(c, ldc, ap, b, ldb, N, K, accumulate);
  }
  const int64_t blocks = (K + kBlockRows - 1) / kBlockRows;
  const int64_t steps = blocks * 2 * kSteps;  // packed rows of each operand
  const int64_t npad_max = (kChunkN + NR - 1) / NR * NR;
  uint32_t* scratch = reinterpret_cast<uint32_t*>(
      matmul_scratch(static_cast<size_t>(steps * (npad_max + kChunkM))));
  const bool reuse = packed_b.take(same_b, N <= kChunkN, b, ldb, N, K, scratch);
  for (int64_t n0 = 0; n0 < N; n0 += kChunkN) {
    const int64_t nc = N - n0 < kChunkN ? N - n0 : kChunkN;
    const int64_t npad = (nc + NR - 1) / NR * NR;
    uint32_t* bp = scratch;
    if (!reuse) pack_b(bp, b + n0, ldb, K, nc, steps);
    for (int64_t m0 = 0; m0 < M; m0 += kChunkM) {
      const int64_t mc = M - m0 < kChunkM ? M - m0 : kChunkM;
      uint32_t* ap = scratch + steps * npad;
      pack_a(ap, a + m0, lda, K, mc);
      // Rows in micro-tiles of MR or MR - 1 (128 = 18 x 6 + 4 x 5): a tile of a few rows has
      // too few independent chains to keep VDPBF16PS busy. Each B panel stays in L1 while
      // every row tile passes over it.
      const int64_t tiles = (mc + MR - 1) / MR, base = mc / tiles, extra = mc % tiles;
      for (int64_t nb = 0; nb < nc; nb += NR) {
        const int64_t cols = nc - nb < NR ? nc - nb : NR;
        const int nv = static_cast<int>((cols + 15) / 16);
        const int last = static_cast<int>(cols - (nv - 1) * 16);
        for (int64_t t = 0, mb = 0; t < tiles; ++t) {
          const int mr = static_cast<int>(base + (t < extra ? 1 : 0));
          tile_dispatch<MR, NV>(mr, nv, ap + mb, mc, bp + nb * steps, blocks,
                                c + (m0 + mb) * ldc + n0 + nb, ldc, last, accumulate);
          mb += mr;
        }
      }
    }
  }
}

}  // namespace

void matmul_bf16_avx512bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                            const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                            bool accumulate) {
  run(c, ldc, a, lda, b, ldb, M, N, K, accumulate, false);
}

void matmul_bf16_avx512bf16_same_b(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                                   const uint16_t* b, int64_t ldb, int64_t M, int64_t N,
                                   int64_t K, bool accumulate) {
  run(c, ldc, a, lda, b, ldb, M, N, K, accumulate, true);
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
void matmul_bf16_avx512bf16_same_b(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                                   const uint16_t* b, int64_t ldb, int64_t M, int64_t N,
                                   int64_t K, bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
}  // namespace neuron::native

#endif
