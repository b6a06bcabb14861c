// The static plan of an engine program for native execution: normalized operand layouts, the
// shape rules checked once at compile time, and bounds of every access as functions of the
// program ids (checked per launch, so a bad access is a UserError, never a segfault).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "neuron/base/instr_kernels.hpp"
#include "neuron/base/target.hpp"
#include "neuron/codegen/program.hpp"

namespace neuron::native {

// A pattern in the kDims-dim form the kernels take (instr_abi.hpp): sizes and byte strides.
struct NormLayout {
  int64_t size[kDims];
  int64_t stride[kDims];
  int64_t count = 1;
};
// `pb`: bytes per partition of the pattern's memory (ignored for HBM).
NormLayout normalize(const AccessPattern& ap, const Instr& in, int64_t pb);
int64_t bytes_per_partition(const Target& t, Memory m);

// Whether the kernels may walk all operands with one loop nest (same normalized sizes).
bool same_shape(const std::vector<const NormLayout*>& ls);
// [lo, hi) of a range walked by `dims` (strides in elements, sizes; from dims[first] on) from
// `start`, in units of `unit`, the last element `last_unit` long.
struct Span1 {
  int64_t lo, hi;
};
Span1 extent(int64_t start, const std::vector<AccessPattern::Dim>& dims, size_t first, int64_t unit,
             int64_t last_unit);
// Whether two operands of one instruction can share bytes (conservative: true unless their
// memories, tensors, partitions or byte ranges are provably apart). For the operands of one
// instruction or one straight run of them: offsets are compared for the same values of the
// loop variables and program ids (two views of one HBM tensor whose offsets differ by a
// constant are apart when their ranges are), never across iterations.
bool may_overlap(const AccessPattern& a, const AccessPattern& b);
// The bytes of each partition an on-chip view at a constant offset may touch, every rotating
// slot included (what may_overlap compares).
Span1 partition_bytes(const AccessPattern& p);
// Whether partition p of every result of `in` depends only on partition p of its operands (the
// element-wise, free-axis reduction and direct copy instructions) and every operand spans the
// same number of partitions: then the instruction may run a block of partitions at a time.
// Sets `partitions` to that number.
bool partition_local(const Instr& in, int64_t& partitions);
// Whether `in` is an nc_matmul a partition-blocked run may take: it contracts over the
// partitions of its stationary and moving operands (K), so a block of partitions adds its rows
// of K to the result, and the blocks in order make the instruction's one fma chain per element
// in increasing k (docs/numerics.md "Matmul"). Only where that chain is the rule: an fp32 PSUM
// destination (another dtype rounds once per instruction), not bf16 x bf16 (its rule pairs rows
// in blocks of 32 from the instruction's first row), an explicit accumulate flag (auto reads
// the PSUM flags). Sets `partitions` to K. The destination is not partition-local: the caller
// keeps every other view of the run off it.
bool contracting_matmul(const Instr& in, int64_t& partitions);
// Every view `in` reads or writes, with whether it is written.
std::vector<std::pair<const AccessPattern*, bool>> operands_of(const Instr& in);
// The same in execution order (folded_sbuf.cpp): what it reads, then what it writes. A
// predicated copy keeps dst where the predicate is false, so it reads its destination too.
std::vector<std::pair<const AccessPattern*, bool>> in_order(const Instr& in);
// Whether a and b address partition p at the same physical partition for every p (so running
// both a block of partitions at a time keeps each partition's reads and writes in order); in
// HBM, whether they are one view whose partition rows are disjoint.
bool same_partition_map(const AccessPattern& a, const AccessPattern& b);

// The bytes [lo, hi) of each partition an SBUF pattern may touch in one loop iteration (its
// current rotating slot, if it rotates), when it walks partitions one by one from a constant
// partition at a constant offset; with `dense`, only when it touches every byte of the range
// (row-major, contiguous free dims); with `any_step`, also a partition step of 0.
std::optional<std::pair<int64_t, int64_t>> byte_range(const AccessPattern& ap, bool dense,
                                                      bool any_step = false);

// SBUF bytes [lo, hi) of partitions from `partition` that only the partition-blocked run
// body[i, j) touches, and that it writes in full before reading (folded_sbuf.cpp): the native
// backend keeps them in a buffer of one block's rows instead of the whole tile.
struct RunLocal {
  int64_t partition, lo, hi;
};
// SBUF views (indices into the caller's list) by the 2 KiB pages of bytes each may touch in a
// partition, every rotating slot included: what may touch a range is then looked for among
// the views near it, not in the whole program (an unrolled kernel has hundreds of thousands of
// views, and hundreds of ranges to check). A view at an offset not known before the run may
// touch anything.
class SbufPages {
 public:
  void add(size_t index, const AccessPattern& ap);
  // Whether `ok(index)` holds for every view that may touch bytes [lo, hi); stops at the first
  // that fails. A view spanning several pages is asked once per page.
  template <class Ok>
  bool all_near(int64_t lo, int64_t hi, const Ok& ok) const {
    for (size_t i : anywhere_)
      if (!ok(i)) return false;
    for (int64_t pg = std::max<int64_t>(lo, 0) / kPage;
         pg * kPage < hi && pg < static_cast<int64_t>(pages_.size()); ++pg)
      for (size_t i : pages_[static_cast<size_t>(pg)])
        if (!ok(i)) return false;
    return true;
  }

 private:
  static constexpr int64_t kPage = 2048;
  std::vector<size_t> anywhere_;
  std::vector<std::vector<size_t>> pages_;
};

// Every SBUF view of a program, in program order, with its instruction's id: built once per
// program for run_local_ranges (a fully unrolled kernel has thousands of runs, and each asks
// whether anything outside it touches its ranges).
struct SbufAccesses {
  std::vector<std::pair<int, const AccessPattern*>> list;
  std::unordered_map<int, std::pair<size_t, size_t>> span;  // id -> first, last entry in list
  SbufPages pages;         // list's entries by the bytes they may touch
  bool unique_ids = true;  // false: two instructions share an id (a hand-built program)
  // Buffers (AccessPattern::Alloc::buffer) whose first access in program order is a write of
  // all of their bytes, on every run of the program, or inside a loop that may run no
  // iteration when every access lies inside it: they never read bytes another buffer left.
  std::unordered_set<int> self_initialized;
  // The inclusive range of each static loop's variable (the widest where two loops share a
  // name), to bound views whose offset moves with a loop.
  Affine::Ranges loop_ranges;
  // The dynamic loops' variables: a view they or a register place lies inside its tile.
  std::set<std::string> dynamic_loops;
};
SbufAccesses sbuf_accesses(const Program& p);

std::vector<RunLocal> run_local_ranges(const Program& p, const std::vector<ProgNode>& body,
                                       size_t i, size_t j, const SbufAccesses* all = nullptr);

// The run body[i, j) with its loads into run-local ranges forwarded (folded_sbuf.cpp): a range
// whose one write is a DMA from HBM rows laid out as its rows (the same dtype, or bf16/fp16
// widened to fp32) is read from those rows instead. `instrs` are the run's instructions with
// those reads rewritten to the HBM elements, `dropped[k]` marks the elided loads, and `ranges`
// loses the forwarded ranges. `dynamic` says whether an offset depends on registers or runtime
// loops (such loads stay); `all` (the program's sbuf_accesses) bounds views that move with
// static loops and views placed at run time (may_touch).
struct ForwardedRun {
  std::vector<Instr> instrs;
  std::vector<bool> dropped;
  std::vector<AccessPattern> rows;  // the forwarded loads' HBM sources, now read directly
};
ForwardedRun forward_loads(const std::vector<ProgNode>& body, size_t i, size_t j,
                           std::vector<RunLocal>& ranges,
                           const std::function<bool(const Affine&)>& dynamic,
                           const SbufAccesses* all = nullptr);

// The fused chains of a run (fused_chains.cpp): runs of up to kChainMax consecutive executed
// instructions of `run` (element-wise, float, outside PSUM), each reading the one before's
// destination, that the native backend runs as one loop over the elements (neuron_k_chain).
// `steps` index run.instrs; `store[s]` is false where step s's destination is a run-local
// temporary that nothing reads after the next step: the fused loop does not write it.
// `source` is the first step's chain value's view; `other[s]` step s's second tensor operand
// (tensor_tensor; null otherwise), `other_first[s]` whether it is data1 (the chain value data2).
// `reduce`, when set, indexes the tensor_reduce right after the steps that reduces the last
// destination over all its free axes: the loop feeds it each value in the reduction's own lane
// order (then the chain may be one step).
struct Chain {
  std::vector<size_t> steps;
  std::vector<bool> store;
  const AccessPattern* source = nullptr;
  std::vector<const AccessPattern*> other;
  std::vector<bool> other_first;
  std::optional<size_t> reduce;
};
std::vector<Chain> plan_chains(const ForwardedRun& run, const std::vector<RunLocal>& ranges,
                               const std::function<bool(const Affine&)>& dynamic);

// Transposed matmuls (transposed_matmul.cpp): consecutive instructions `nc_transpose(X <- S);
// copy(Y <- X); nc_matmul(D <- Y^T @ V)` in fp32, or bf16 into fp32 PSUM, that the native
// backend runs as one product reading S's rows (neuron_matmul_f32_at, neuron_matmul_bf16_at),
// without writing X and Y: chosen only where nothing reads X or Y again before overwriting them
// and no operand shares bytes with them. Keyed by the transpose's id. `canonical_zero`: the copy
// is the Scalar engine's identity activation (x * 1 + 0, so -0 becomes +0), not a tensor_copy.
struct TransposedMatmul {
  int transpose_id = 0, copy_id = 0, matmul_id = 0;
  bool canonical_zero = false;
};
std::map<int, TransposedMatmul> transposed_matmuls(const Program& p);

// SBUF bytes [lo, hi) of partitions [partition, partition + count) that hold the same row in
// every partition at all times (folded_sbuf.cpp): only partition-broadcast writes of the whole
// range fill them (a DMA from a source with partition step 0, a memset), and only element-wise
// instructions read them. The native backend keeps one physical row for them.
struct BroadcastRows {
  int64_t partition, count, lo, hi;
};
std::vector<BroadcastRows> broadcast_rows(const Program& p);

// Whether `in` writes every element of its destination (and reduce_res) without reading it.
// Others (an accumulating matmul, a predicated copy, an indirect or skipping DMA, the rest)
// count as reading their destination too.
bool overwrites_dst(const Instr& in);

// Whether a register or one of `dynamic_loops` (variables of dynamic loops) is a term of `a`.
bool set_at_run_time(const Affine& a, const std::set<std::string>& dynamic_loops);
// Whether such a term places the view (its partition, offset or rotating slot): the executors
// then check it when it runs, on chip against its tile (AccessPattern::alloc).
bool placed_at_run_time(const AccessPattern& ap, const std::set<std::string>& dynamic_loops);

// The end of the bytes of an on-chip view's tile (AccessPattern::alloc, known), its last
// rotating slot included.
int64_t tile_end(const AccessPattern& ap);

// Whether nc_matmul operands have the contiguous [rows, cols] layout neuron_matmul_* takes.
bool matmul_fast_layout(const Instr& in, const NormLayout& dst, const NormLayout& st,
                        const NormLayout& mv);

// Checks every instruction's shape rules (the simulator's "shape-mismatch", "reduce-axes",
// "iota-pattern" errors and negative sizes) and that the program uses only what the native
// backend runs. Throws UserError.
void check_program(const Program& p);

// An access's range as affine bounds: the loop-variable part is folded into [lo, hi] at compile
// time (loops are boxes, so the extremes are reached); program ids stay symbolic.
struct AccessBound {
  const Instr* in = nullptr;
  const char* what = "";
  const AccessPattern* ap = nullptr;
  bool writes = false;
  // Depends on a register or a dynamic loop: not checked per launch but at run time, by the
  // generated code (lower_program.cpp), and the bounds below are not meaningful.
  bool dynamic = false;
  // Element offset (HBM) or byte offset in the partition (on chip), including the pattern's own
  // extent: [lo, hi] inclusive of the last byte/element touched.
  int64_t lo = 0, hi = 0;
  std::array<int64_t, 4> pid{}, npid{};
  // On chip only: the partition range.
  int64_t plo = 0, phi = 0;
  std::array<int64_t, 4> ppid{}, pnpid{};
};

struct ProgramBounds {
  std::vector<AccessBound> accesses;  // instructions inside zero-trip loops are left out
};
ProgramBounds analyze_bounds(const Program& p);

// Whether any instruction reads the PSUM "written by matmul" flags (an nc_matmul or
// nc_matmul_mx with accumulate=auto, eager mode's psum_flags_set/get). When none does the flags are unobservable, and the native backend neither
// writes nor clears them (a memset of 4 flag bytes per fp32 element after every PSUM write).
bool reads_psum_flags(const Program& p);

// Byte ranges [first, second) of each partition of SBUF and PSUM that a program of `p` may read
// before writing them, sorted and disjoint (first_reads.cpp says how it is decided). Programs
// start from zeroed memories; a worker reusing its memories clears only these ranges.
struct FirstReads {
  std::vector<std::pair<int64_t, int64_t>> sbuf, psum;
  // For each range (same order), the partitions [0, n) it needs clearing on.
  std::vector<int64_t> sbuf_partitions, psum_partitions;
};
FirstReads first_reads(const Program& p, const ProgramBounds& b, const Target& t);

// Per tensor of `p` (true only for outputs): whether a launch on `grid` may leave some element
// unwritten or read it before writing it, so the output must start zeroed (the simulator's
// rule). An output is left unzeroed only when writes that overwrite their destination, outside
// dynamic loops, provably cover every element, and every read of it (a kernel reading back what
// it stored: a softmax's second pass) lies within what earlier top-level nodes of the same
// program wrote; counted row by row over the programs and loop iterations (first_reads.cpp;
// more than `limit` rows: zeroed, not proven).
std::vector<bool> outputs_to_zero(const Program& p, const std::vector<int64_t>& grid,
                                  int64_t limit = int64_t{1} << 22);

// Bytes between partitions in the native scratch memories. The simulator's layout (the
// target's full partition size, e.g. 192 KiB) puts every partition row of a tile on the same
// L1 sets; when every access's byte range is static, the pitch shrinks to what the program
// touches, and it is padded to an odd number of cache lines either way (the full size plus one
// line where an access is dynamic). Semantics (bounds) still use the target.
struct Pitch {
  int64_t sbuf = 0, psum = 0;
};
Pitch physical_pitch(const Program& p, const ProgramBounds& b, const Target& t);

// Per launch: throws UserError "out-of-bounds" (naming the first bad program id) when any grid
// point would access outside a tensor or on-chip memory. Returns, per on-chip memory, the
// largest byte offset written in any partition (what a worker must clear between programs).
struct LaunchExtent {
  int64_t sbuf_written = 0, psum_written = 0;
};
LaunchExtent check_launch(const Program& p, const ProgramBounds& b, const Target& t,
                          const std::vector<int64_t>& tensor_elements,
                          const std::vector<int64_t>& grid);

}  // namespace neuron::native
