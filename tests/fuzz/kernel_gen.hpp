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
//
// The dynamic half (kernel_gen_dynamic.hpp), in about half of the kernels: an int32 input ix
// ([G*L*P, F]) whose block is loaded each iteration into a private tile; index tiles computed
// from it (values reduced mod the range they index, so in range by construction); registers
// loaded from them and used as dynamic offsets and loop bounds; dynamic_range and while_nonzero
// loops; indirect DMA rows (loads from a or b, stores into an extra output sc [G, R, F]); and
// nc_n_gather / local_gather. In a few kernels one index is pushed out of range on purpose: the
// run must then fail with the same out-of-bounds error on every executor (the reference says
// where), or, with oob_mode=1, skip the row.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "neuron/ir/ir.hpp"

namespace neuron::fuzz {

struct GenOptions {
  int max_instrs = 14;   // random instructions per loop body (besides loads and stores)
  double dynamic = 0.5;  // share of kernels that use the dynamic half
  double fault = 0.15;   // share of those with one index out of range on purpose
};

struct Generated {
  Kernel kernel;
  std::vector<int64_t> grid;
  int instructions = 0;    // instructions in the kernel body (before legalize)
  bool may_fault = false;  // an index may be out of range on purpose (an error is then right)
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
  void emit_loop(StmtPtr loop) { body_->push_back(std::move(loop)); }
  void add_tile_by_full_write();
  void random_instr();
  void nl_helper(Access dst, Access x, Access y);
  void elementwise_windows(Access& dst, std::vector<Access*> srcs);

  // The dynamic half (kernel_gen_dynamic.hpp).
  struct Offset {  // an index expression usable as an offset, and its largest value
    Affine expr;
    int64_t max = 0;
  };
  void dynamic_instr();
  bool fault_site();
  Access window_at(const BufferPtr& b, int64_t p, Affine f0, int64_t fn) const;
  Access element(const BufferPtr& b, int64_t p, int64_t f) const;
  BufferPtr index_tile(int64_t cols, int64_t n, DType dt, int64_t shift);
  DType index_dtype();
  std::string reg_in(int64_t n, int64_t shift = 0);
  void dyn_offset_load();
  void dyn_offset_window();
  void register_roundtrip();
  void dynamic_range_loop();
  void while_loop();
  void loop_body(const std::vector<Offset>& offsets, std::vector<StmtPtr>& out);
  void indirect_load();
  void indirect_store();
  BufferPtr tile_other_than(const BufferPtr& other);
  void gather();
  void local_gather();

  std::mt19937_64 rng_;
  GenOptions opts_;
  int64_t P_ = 0, F_ = 0;
  int names_ = 0;
  int instrs_ = 0;
  std::vector<Tile> tiles_;            // initialised sbuf tiles of shape [P, F]
  // The destination of the last element-wise instruction: the next one often reads it through
  // the same view, as kernels do (the native backend fuses such chains into one loop).
  Access last_elementwise_;
  bool chained(Access& dst, Access& x, Access& y, bool binary);
  std::vector<StmtPtr>* body_ = nullptr;  // where emit() appends
  BufferPtr a_, b_;                    // inputs
  Affine row_;                         // first row of this iteration's [P, F] block
  int64_t G_ = 1, L_ = 1;              // programs, iterations of the main loop
  // The dynamic half.
  bool dynamic_ = false, fault_left_ = false, may_fault_ = false;
  BufferPtr ix_, xi_, sc_;             // index input, its block this iteration, scatter output
  int64_t R_ = 0;                      // rows of each program's part of sc
  Affine pid_;                         // pid0, or 0 without a grid
  int regs_ = 0, loop_vars_ = 1, depth_ = 0;
  bool sc_in_loop_ = false;            // sc is written inside the main loop
};

}  // namespace neuron::fuzz

#include "kernel_gen_impl.hpp"
#include "kernel_gen_dynamic.hpp"
