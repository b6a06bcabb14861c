// The AMX nc_matmul variant for bf16 (fp32 uses the AVX-512 one): TDPBF16PS on 16 x 16 tiles of
// C, 2 x 2 of them at a time. TDPBF16PS computes neuron/base/bf16_dot.hpp's rule exactly (the
// rule was read off it), with one 32-row block of K per instruction.
//
// Operands are repacked per call: A (K x M, rows of K) is transposed into AMX's left tiles
// (16 rows of M x 32 bf16 of K) and B (K x N) into its right tiles, pairs of K rows interleaved
// (16 pairs x 16 columns x 2); A given transposed (at [M, K]) is read in place where its blocks
// are whole. Consecutive nc_matmuls over one moving tile (a row group's subtiles,
// neuron_matmul_bf16_same_b) pack B once, as the avx512bf16 variant does. Rows past K are +0.0
// in A and -0.0 in B (products -0.0 change nothing); rows and columns past M and N are computed
// on zeros and never stored.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "matmul_variants.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16")

namespace neuron::native {
namespace {

constexpr int64_t kTile = 16;                   // rows of a tile; columns of a C tile
constexpr int64_t kTileK = 32;                  // bf16 of K per tile row
constexpr int64_t kChunkM = 128;                // C rows per packed chunk
constexpr int64_t kChunkN = 512;                // C columns per packed chunk
constexpr int64_t kChunkK = 128;                // K rows per packed chunk
constexpr int64_t kTileElems = kTile * kTileK;  // bf16 per packed A or B tile (1 KiB)

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// All eight tiles 16 rows of 64 bytes: C tiles 0-3, A tiles 4-5, B tiles 6-7.
void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = kTile;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// The 16 x 16 dword transpose of r[0..15], in place.
inline void transpose16x16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  // b[4i + q] holds, in 128-bit lane L, rows 4i..4i+3 of column 4L + q.
  for (int q = 0; q < 4; ++q) {
    const __m512i x = _mm512_shuffle_i32x4(b[q], b[4 + q], 0x88);
    const __m512i y = _mm512_shuffle_i32x4(b[q], b[4 + q], 0xDD);
    const __m512i x2 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0x88);
    const __m512i y2 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0xDD);
    r[q] = _mm512_shuffle_i32x4(x, x2, 0x88);
    r[8 + q] = _mm512_shuffle_i32x4(x, x2, 0xDD);
    r[4 + q] = _mm512_shuffle_i32x4(y, y2, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(y, y2, 0xDD);
  }
}

// 16 dwords: column n holds (row0[n], row1[n]) as a bf16 pair; `n` valid columns, the rest 0.
// A missing row1 (past K) reads as +0.0 (A's padding; B's is -0.0, pack_b).
inline __m512i pair_rows(const uint16_t* row0, const uint16_t* row1, int64_t n) {
  const __mmask16 m =
      n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row0));
  const __m512i hi =
      row1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row1)) : _mm512_setzero_si512();
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// B rows [k0, k0 + kc) x columns [n0, n0 + nc) into right tiles: tile (kb, nb) at
// bp + (kb * nbs + nb) * kTileElems, row j = pairs (k0 + 32 kb + 2j, +1) of 16 columns. Two
// tiles (32 columns) at a time: one 16-bit two-source permute interleaves 16 columns of two rows.
void pack_b(uint16_t* bp, const uint16_t* b, int64_t ldb, int64_t kc, int64_t nc, int64_t nbs) {
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int i = 0; i < 16; ++i) {
    lo_idx[2 * i] = static_cast<uint16_t>(i);
    lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi_idx[2 * i] = static_cast<uint16_t>(16 + i);
    hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const __m512i minus_zero = _mm512_set1_epi16(static_cast<short>(0x8000));  // -0.0: no effect
  for (int64_t kb = 0; kb * kTileK < kc; ++kb)
    for (int64_t nb = 0; nb < nbs; nb += 2) {
      uint16_t* t0 = bp + (kb * nbs + nb) * kTileElems;
      uint16_t* t1 = t0 + kTileElems;
      const int64_t n = nc - nb * kTile;
      const __mmask32 m = n >= 32  ? ~__mmask32{0}
                          : n <= 0 ? __mmask32{0}
                                   : static_cast<__mmask32>((1u << n) - 1u);
      for (int64_t j = 0; j < kTile; ++j) {
        const int64_t k = kb * kTileK + 2 * j;
        const __m512i r0 =
            k < kc ? _mm512_maskz_loadu_epi16(m, b + k * ldb + nb * kTile) : minus_zero;
        const __m512i r1 =
            k + 1 < kc ? _mm512_maskz_loadu_epi16(m, b + (k + 1) * ldb + nb * kTile) : minus_zero;
        _mm512_storeu_si512(t0 + j * kTileK, _mm512_permutex2var_epi16(r0, lo, r1));
        _mm512_storeu_si512(t1 + j * kTileK, _mm512_permutex2var_epi16(r0, hi, r1));
      }
    }
}

// A rows [k0, k0 + kc) x columns [m0, m0 + mc) into left tiles: tile (mb, kb) at
// ap + (mb * kbs + kb) * kTileElems, row i = A(k0 + 32 kb + k, m0 + 16 mb + i) for k < 32.
void pack_a(uint16_t* ap, const uint16_t* a, int64_t lda, int64_t kc, int64_t mc, int64_t mbs,
            int64_t kbs) {
  for (int64_t mb = 0; mb < mbs; ++mb)
    for (int64_t kb = 0; kb < kbs; ++kb) {
      const int64_t m = mc - mb * kTile;
      __m512i r[16];
      for (int64_t j = 0; j < kTile; ++j) {
        const int64_t k = kb * kTileK + 2 * j;
        r[j] = k >= kc || m <= 0
                   ? _mm512_setzero_si512()
                   : pair_rows(a + k * lda + mb * kTile,
                               k + 1 < kc ? a + (k + 1) * lda + mb * kTile : nullptr, m);
      }
      transpose16x16(r);  // r[i] = row i of M: 16 pairs of K
      uint16_t* tile = ap + (mb * kbs + kb) * kTileElems;
      for (int64_t i = 0; i < kTile; ++i) _mm512_storeu_si512(tile + i * kTileK, r[i]);
    }
}

// The same tiles from A given transposed (neuron_matmul_bf16_at): A(k, m) = at[m * ldat + k], so
// a left tile's row i is 32 bf16 of at's row m0 + 16 mb + i as they lie: copied, not transposed.
// Past K and M the tiles hold +0.0, as pack_a leaves them.
void pack_a_transposed(uint16_t* ap, const uint16_t* at, int64_t ldat, int64_t kc, int64_t mc,
                       int64_t mbs, int64_t kbs) {
  for (int64_t mb = 0; mb < mbs; ++mb)
    for (int64_t kb = 0; kb < kbs; ++kb) {
      const int64_t k = kc - kb * kTileK;
      const __mmask32 km = k >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << k) - 1u);
      uint16_t* tile = ap + (mb * kbs + kb) * kTileElems;
      for (int64_t i = 0; i < kTile; ++i) {
        const int64_t m = mb * kTile + i;
        const __m512i r = m < mc ? _mm512_maskz_loadu_epi16(km, at + m * ldat + kb * kTileK)
                                 : _mm512_setzero_si512();
        _mm512_storeu_si512(tile + i * kTileK, r);
      }
    }
}

// C rows [0, 32) x columns [0, 32) of the chunk (+)= A tiles (mb, mb + 1) x B tiles (nb, nb + 1)
// over kbs K tiles. Full blocks use C in place; edge blocks go through a zero-padded copy. A's
// tiles are a_step bf16 apart along K, their rows a_stride bytes apart (packed: one 1 KiB tile
// after another, rows of 64 bytes).
void block_2x2(float* c, int64_t ldc, int64_t rows, int64_t cols, bool load_c, const uint16_t* a0,
               const uint16_t* a1, const uint16_t* b0, const uint16_t* b1, int64_t kbs, int64_t nbs,
               int64_t a_step = kTileElems, int64_t a_stride = 64) {
  alignas(64) float edge[32 * 32];
  const bool full = rows == 32 && cols == 32;
  float* t = c;
  int64_t stride = ldc * 4;
  if (!full) {
    std::memset(edge, 0, sizeof edge);
    if (load_c)
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(edge + i * 32, c + i * ldc, static_cast<size_t>(cols) * 4);
    t = edge;
    stride = 32 * 4;
  }
  const int64_t row16 = 16 * (stride / 4);
  if (load_c || !full) {
    _tile_loadd(0, t, stride);
    _tile_loadd(1, t + 16, stride);
    _tile_loadd(2, t + row16, stride);
    _tile_loadd(3, t + row16 + 16, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t kb = 0; kb < kbs; ++kb) {
    _tile_loadd(4, a0 + kb * a_step, a_stride);
    _tile_loadd(5, a1 + kb * a_step, a_stride);
    _tile_loadd(6, b0 + kb * nbs * kTileElems, 64);
    _tile_loadd(7, b1 + kb * nbs * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, t, stride);
  _tile_stored(1, t + 16, stride);
  _tile_stored(2, t + row16, stride);
  _tile_stored(3, t + row16 + 16, stride);
  if (!full)
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(c + i * ldc, edge + i * 32, static_cast<size_t>(cols) * 4);
}

thread_local PackedB packed_b;  // kept when B is one chunk: K <= kChunkK, N <= kChunkN

// `a_transposed`: A is given as at [M, K] (pack_a_transposed), else as [K, M].
void run(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
         int64_t M, int64_t N, int64_t K, bool accumulate, bool same_b, bool a_transposed = false) {
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::memset(c + m * ldc, 0, static_cast<size_t>(N) * 4);
    return;
  }
  if (M <= kBf16SkinnyRows && !a_transposed) {
    // One or two rows of C: tiles of 16 rows would compute 14 or 15 on zeros, and packing B
    // writes and reads again every element of it for one or two products each. [1, 4096] x
    // [4096, 4096] bf16 through neuron.ops.linear, 2 threads: 1.52 -> 0.87-0.90 ms (Intel Xeon).
    packed_b = PackedB{};  // B is not packed here: a later call must not take an older packing
    return matmul_bf16_skinny_avx512(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
  }
  // Packed tiles: A chunk (128 / 16) x (128 / 32) tiles, B chunk (128 / 32) x (512 / 16).
  constexpr size_t kPackedA = (kChunkM / kTile) * (kChunkK / kTileK) * kTileElems;
  constexpr size_t kPackedB = (kChunkK / kTileK) * (kChunkN / kTile) * kTileElems;
  uint16_t* ap = reinterpret_cast<uint16_t*>(matmul_scratch((kPackedA + kPackedB) / 2));
  uint16_t* bp = ap + kPackedA;
  const bool reuse = packed_b.take(same_b, K <= kChunkK && N <= kChunkN, b, ldb, N, K, ap);
  configure_tiles();
  for (int64_t k0 = 0; k0 < K; k0 += kChunkK) {
    const int64_t kc = K - k0 < kChunkK ? K - k0 : kChunkK;
    const int64_t kbs = (kc + kTileK - 1) / kTileK;
    const bool load_c = accumulate || k0 > 0;
    for (int64_t n0 = 0; n0 < N; n0 += kChunkN) {
      const int64_t nc = N - n0 < kChunkN ? N - n0 : kChunkN;
      const int64_t nbs = (nc + 31) / 32 * 2;  // whole pairs of 16-column tiles
      if (!reuse) pack_b(bp, b + k0 * ldb + n0, ldb, kc, nc, nbs);
      for (int64_t m0 = 0; m0 < M; m0 += kChunkM) {
        const int64_t mc = M - m0 < kChunkM ? M - m0 : kChunkM;
        const int64_t mbs = (mc + 31) / 32 * 2;
        // A given transposed in whole blocks (32 rows of M, 32 columns of K) is not copied: the
        // left tiles load straight from at's rows, which hold them as they lie (flash
        // attention's p @ v, bf16: forward -5 to -6%, Intel Xeon).
        const bool direct = a_transposed && mc % 32 == 0 && kc % kTileK == 0;
        if (a_transposed && !direct)
          pack_a_transposed(ap, a + m0 * lda + k0, lda, kc, mc, mbs, kbs);
        else if (!a_transposed)
          pack_a(ap, a + k0 * lda + m0, lda, kc, mc, mbs, kbs);
        for (int64_t mb = 0; mb < mbs; mb += 2)
          for (int64_t nb = 0; nb < nbs; nb += 2) {
            const int64_t rows = mc - mb * kTile < 32 ? mc - mb * kTile : 32;
            const int64_t cols = nc - nb * kTile < 32 ? nc - nb * kTile : 32;
            float* cb = c + (m0 + mb * kTile) * ldc + n0 + nb * kTile;
            if (direct) {
              const uint16_t* a0 = a + (m0 + mb * kTile) * lda + k0;
              block_2x2(cb, ldc, rows, cols, load_c, a0, a0 + kTile * lda, bp + nb * kTileElems,
                        bp + (nb + 1) * kTileElems, kbs, nbs, kTileK, lda * 2);
            } else {
              block_2x2(cb, ldc, rows, cols, load_c, ap + mb * kbs * kTileElems,
                        ap + (mb + 1) * kbs * kTileElems, bp + nb * kTileElems,
                        bp + (nb + 1) * kTileElems, kbs, nbs);
            }
          }
      }
    }
  }
  _tile_release();
}

}  // namespace

bool amx_usable() {
  static const bool usable = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
      return false;
    unsigned eax, ebx, ecx, edx;
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
    const bool amx = (edx >> 22 & 1) && (edx >> 24 & 1);  // AMX-BF16, AMX-TILE
    if (!amx) return false;
    // Linux hands out the tile data state on request only (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return usable;
}

void matmul_bf16_amx(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                     int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  run(c, ldc, a, lda, b, ldb, M, N, K, accumulate, false);
}

void matmul_bf16_amx_same_b(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                            const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                            bool accumulate) {
  run(c, ldc, a, lda, b, ldb, M, N, K, accumulate, true);
}

void matmul_bf16_at_amx(float* c, int64_t ldc, const uint16_t* at, int64_t ldat, const uint16_t* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  run(c, ldc, at, ldat, b, ldb, M, N, K, accumulate, false, true);
}

}  // namespace neuron::native

#pragma GCC pop_options
#pragma GCC diagnostic pop

#else  // not x86-64: the variant is never selected (amx_usable() is false).

namespace neuron::native {
bool amx_usable() {
  return false;
}
void matmul_bf16_amx(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                     int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void matmul_bf16_amx_same_b(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                            const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                            bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void matmul_bf16_at_amx(float* c, int64_t ldc, const uint16_t* at, int64_t ldat, const uint16_t* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_bf16_at_portable(c, ldc, at, ldat, b, ldb, M, N, K, accumulate);
}
}  // namespace neuron::native

#endif
