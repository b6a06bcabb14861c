// Private to the matmul kernel: the per-ISA implementations behind neuron_matmul_* and a test hook.
#pragma once
#include <cstddef>
#include <cstdint>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace neuron::native {

// A 64-byte aligned buffer of at least `floats` floats, one per thread (packed operand panels).
float* matmul_scratch(size_t floats);
// How many times this thread has called matmul_scratch: a variant that keeps a packed operand
// in the scratch between calls knows from it that no other call has overwritten it.
uint64_t matmul_scratch_uses();

// The B operand a variant packed last on this thread and the scratch use that holds it. A call
// promised that its B holds the same values as the call before (neuron_matmul_*_same_b:
// consecutive nc_matmuls over one moving tile) reuses that packing when it has the same pointer,
// stride and shape and no other matmul call used the scratch since. One per variant and dtype.
struct PackedB {
  const void* b = nullptr;
  int64_t ldb = 0, N = 0, K = 0;
  const void* scratch = nullptr;
  uint64_t use = 0;
  // Called right after the call's matmul_scratch: whether its B is packed there already; then
  // records this call as the latest (`keeps`: it leaves its whole B packed in `scratch`).
  bool take(bool same_b, bool keeps, const void* b_, int64_t ldb_, int64_t N_, int64_t K_,
            const void* scratch_) {
    const uint64_t now = matmul_scratch_uses();
    const bool hit = same_b && keeps && b == b_ && ldb == ldb_ && N == N_ && K == K_ &&
                     scratch == scratch_ && use + 1 == now;
    *this = keeps ? PackedB{b_, ldb_, N_, K_, scratch_, now} : PackedB{};
    return hit;
  }
};

// One implementation of the header's contract (runtime/native/matmul_kernel.hpp), same numerics.
using MatmulF32Fn = void (*)(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                             int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate);
using MatmulBf16Fn = void (*)(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                              const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                              bool accumulate);

void matmul_f32_portable(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t,
                         int64_t, int64_t, bool);
// The transposed-A form (neuron_matmul_f32_at): A(k, m) = at[m * ldat + k] + a_zero.
using MatmulF32AtFn = void (*)(float* c, int64_t ldc, const float* at, int64_t ldat,
                               const float* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                               bool accumulate, float a_zero);
void matmul_f32_at_portable(float*, int64_t, const float*, int64_t, const float*, int64_t,
                            int64_t, int64_t, int64_t, bool, float);
void matmul_f32_at_avx2(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t,
                        int64_t, int64_t, bool, float);
void matmul_f32_at_avx512(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t,
                          int64_t, int64_t, bool, float);
void matmul_bf16_portable(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                          int64_t, int64_t, int64_t, bool);
// The bf16 transposed-A form (neuron_matmul_bf16_at): A(k, m) = at[m * ldat + k]; same
// arguments as MatmulBf16Fn with at, ldat in place of a, lda. AMX reads its left tiles straight
// from at's rows; the other variants transpose A back and run their own product.
void matmul_bf16_at_portable(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                             int64_t, int64_t, int64_t, bool);
void matmul_bf16_at_amx(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                        int64_t, int64_t, int64_t, bool);
void matmul_f32_avx2(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t,
                     int64_t, int64_t, bool);
void matmul_bf16_avx2(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t,
                      int64_t, int64_t, bool);
void matmul_f32_avx512(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t,
                       int64_t, int64_t, bool);
// The _same_b form for a B that holds the previous call's values (neuron_matmul_f32_same_b).
void matmul_f32_avx512_same_b(float*, int64_t, const float*, int64_t, const float*, int64_t,
                              int64_t, int64_t, int64_t, bool);
void matmul_bf16_avx512(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                        int64_t, int64_t, int64_t, bool);
// bf16 with M <= kBf16SkinnyRows (a decode step's one row) on AVX-512 FMA, B read where it lies
// (matmul_avx512.cpp): what the AMX and AVX-512 variants run for such calls.
constexpr int64_t kBf16SkinnyRows = 2;
void matmul_bf16_skinny_avx512(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                               int64_t, int64_t, int64_t, bool);

// bf16 through AVX512-BF16's VDPBF16PS (matmul_avx512bf16.cpp); the _same_b form for a B that
// holds the previous call's values (neuron_matmul_bf16_same_b).
void matmul_bf16_avx512bf16(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                            int64_t, int64_t, int64_t, bool);
void matmul_bf16_avx512bf16_same_b(float*, int64_t, const uint16_t*, int64_t, const uint16_t*,
                                   int64_t, int64_t, int64_t, int64_t, bool);

// bf16 through AMX tiles (matmul_amx.cpp), its _same_b form, and whether this CPU has AMX and
// the OS granted it.
void matmul_bf16_amx(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t,
                     int64_t, int64_t, bool);
void matmul_bf16_amx_same_b(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                            int64_t, int64_t, int64_t, bool);
bool amx_usable();

// The 32-bit transpose of neuron_transpose32 (matmul_kernel.hpp): portable and AVX2.
using Transpose32Fn = void (*)(char* d, int64_t drs, const char* s, int64_t srs, int64_t P,
                               int64_t F);
void transpose32_portable(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F);
void transpose32_avx2(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F);

#if defined(__x86_64__)
// MXCSR with flush-to-zero (bit 15) and denormals-are-zero (bit 6) for one scope: the bf16
// rule's flushes on fp32 SIMD (matmul_bf16_pairs.hpp, matmul_avx512bf16.cpp).
struct FlushDenormals {
  unsigned saved = _mm_getcsr();
  FlushDenormals() { _mm_setcsr(saved | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved); }
};
#endif

}  // namespace neuron::native

extern "C" {
// Runs the named variant ("amx", "avx512bf16", "avx512", "avx2" or
// "portable") regardless of the host's default.
// Returns 1 when it ran, 0 when this CPU cannot run that variant (or the name is unknown).
int neuron_matmul_f32_variant(const char* isa, float* c, int64_t ldc, const float* a, int64_t lda,
                              const float* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                              int accumulate);
int neuron_matmul_bf16_variant(const char* isa, float* c, int64_t ldc, const uint16_t* a,
                               int64_t lda, const uint16_t* b, int64_t ldb, int64_t M, int64_t N,
                               int64_t K, int accumulate);
int neuron_matmul_bf16_at_variant(const char* isa, float* c, int64_t ldc, const uint16_t* at,
                                  int64_t ldat, const uint16_t* b, int64_t ldb, int64_t M,
                                  int64_t N, int64_t K, int accumulate);
int neuron_matmul_f32_at_variant(const char* isa, float* c, int64_t ldc, const float* at,
                                 int64_t ldat, const float* b, int64_t ldb, int64_t M, int64_t N,
                                 int64_t K, int accumulate, int canonical_zero);
}
