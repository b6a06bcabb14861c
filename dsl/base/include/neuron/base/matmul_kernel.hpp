// Fast nc_matmul for the native backend: C[M, N] (+)= A[K, M]^T @ B[K, N] with fp32 accumulation.
#pragma once
#include <cstdint>

// Operand layout is the tile layout: row k of A and B is partition k, so A(k, m) is at
// a[k * lda + m], B(k, n) at b[k * ldb + n], C(m, n) at c[m * ldc + n] (leading dimensions in
// elements). K <= 128, M <= 128, N <= 512 in one instruction, but any sizes must work.
//
// Numerics (must match the simulator's, instr_kernels.cpp, exactly). fp32: for every (m, n), acc
// starts at C(m, n) when accumulate != 0, else 0, then acc = fma(A(k, m), B(k, n), acc) for
// k = 0, 1, ..., K-1 in increasing order; C(m, n) = acc. bf16: the rule of
// neuron/base/bf16_dot.hpp (blocks of 32 rows, even and odd rows in separate partial sums,
// denormals flushed), which is what AMX computes. Every variant is bit identical to the
// simulator.
extern "C" {
void neuron_matmul_f32(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                       int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
void neuron_matmul_bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
// neuron_matmul_f32's product through the portable variant's loop (row by row of K, vector code
// over the columns) without choosing a variant: for a product of a few rows of K, where the
// blocked kernels' dispatch, panels and register tiles cost more than the arithmetic.
void neuron_matmul_f32_rows(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                            int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
// The same products, the caller promising that b holds the values b held at this thread's
// previous call of the same dtype, same b, ldb, N and K, and nothing has written them since
// (consecutive nc_matmuls over one moving tile): a variant that repacks B (amx, avx512bf16;
// avx512's fp32) keeps its packed copy, unless another matmul call on this thread used its
// scratch in between.
void neuron_matmul_bf16_same_b(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                               const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                               int accumulate);
void neuron_matmul_f32_same_b(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                              int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
// The same fp32 product with A given transposed, A(k, m) = at[m * ldat + k]: what the native
// backend runs for a matmul whose stationary operand is a transpose's evacuated result (no
// transposed copy is made). Each A value is read as at[...] + (canonical_zero ? +0.0f : -0.0f):
// the first reads -0 as +0 and quiets a signaling NaN, as the Scalar engine's identity
// activation does; the second only quiets. Then the fp32 rule above, bit for bit.
void neuron_matmul_f32_at(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                          int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate,
                          int canonical_zero);
// The bf16 product with A given transposed, A(k, m) = at[m * ldat + k], by the bf16 rule above,
// bit for bit. No canonical_zero: the rule's partial sums start at +0, so the sign of a zero in
// A never shows (the Scalar engine's identity activation turning -0 into +0 changes nothing).
void neuron_matmul_bf16_at(float* c, int64_t ldc, const uint16_t* at, int64_t ldat,
                           const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                           int accumulate);
// nc_transpose of 32-bit elements between row-major matrices with contiguous rows: row f of d
// (P elements, rows drs bytes apart) is column f of s (P rows of F elements, srs bytes apart).
// Moves bits only. d and s must not overlap.
void neuron_transpose32(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F);
// The same for 16-bit elements (bf16, fp16 tiles).
void neuron_transpose16(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F);
// Which implementation the host uses: "amx", "avx512bf16", "avx512", "avx2" or "portable".
// (NEURON_MATMUL_ISA chooses one; unset, the fastest the CPU supports.)
const char* neuron_matmul_isa();
// Whether this CPU can run the named variant ("amx", "avx512bf16", "avx512", "avx2", "portable").
int neuron_matmul_variant_supported(const char* isa);
// The variants this CPU runs, fastest first, comma-separated (for messages).
const char* neuron_matmul_supported_variants();
}
