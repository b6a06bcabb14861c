// Measures the error of the builtins' float32 transcendentals (runtime/builtins_math.hpp, as
// called by builtins::activate and builtins::alu) against double-precision libm rounded once:
// for every float input (or every S-th bit pattern with --stride S), the error in ulps of the
// correctly rounded result, |ours - ref| / ulp(float(ref)), and how many results differ from
// float(ref). NaN must give NaN, an infinite reference the same infinity.
//
//   neuron-ulp [--stride S] [--threads T] [func ...]     (default: all functions, stride 1)
//
// Results are in docs/numerics.md ("Transcendentals").
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "neuron/base/builtins.hpp"

namespace {

using neuron::ActFunc;
namespace b = neuron::builtins;

struct Func {
  const char* name;
  std::function<float(float)> ours;
  std::function<double(double)> ref;
};

double sig(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

double silu_dx(double x) {
  return sig(x) + x * sig(x) * sig(-x);
}

// f with its values at -inf and +inf given (where the formula would give inf * 0).
std::function<double(double)> limits(double at_neg_inf, double at_pos_inf,
                                     std::function<double(double)> f) {
  return [=](double x) { return x == -INFINITY ? at_neg_inf : x == INFINITY ? at_pos_inf : f(x); };
}

std::vector<Func> functions() {
  auto act = [](ActFunc f) { return [f](float x) { return b::activate(f, x); }; };
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return {
      {"exp", act(ActFunc::exp), [](double x) { return std::exp(x); }},
      {"log", act(ActFunc::log), [](double x) { return std::log(x); }},
      {"tanh", act(ActFunc::tanh), [](double x) { return std::tanh(x); }},
      {"sigmoid", act(ActFunc::sigmoid), sig},
      {"silu", act(ActFunc::silu), [](double x) { return x * sig(x); }},
      {"gelu", act(ActFunc::gelu),
       [](double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }},
      {"gelu_apprx_tanh", act(ActFunc::gelu_apprx_tanh),
       [k](double x) { return x * sig(2.0 * k * (x + 0.044715 * x * x * x)); }},
      {"softplus", act(ActFunc::softplus),
       [](double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }},
      {"erf", act(ActFunc::erf), [](double x) { return std::erf(x); }},
      {"sin", act(ActFunc::sin), [](double x) { return std::sin(x); }},
      {"cos", act(ActFunc::cos), [](double x) { return std::cos(x); }},
      {"rsqrt", act(ActFunc::rsqrt), [](double x) { return 1.0 / std::sqrt(x); }},
      {"rsqrt_alu", [](float x) { return b::alu(neuron::AluOp::rsqrt, x, 0.0f); },
       [](double x) { return 1.0 / std::sqrt(x); }},
      {"reciprocal", act(ActFunc::reciprocal), [](double x) { return 1.0 / x; }},
      {"sqrt", act(ActFunc::sqrt), [](double x) { return std::sqrt(x); }},
      {"tan", act(ActFunc::tan), [](double x) { return std::tan(x); }},
      {"arctan", act(ActFunc::arctan), [](double x) { return std::atan(x); }},
      {"floor", act(ActFunc::floor), [](double x) { return std::floor(x); }},
      {"ceil", act(ActFunc::ceil), [](double x) { return std::ceil(x); }},
      {"trunc", act(ActFunc::trunc), [](double x) { return std::trunc(x); }},
      // The derivatives and gated forms at +-inf are their limits (builtins_math.hpp).
      {"gelu_dx", act(ActFunc::gelu_dx),
       limits(0, 1, [](double x) {
         return 0.5 * std::erfc(-x * 0.70710678118654752440) +
                x * std::exp(-0.5 * x * x) * 0.39894228040143267794;
       })},
      {"gelu_apprx_sigmoid", act(ActFunc::gelu_apprx_sigmoid),
       limits(0, INFINITY, [](double x) { return x * sig(1.702 * x); })},
      {"gelu_apprx_sigmoid_dx", act(ActFunc::gelu_apprx_sigmoid_dx),
       limits(0, 1, [](double x) { return silu_dx(1.702 * x); })},
      {"silu_dx", act(ActFunc::silu_dx), limits(0, 1, silu_dx)},
      {"mish", act(ActFunc::mish),
       limits(0, INFINITY, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); })},
      {"erf_dx", act(ActFunc::erf_dx),
       [](double x) { return 1.1283791670955126 * std::exp(-x * x); }},
  };
}

// The ulp of float(r): spacing of floats at |r|'s binade (2^-149 for subnormals).
double ulp_of(double r) {
  const double a = std::fabs(r);
  if (a < 0x1p-126) return 0x1p-149;
  int e;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 24);
}

struct Result {
  double max_ulp = 0;
  uint32_t worst = 0;
  uint64_t tested = 0, not_rounded = 0, special_wrong = 0;
  uint32_t first_special = 0;
};

void merge(Result& a, const Result& b) {
  if (b.max_ulp > a.max_ulp) a.max_ulp = b.max_ulp, a.worst = b.worst;
  if (b.special_wrong && !a.special_wrong) a.first_special = b.first_special;
  a.tested += b.tested;
  a.not_rounded += b.not_rounded;
  a.special_wrong += b.special_wrong;
}

Result measure(const Func& f, uint64_t begin, uint64_t end, uint64_t stride) {
  Result r;
  for (uint64_t u = begin; u < end; u += stride) {
    float x;
    const uint32_t bits = static_cast<uint32_t>(u);
    std::memcpy(&x, &bits, 4);
    const float got = f.ours(x);
    const double want = f.ref(static_cast<double>(x));
    const float want_f = static_cast<float>(want);
    ++r.tested;
    if (std::isnan(want) || std::isinf(want_f)) {
      const bool ok = std::isnan(want) ? std::isnan(got) : got == want_f;
      if (!ok && !r.special_wrong++) r.first_special = bits;
      continue;
    }
    if (std::isnan(got) || std::isinf(got)) {
      if (!r.special_wrong++) r.first_special = bits;
      continue;
    }
    if (got != want_f) ++r.not_rounded;
    const double e = std::fabs(static_cast<double>(got) - want) / ulp_of(want_f);
    if (e > r.max_ulp) r.max_ulp = e, r.worst = bits;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t stride = 1;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--stride") && i + 1 < argc)
      stride = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::max(1, std::atoi(argv[++i]));
    else if (argv[i][0] == '-') {
      fmt::print(stderr, "usage: {} [--stride S] [--threads T] [func ...]\n", argv[0]);
      return 2;
    } else
      only.push_back(argv[i]);
  }
  fmt::print("{:<16} {:>12} {:>10} {:>14} {:>16} {:>8}\n", "function", "inputs", "max ulp",
             "worst input", "not rounded", "special");
  for (const Func& f : functions()) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    const uint64_t total = uint64_t(1) << 32;
    std::vector<Result> parts(threads);
    std::vector<std::thread> pool;
    // Interleaved blocks, so every thread sees every range of magnitudes.
    const uint64_t block = stride * 4096;
    std::atomic<uint64_t> next{0};
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (uint64_t b0; (b0 = next.fetch_add(block)) < total;)
          merge(parts[t], measure(f, b0, std::min(total, b0 + block), stride));
      });
    for (auto& th : pool) th.join();
    Result all;
    for (auto& p : parts) merge(all, p);
    float w;
    std::memcpy(&w, &all.worst, 4);
    fmt::print("{:<16} {:>12} {:>10.3f} {:>14.8g} {:>15.4f}% {:>8}\n", f.name, all.tested,
               all.max_ulp, w, 100.0 * double(all.not_rounded) / double(all.tested),
               all.special_wrong);
    if (all.special_wrong) {
      float s;
      std::memcpy(&s, &all.first_special, 4);
      fmt::print("  first wrong special case: x = {} ({:#010x})\n", s, all.first_special);
    }
    std::fflush(stdout);
  }
  return 0;
}
