// The NeuronCore timing model: per-instruction costs, engines and DMA engines that run
// instructions when their byte-range dependences allow, and the Profile they fill. The simulator
// drives it; profile.hpp presents what it records. docs/profiling.md describes the model.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/base/target.hpp"

namespace neuron {

// Static cost of one instruction on `t`, independent of other instructions (timing_cost.cpp).
struct InstrCost {
  int engine_unit = -1;  // 0 TensorE, 1 VectorE, 2 ScalarE, 3 GpSimdE; -1 DMA or untimed
  bool dma = false;
  // Engines: the occupancy (initiation interval) and the latency after it until the results are
  // visible, in cycles and in ns at the engine's clock.
  double cycles = 0, latency_cycles = 0;
  double ns = 0, latency_ns = 0;
  // TensorE: the stationary operand is src 0; a matmul whose stationary changes needs it loaded
  // this long before the stream starts (hidden behind the previous matmul when it is ready early).
  double stationary_ns = 0;
  bool accumulates = false;  // a matmul that adds into PSUM: back-to-back ones pipeline
  // ScalarE: the activation table it needs (-1: none); a change costs Target::act_table_load_ns.
  int act_table = -1;
  bool psum_access = false;  // reads or writes PSUM (NC-v2: VectorE and ScalarE share the port)
  bool sbuf_access = true;   // reads or writes SBUF (NC-v2: VectorE and GpSimd share the port)
  // DMA: the transfer is split over `dma_engines` engines, each moving `engine_ns` worth of
  // packets (descriptors x descriptor cost + bytes / rate); `ns` is that plus the fixed latency.
  int dma_engines = 0;
  double engine_ns = 0;
  int64_t descriptors = 0;
  bool strided = false;
  int64_t bytes = 0;  // DMA: bytes moved; engines: bytes read + written
  bool hbm = false;   // DMA touching HBM
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
  int64_t bytes = 0;  // on chip: bytes per partition actually touched (hi - lo when 0)
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
