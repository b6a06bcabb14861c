// Random valid kernels for differential fuzzing: Kernel IR built directly from a seed.
//
// The generated kernel is valid by construction (shapes, memories and dtypes follow the
// verifier's rules); a kernel the compiler still rejects is counted as "rejected" by the driver,
// not as a failure. Every tile is fully written by its first instruction before anything reads
// it, so an executor's initial SBUF/PSUM contents never matter and the NumPy reference
// (tests/fuzz/reference.py) can give every alloc fresh storage.
//
// Shape of a kernel: inputs a, b ([G*L*P, F] in HBM), output out ([G*L*P, F]) and acc
// ([G*P, F]); an optional SPMD grid of G programs (rows offset by pid0); one loop over L
// (affine_range, or sequential_range when a tile carried across iterations is updated); inside
// it a random sequence of every ISA instruction over [P, F] tiles and their windows.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "neuron/ir/ir.hpp"

namespace neuron::fuzz {

struct GenOptions {
  int max_instrs = 14;  // random instructions per loop body (besides loads and stores)
};

struct Generated {
  Kernel kernel;
  std::vector<int64_t> grid;
  int instructions = 0;  // instructions in the kernel body (before legalize)
};

class KernelGen {
 public:
  explicit KernelGen(uint64_t seed, GenOptions opts = {}) : rng_(seed), opts_(opts) {}
  Generated generate();

 private:
  struct Tile {
    BufferPtr buf;
  };

  int64_t pick(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  const T& one_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(pick(0, static_cast<int64_t>(v.size()) - 1))];
  }
  double rand_imm();
  DType rand_dtype(bool allow_int = true);
  BufferPtr new_tile(Memory m, std::vector<int64_t> shape, DType dt);
  Access whole(const BufferPtr& b) const;
  Access window(const BufferPtr& b, int64_t p, int64_t f0, int64_t fn) const;
  const Tile& any_tile() { return one_of(tiles_); }
  void emit(Opcode c, std::vector<Arg> args);
  void add_tile_by_full_write();
  void random_instr();
  void nl_helper(Access dst, Access x, Access y);
  void elementwise_windows(Access& dst, std::vector<Access*> srcs);

  std::mt19937_64 rng_;
  GenOptions opts_;
  int64_t P_ = 0, F_ = 0;
  int names_ = 0;
  int instrs_ = 0;
  std::vector<Tile> tiles_;            // initialised sbuf tiles of shape [P, F]
  std::vector<StmtPtr>* body_ = nullptr;  // where emit() appends
  BufferPtr a_, b_;                    // inputs
  Affine row_;                         // first row of this iteration's [P, F] block
};

}  // namespace neuron::fuzz

#include "kernel_gen_impl.hpp"
