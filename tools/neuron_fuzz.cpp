// neuron-fuzz: writes random kernels (tests/fuzz/kernel_gen.hpp), compiled and executed, as case
// folders that the NumPy reference (tests/fuzz/reference.py) checks; docs/reliability.md.
//
//   neuron-fuzz --seed S --count N --out DIR [--max-instrs K] [--native]
//   neuron-fuzz --replay FILE.ir --seed S --grid G --out DIR [--native]
//
// Each case folder holds kernel.ir (the generated kernel), compiled.ir (after legalize and
// allocate: what the reference executes), meta.txt, the inputs in_<name>.bin and each
// executor's outputs <executor>.<name>.bin (raw little-endian element bytes). A kernel the
// compiler rejects gets rejected.txt; an executor that raises while running gets
// <executor>.error.txt (the UserError's rule, or "exception", on the first line, then the
// message): an index read at run time may be out of bounds, and the reference then expects
// that error from every executor. Adding an executor is one entry in `executors()`.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/fuzz/kernel_gen.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/runtime/native/native.hpp"
#include "neuron/runtime/run.hpp"

namespace fs = std::filesystem;
using namespace neuron;

namespace {

struct Executor {
  std::string name;
  std::function<std::vector<Tensor>(const Compiled&, const std::vector<Tensor>&,
                                    const std::vector<int64_t>&)>
      run;
};

std::vector<Executor> executors(bool native) {
  std::vector<Executor> v;
  v.push_back({"sim", [](const Compiled& c, const std::vector<Tensor>& in,
                         const std::vector<int64_t>& g) { return simulate(c, in, g); }});
  if (native)
    v.push_back({"native", [](const Compiled& c, const std::vector<Tensor>& in,
                              const std::vector<int64_t>& g) {
                   NativeOptions o;
                   o.threads = 1;
                   return run_native(c, in, g, o);
                 }});
  return v;
}

// Mostly small exact values, sometimes arbitrary floats and the special values.
Tensor random_input(const Buffer& b, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> vals(static_cast<size_t>(b.elements()));
  const bool is_f = dtype_is_float(b.dtype);
  static const float special[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(), 1e30f, -3e-39f, 65504.f,
                                  240.f, 1e-6f};
  for (auto& v : vals) {
    const double r = u(rng);
    if (is_f && r < 0.02)
      v = special[static_cast<size_t>(u(rng) * 10) % 10];
    else if (is_f && r < 0.2)
      v = static_cast<float>((u(rng) - 0.5) * 20);
    else if (is_f)
      v = static_cast<float>(std::floor((u(rng) - 0.5) * 32)) / 4.0f;
    else
      v = static_cast<float>(std::floor(u(rng) * 40) - (dtype_is_signed(b.dtype) ? 20 : 0));
  }
  return Tensor::from_floats(vals, b.shape, b.dtype);
}

void write_file(const fs::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
void write_text(const fs::path& p, const std::string& s) { write_file(p, s.data(), s.size()); }

std::string decl(const Buffer& b) {
  return fmt::format("{} {} {}", b.name, dtype_name(b.dtype), fmt::join(b.shape, "x"));
}

struct Totals {
  int kernels = 0, rejected = 0, errors = 0;
  int64_t instructions = 0;
};

// Compiles and runs one kernel, writing its case folder.
void run_case(const Kernel& k, const std::vector<int64_t>& grid, uint64_t seed, int instrs,
              const fs::path& dir, bool native, Totals& tot) {
  fs::create_directories(dir);
  write_text(dir / "kernel.ir", print(k));
  ++tot.kernels;
  tot.instructions += instrs;
  std::string meta = fmt::format("seed {}\ngrid {}\ninstructions {}\n", seed,
                                 fmt::join(grid, " "), instrs);
  for (auto& b : k.inputs) meta += "input " + decl(*b) + "\n";
  for (auto& b : k.outputs) meta += "output " + decl(*b) + "\n";
  Compiled c;
  try {
    c = compile(k);
  } catch (const UserError& e) {
    ++tot.rejected;
    write_text(dir / "rejected.txt", fmt::format("{}\n{}\n", e.rule(), e.what()));
    write_text(dir / "meta.txt", meta);
    return;
  }
  write_text(dir / "compiled.ir", print(c.kernel));
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::vector<Tensor> inputs;
  for (auto& b : k.inputs) {
    inputs.push_back(random_input(*b, rng));
    write_file(dir / fmt::format("in_{}.bin", b->name), inputs.back().data(),
               inputs.back().bytes());
  }
  for (auto& ex : executors(native)) {
    meta += "executor " + ex.name + "\n";
    try {
      std::vector<Tensor> outs = ex.run(c, inputs, grid);
      for (size_t i = 0; i < outs.size(); ++i)
        write_file(dir / fmt::format("{}.{}.bin", ex.name, k.outputs[i]->name), outs[i].data(),
                   outs[i].bytes());
    } catch (const UserError& e) {
      ++tot.errors;
      write_text(dir / fmt::format("{}.error.txt", ex.name), fmt::format("{}\n{}\n", e.rule(), e.what()));
    } catch (const std::exception& e) {
      ++tot.errors;
      write_text(dir / fmt::format("{}.error.txt", ex.name), fmt::format("exception\n{}\n", e.what()));
    }
  }
  write_text(dir / "meta.txt", meta);
}

int usage() {
  std::cerr << "usage: neuron-fuzz --seed S --count N --out DIR [--max-instrs K] [--native]\n"
               "       neuron-fuzz --replay FILE.ir --seed S --grid G --out DIR [--native]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int count = 1;
  std::string out, replay;
  std::vector<int64_t> grid = {1};
  bool native = false;
  fuzz::GenOptions gopts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seed") seed = std::stoull(next());
    else if (a == "--count") count = std::stoi(next());
    else if (a == "--out") out = next();
    else if (a == "--replay") replay = next();
    else if (a == "--grid") grid = {std::stoll(next())};
    else if (a == "--max-instrs") gopts.max_instrs = std::stoi(next());
    else if (a == "--native") native = true;
    else return usage();
  }
  if (out.empty()) return usage();
  Totals tot;
  try {
    if (!replay.empty()) {
      std::ifstream f(replay);
      std::stringstream ss;
      ss << f.rdbuf();
      Kernel k = parse_kernel(ss.str(), replay);
      run_case(k, grid, seed, 0, out, native, tot);
    } else {
      for (int n = 0; n < count; ++n) {
        const uint64_t s = seed + static_cast<uint64_t>(n);
        fuzz::Generated g = fuzz::KernelGen(s, gopts).generate();
        run_case(g.kernel, g.grid, s, g.instructions, fs::path(out) / fmt::format("case_{}", s),
                 native, tot);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "neuron-fuzz: " << e.what() << "\n";
    return 1;
  }
  fmt::print("neuron-fuzz: {} kernels, {} instructions, {} rejected by the compiler, {} run errors\n",
             tot.kernels, tot.instructions, tot.rejected, tot.errors);
  return 0;
}
