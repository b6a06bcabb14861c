// The NeuronCore timing model: per-instruction cost and in-order engines/DMA queues that wait on
// byte-range dependences. The simulator drives it; profile.hpp presents what it records.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/base/target.hpp"

namespace neuron {

// Static cost of one instruction on `t`, independent of other instructions.
struct InstrCost {
  int engine_unit = -1;    // 0 TensorE, 1 VectorE, 2 ScalarE, 3 GpSimdE; -1 DMA or untimed
  bool dma = false;
  double cycles = 0;       // engines: total cycles including the fixed overhead
  double dependent_cycles = 0;  // VectorE: cycles when fed by its own previous instruction
  double ns = 0;           // engines: cycles / clock; DMA: latency + bytes / queue bandwidth
  int64_t bytes = 0;       // DMA: bytes moved; engines: bytes read + written
  double effective_bytes = 0;  // DMA: bytes / efficiency (strided accesses cost double)
  bool hbm = false;        // DMA touching HBM (shares the core's HBM bandwidth)
  double flops = 0;
};
InstrCost instr_cost(const Instr& in, const Target& t);

// The bytes an operand touches in one dynamic execution. On chip: partitions [p_lo, p_hi) and
// bytes [lo, hi) of each. HBM: elements [lo, hi) of one tensor, refined to a box of `rows` rows
// `row_stride` apart, columns [col_lo, col_hi) of each, when row_stride > 0.
struct Footprint {
  int space = 0;  // 0 SBUF, 1 PSUM, 2 + t HBM tensor t
  int64_t p_lo = 0, p_hi = 1;
  int64_t lo = 0, hi = 0;
  int64_t row_stride = 0, rows = 0, col_lo = 0, col_hi = 0;
};
bool overlaps(const Footprint& a, const Footprint& b);
bool covers(const Footprint& outer, const Footprint& inner);

// Feeds dynamic instructions in program order and fills a Profile.
class TimingModel {
 public:
  TimingModel(const Target& t, const Program& prog, Profile& out);
  ~TimingModel();
  TimingModel(const TimingModel&) = delete;
  TimingModel& operator=(const TimingModel&) = delete;

  // Registers a static instruction; returns its index for issue().
  int add_instr(const Instr& in);
  // HBM tensors the program never writes need no read tracking.
  void set_hbm_written(std::vector<bool> written);
  // One dynamic execution: what it reads and writes.
  void issue(int instr, const std::vector<Footprint>& reads, const std::vector<Footprint>& writes,
             int64_t program);
  // Flushes live ranges and totals; call once after the last issue().
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace neuron
