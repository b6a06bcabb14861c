// The host-only parts of the instruction kernels (never bitcode): device_print, which formats
// with fmt and writes to the stream of the current run, and the per-thread fault record.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <ostream>
#include <vector>

#include "neuron/base/builtins.hpp"
#include "neuron/base/instr_kernels.hpp"
#include "neuron/base/print.hpp"

namespace neuron::native {

static thread_local std::ostream* t_print = nullptr;

void set_print_stream(std::ostream* os) {
  t_print = os;
}

std::ostream* print_stream() {
  return t_print;
}

static thread_local Fault t_fault;

Fault take_fault() {
  Fault f = t_fault;
  t_fault = Fault{};
  return f;
}

static thread_local std::vector<InstrTicks>* t_profile = nullptr;

void set_profile_table(std::vector<InstrTicks>* table) {
  t_profile = table;
}

}  // namespace neuron::native

extern "C" int64_t neuron_k_prof_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

extern "C" void neuron_k_prof_add(int instr, int64_t start) {
  const int64_t end = neuron_k_prof_now();
  auto* t = neuron::native::t_profile;
  if (!t || instr < 0) return;
  if (static_cast<size_t>(instr) >= t->size()) t->resize(static_cast<size_t>(instr) + 1);
  (*t)[static_cast<size_t>(instr)].ns += end - start;
  (*t)[static_cast<size_t>(instr)].calls += 1;
}

// Keeps the first fault: later ones are usually its consequences.
extern "C" void neuron_k_fault(int kind, int instr, int64_t a, int64_t b, int64_t c, int64_t d) {
  auto& f = neuron::native::t_fault;
  if (f.kind == neuron::native::kFaultNone) f = neuron::native::Fault{kind, instr, a, b, c, d};
}

// `header` is the simulator's first line ("prefix [shape] dtype\n"), made at compile time.
extern "C" void neuron_k_print(const neuron_nview* s, int sdt, const char* header) {
  using namespace neuron;
  const auto& v = *s;
  int64_t n = 1;
  for (int i = 0; i < native::kDims; ++i) n *= v.size[i];
  const int64_t P = v.size[0], F = P ? n / P : 0;
  std::vector<float> x;
  x.reserve(static_cast<size_t>(n));
  for (int64_t i0 = 0; i0 < v.size[0]; ++i0)
    for (int64_t i1 = 0; i1 < v.size[1]; ++i1)
      for (int64_t i2 = 0; i2 < v.size[2]; ++i2)
        for (int64_t i3 = 0; i3 < v.size[3]; ++i3)
          for (int64_t i4 = 0; i4 < v.size[4]; ++i4)
            x.push_back(builtins::load_f32(v.base + i0 * v.stride[0] + i1 * v.stride[1] +
                                               i2 * v.stride[2] + i3 * v.stride[3] +
                                               i4 * v.stride[4],
                                           static_cast<DType>(sdt)));
  std::string out = header;
  for (int64_t p = 0; p < P; ++p)
    out += fmt::format("  [{}]\n", fmt::join(x.begin() + p * F, x.begin() + (p + 1) * F, ", "));
  std::ostream* os = native::print_stream();
  (os ? *os : std::cout) << out;
}
