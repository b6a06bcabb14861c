// Simulator internals shared by sim.cpp (program walk, memories, bounds) and sim_instrs.cpp
// (semantics).
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/runtime/tensor.hpp"

namespace neuron::sim {

// An access pattern resolved for one execution: concrete base address and byte strides.
// Elements are enumerated row-major over `sizes` (dim 0 is the partition dim on chip).
struct View {
  std::byte* base = nullptr;
  uint8_t* flags = nullptr;  // PSUM "written by matmul" bytes parallel to base; null elsewhere
  Memory memory = Memory::sbuf;
  DType dtype = DType::float32;
  int esize = 4;
  std::vector<int64_t> sizes, strides;  // strides in bytes
  int64_t count = 1;

  int64_t partitions() const { return sizes.empty() ? 1 : sizes[0]; }
  int64_t per_partition() const { return partitions() == 0 ? 0 : count / partitions(); }
  // Byte offsets from base of every element, row-major.
  std::vector<int64_t> offsets() const;
};

// sum_d idx_d * coef[d] for every index tuple of `sizes`, row-major.
std::vector<int64_t> row_major_map(const std::vector<int64_t>& sizes,
                                   const std::vector<int64_t>& coef);

struct ExecState {
  std::ostream* print = nullptr;
};

// Runs one instruction whose operands are already resolved and bounds-checked.
void execute(const Instr& in, const View& dst, const std::vector<View>& src, const View* reduce_res,
             ExecState& st);

}  // namespace neuron::sim
