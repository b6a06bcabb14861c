// AVX-512 forms of two shared definitions that the compilers cannot vectorize well from their
// scalar text: exp (builtins_math.hpp) and the fp32 -> bf16 rounding (builtins.hpp). Each
// function here computes, lane for lane, the very bits of its scalar definition; the scalar
// text stays the definition, and tests/exec/test_builtins_avx512.cpp checks the equality (a
// stride through all 2^32 inputs plus every boundary; the whole 2^32 with
// NEURON_TEST_EXHAUSTIVE=1).
//
// Why they exist: in the activation `exp` into bf16 with a row sum (flash attention's p, a
// softmax), the vectorized scalar text took 35 vector operations per 16 values: exp's scale()
// builds two powers of two from integers (7 operations) where `vscalefps` computes p * 2^k
// with the same single rounding in one, and the bf16 rounding with its NaN select takes 10
// where `vcvtne2ps2bf16` takes one per 32 values (it flushes subnormal inputs and keeps NaN
// payloads, so vectors holding either take the scalar rule instead). LLVM 14 has no generic
// form of either instruction. Measured: 0.47 -> 0.26 ns per value (docs/performance.md).
//
// Only instr_kernels.cpp includes this, x86-64 only. Each function carries its ISA in a target
// attribute and is called only where the CPU has it: the library's copy asks the CPU
// (__builtin_cpu_supports), the JIT sets neuron_k_host_avx512 / neuron_k_host_avx512bf16 from
// the host's features and removes the bodies a host cannot run (lower_program.cpp).
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "neuron/base/builtins.hpp"

// GCC 12 reports the intentionally undefined pass-through operand inside its own intrinsic
// headers (_mm512_undefined_*) as (maybe-)uninitialized after inlining; it is not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define NEURON_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define NEURON_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx512bf16")))

namespace neuron::builtins::avx512 {

// math::exp on 16 lanes: the same clamps, reduction and polynomial, operation for operation;
// scale(p, n) is vscalefps(p, k) (k = n as a float: p * 2^k rounded once, to a subnormal, a
// normal or inf, as scale's second product), zero-masked below -104 as exp's select (no
// underflow computed there). NaN: min/max with x second return x, so it flows through every
// step and vscalefps returns p's quieted NaN, as the scalar product does.
[[gnu::always_inline]] NEURON_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f);
  __m512 c = _mm512_min_ps(_mm512_set1_ps(89.0f), x);  // x > 89 ? 89 : x
  c = _mm512_max_ps(lo, c);                            // c < -104 ? -104 : c
  const __m512 magic = _mm512_set1_ps(math::kRoundMagic);
  const __m512 t = _mm512_fmadd_ps(c, _mm512_set1_ps(math::kLog2e), magic);
  const __m512 k = _mm512_sub_ps(t, magic);
  const __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-math::kLn2Lo),
                                   _mm512_fmadd_ps(k, _mm512_set1_ps(-math::kLn2Hi), c));
  // math::exp_poly
  __m512 q = _mm512_set1_ps(1.0f / 5040.0f);
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 720.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 120.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 24.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 6.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.5f));
  const __m512 p = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(r, r), q, r));
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // !(x < -104): NaN kept
  return _mm512_maskz_scalef_ps(keep, p, k);
}

// The activation's value(): exp(x * scale + bias) of 16 values at s, the product and the sum
// rounded apart.
[[gnu::always_inline]] NEURON_AVX512 inline __m512 exp_affine16(const float* s, __m512 scale,
                                                                __m512 bias) {
  return exp16(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(s), scale), bias));
}

// f32_to_bf16 of 16 lanes, the scalar rule's integer steps: for the groups vcvtne2ps2bf16
// would get wrong (store_bf16x32).
[[gnu::always_inline]] NEURON_AVX512 inline __m256i bf16_rule16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i quiet = _mm512_or_si512(
      _mm512_and_si512(u, _mm512_set1_epi32(int32_t(0x80000000u))), _mm512_set1_epi32(0x7fc00000));
  u = _mm512_mask_mov_epi32(u, nan, quiet);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
}

// f32_to_bf16 of 32 values (a: the first 16, c: the next) into d. vcvtne2ps2bf16 rounds to
// nearest even as the rule does, but reads subnormal inputs as 0 and keeps a NaN's payload,
// so a pair holding either (one vfpclassps each: QNaN, SNaN, denormal) takes bf16_rule16.
[[gnu::always_inline]] NEURON_AVX512BF16 inline void store_bf16x32(uint16_t* d, __m512 a,
                                                                   __m512 c) {
  constexpr int kNanOrSubnormal = 0x01 | 0x80 | 0x20;
  const __mmask16 special =
      _mm512_fpclass_ps_mask(a, kNanOrSubnormal) | _mm512_fpclass_ps_mask(c, kNanOrSubnormal);
  if (__builtin_expect(special != 0, 0)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), bf16_rule16(a));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 16), bf16_rule16(c));
    return;
  }
  _mm512_storeu_si512(d, (__m512i)_mm512_cvtne2ps_pbh(c, a));
}

}  // namespace neuron::builtins::avx512

#pragma GCC diagnostic pop
#endif
