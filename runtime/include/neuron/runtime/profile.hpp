// Profiles of simulated kernels: per-instruction timings and their trace, summary and HTML views.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/base/error.hpp"

namespace neuron {

// Which dependence held an instruction back: true (read after write), anti (write after read)
// or output (write after write).
enum class DepKind { none, raw, war, waw };
std::string_view dep_kind_name(DepKind k);

// One static instruction of the program, copied so a Profile outlives its Program.
struct ProfileInstr {
  int id = 0;  // Instr::id
  std::string opcode;
  Engine engine = Engine::none;
  Span span;
  std::string operands;  // "[128, 512] fp32 psum <- [128, 128] bf16, [128, 512] bf16"
  bool hbm = false;      // a DMA to or from HBM
};

// One dynamic execution of an instruction (loops are walked, so an Instr has many).
struct InstrEvent {
  int instr = 0;        // index into Profile::instrs
  int unit = 0;         // index into Profile::units
  int64_t program = 0;  // flat SPMD program id
  double start_ns = 0, end_ns = 0;
  int64_t bytes = 0;    // bytes moved (DMA) or read + written (engines)
  double flops = 0;     // TensorE: 2 * K * M * N; other engines: elements processed
  // The dependence that delayed the start the longest, if the unit was free before its operands.
  int64_t wait_on = -1;  // index into Profile::events of the producer (or earlier reader)
  DepKind wait_kind = DepKind::none;
  Memory wait_memory = Memory::sbuf;
  double wait_ns = 0;    // time the unit sat idle for this instruction
};

// Bytes per partition holding data from a write until its last read (on-chip only).
struct LiveRange {
  Memory memory = Memory::sbuf;
  double start_ns = 0, end_ns = 0;
  double bytes_per_partition = 0;  // averaged over the 128 partitions
};

struct Profile {
  std::string kernel, target;
  std::vector<std::string> units;  // TensorE, VectorE, ScalarE, GpSimdE, DMA q0 .. DMA q15
  std::vector<ProfileInstr> instrs;
  std::vector<InstrEvent> events;  // in program (walk) order
  std::vector<LiveRange> live;
  double total_ns = 0;
  bool executed = true;  // false: timing only, no data was computed
  int64_t programs = 1;
  // Allocator high-water marks and capacities, bytes per partition.
  int64_t sbuf_alloc_bytes = 0, psum_alloc_bytes = 0, sbuf_capacity = 0, psum_capacity = 0;
  double tensor_peak_flops = 0;  // dense bf16 peak of the target
  double hbm_gbps = 0;           // the core's share of HBM bandwidth
  int first_dma_unit = 4;
};

// Figures derived from a profile; the summary, the trace and the HTML report all use them.
struct ProfileStats {
  struct Wait {
    int producer_instr = -1;  // Profile::instrs index of what was waited for
    int waiter_unit = 0;      // the unit that waited (DMA queues are folded into "DMA")
    DepKind kind = DepKind::none;
    Memory memory = Memory::sbuf;
    double total_ns = 0;
    int64_t count = 0;
  };
  struct Line {
    std::string file;
    int line = 0;
    std::string what;  // opcodes on that line
    double busy_ns = 0, wait_ns = 0;
    int64_t count = 0;
  };
  std::vector<double> unit_busy_ns;  // per Profile::units
  double dma_active_ns = 0;          // time at least one DMA queue is busy
  double tensor_flops = 0, tensor_hfu = 0;
  int64_t hbm_bytes = 0;
  double hbm_gbps = 0;  // achieved
  double sbuf_live_peak = 0, psum_live_peak = 0;
  std::string verdict;  // "compute-bound (TensorE)", "DMA-bound", "latency/dependence-bound"
  std::vector<Wait> top_waits;  // engines' waits first, then DMA queues'; largest first
  std::vector<Line> top_lines;  // by busy time, largest first
};

ProfileStats analyze(const Profile& p);

// Chrome trace event JSON (loads in Perfetto and chrome://tracing): one track per engine and
// DMA queue, a slice per instruction, flow arrows from producer to waiter for dependence waits.
std::string trace_json(const Profile& p);
// Plain-text summary: total time, engine activity, HFU, HBM bandwidth, verdict, top waits and
// source lines, SBUF/PSUM high-water marks.
std::string summary_text(const Profile& p);
// Self-contained HTML page (inline SVG, no scripts, no network).
std::string html_report(const Profile& p);
// Writes <dir>/<stem>.json, .txt and .html (creating dir); returns the three paths.
std::vector<std::string> write_profile(const Profile& p, const std::string& dir,
                                       const std::string& stem);

}  // namespace neuron
