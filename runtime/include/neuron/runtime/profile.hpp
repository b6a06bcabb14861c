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
  Memory dst_memory = Memory::sbuf;
  std::vector<Memory> src_memory;  // per source operand
  std::string op;  // tensor_tensor / tensor_scalar: the ALU op; activation: the function
};

// One dynamic execution of an instruction (loops are walked, so an Instr has many).
struct InstrEvent {
  int instr = 0;        // index into Profile::instrs
  int unit = 0;         // index into Profile::units
  int64_t program = 0;  // flat SPMD program id
  // Engines: start, and end = results visible (occupancy + pipeline latency). DMA: trigger and
  // completion (the semaphore seen by the waiting engine).
  double start_ns = 0, end_ns = 0;
  // Engines: the time the engine was held (its initiation interval). DMA: the span in which its
  // engines moved its data (the rest of start..end is trigger and completion latency).
  double occupancy_ns = 0;
  double table_load_ns = 0;  // ScalarE: activation table loaded before this instruction
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
  // TensorE, VectorE, ScalarE, GpSimdE, then DMA q0 .. q15: transfers laid out on as many tracks
  // as are in flight at once (each transfer's data moves on up to 16 DMA engines).
  std::vector<std::string> units;
  std::vector<ProfileInstr> instrs;
  std::vector<InstrEvent> events;  // in the order the timing model's scheduler placed them
  std::vector<LiveRange> live;
  double total_ns = 0;   // first instruction to last completion (the kernel's device span)
  double launch_ns = 0;  // the target's fixed launch cost, reported beside total_ns
  std::vector<double> dma_engine_busy_ns;  // per DMA engine: time moving data
  bool executed = true;  // false: timing only, no data was computed
  int64_t programs = 1;
  // Allocator high-water marks and capacities, bytes per partition.
  int64_t sbuf_alloc_bytes = 0, psum_alloc_bytes = 0, sbuf_capacity = 0, psum_capacity = 0;
  double tensor_peak_flops = 0;  // dense bf16 peak of the target
  double hbm_gbps = 0;           // the core's share of HBM bandwidth
  int first_dma_unit = 4;
};

// Figures derived from a profile; the summary, the trace, the HTML report and the Python
// Profile's tables all use them.
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
  // A costly pattern the compiler inserted for a line of the user's kernel, with the cheaper way
  // to write it.
  struct Hint {
    std::string file;
    int line = 0;
    std::string pattern;  // "transpose-for-matmul", "psum-round-trip"
    std::string message;
    double cost_ns = 0;   // engine time of the inserted instructions
    int64_t count = 0;    // dynamic executions of the pattern
  };
  std::vector<double> unit_busy_ns;       // per Profile::units: time any of its instructions runs
  std::vector<double> unit_occupancy_ns;  // per unit: sum of the time it was held
  std::vector<double> unit_wait_ns;       // per unit: time it sat idle waiting on dependences
  std::vector<int64_t> unit_count;        // per unit: dynamic instructions
  double dma_active_ns = 0;          // time at least one transfer is in flight
  double dma_engine_busy = 0;        // fraction of the time the DMA engines move data (mean)
  double tensor_flops = 0, tensor_hfu = 0;
  int64_t hbm_bytes = 0;
  double hbm_gbps = 0;  // achieved
  double sbuf_live_peak = 0, psum_live_peak = 0;
  // "compute-bound on TensorE", "DMA-bound (bandwidth)", "DMA-bound (latency: ...)",
  // "latency/dependence-bound".
  std::string verdict;
  std::vector<Wait> top_waits;  // engines' waits first, then DMA queues'; largest first
  std::vector<Line> top_lines;  // by busy time, largest first
  std::vector<Hint> hints;      // largest cost first
};

ProfileStats analyze(const Profile& p);
// The costly compiler-inserted patterns of a profile (profile_hints.cpp); analyze() fills
// ProfileStats::hints with them.
std::vector<ProfileStats::Hint> profile_hints(const Profile& p);

// Two profiles of one kernel side by side (before -> after): time per unit and per source line.
struct ProfileDiff {
  struct Row {
    std::string what;  // a unit name, or "file:line  opcodes"
    double before_ns = 0, after_ns = 0;
  };
  std::string kernel, before_label, after_label;
  double before_ns = 0, after_ns = 0;  // device time
  std::string before_verdict, after_verdict;
  std::vector<Row> units;  // active time; DMA tracks folded into "DMA (any)" and "DMA engines"
  std::vector<Row> lines;  // busy time, largest change first
};
ProfileDiff compare_profiles(const Profile& before, const Profile& after,
                             const std::string& before_label = "before",
                             const std::string& after_label = "after");
std::string compare_text(const ProfileDiff& d);

// Chrome trace event JSON (loads in Perfetto and chrome://tracing): one track per engine and
// DMA queue, a slice per instruction, flow arrows from producer to waiter for dependence waits.
std::string trace_json(const Profile& p);
// Plain-text summary: total time, engine activity, HFU, HBM bandwidth, verdict, top waits and
// source lines, SBUF/PSUM high-water marks.
std::string summary_text(const Profile& p);
// Self-contained HTML page (inline script, nothing fetched): summary, hints, a zoomable timeline
// whose instructions show their details and what they waited for when clicked, per-engine and
// per-line tables with the kernel's source beside its per-line cost, and a comparison with
// another profile when one is given. The URL fragment #select=<event>&zoom=<t0>,<t1> opens it
// on an instruction and a time range.
std::string html_report(const Profile& p, const ProfileDiff* compare = nullptr);
// Writes <dir>/<stem>.json, .txt and .html (creating dir); returns the three paths.
std::vector<std::string> write_profile(const Profile& p, const std::string& dir,
                                       const std::string& stem);

}  // namespace neuron
