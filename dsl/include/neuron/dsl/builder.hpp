// The tracing state behind the DSL: one per thread, holding the open blocks, loop and tile
// counters, and the kernel's inputs and outputs. DSL functions call these; kernels never do.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "neuron/dsl/syntax.hpp"
#include "neuron/dsl/tensor.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron {

struct TensorSpec;  // neuron/trace.hpp

namespace dsl {

// A number naming the running trace (distinct for every trace of the process), or -1.
int64_t trace_serial();

// Throws UserError rule "no-trace" when no trace is running on this thread.
void require_trace(const Span& span);
bool tracing();

// Creates a buffer. sbuf/psum/hbm buffers are declared (Alloc) in the innermost open block;
// shared_hbm buffers become kernel outputs. `name` empty: "t0", "t1", ...; user names are kept
// and made unique with a suffix.
BufferPtr new_buffer(const std::string& name, Memory memory, std::vector<int64_t> shape,
                     DType dtype, const Span& span);

// Appends an Op to the innermost open block.
void emit(Opcode code, std::vector<Arg> args, const Span& span);

// Opens a For; returns its loop variable ("i0", "i1", ... in the order loops are opened) and an
// id that close_loop must be given.
std::pair<std::string, int> open_loop(int64_t extent, LoopKind kind, const Span& span);
// Opens a runtime loop (LoopKind::dynamic): max(0, ceil((stop - start) / step)) iterations
// counted when it starts, or, with `cond` a register, iterations while it is non-zero.
std::pair<std::string, int> open_dynamic_loop(Affine start, Affine stop, int64_t step,
                                              std::string cond, const Span& span);
// The kernel's random state: a [128, 4] uint32 SBUF tile (builtins.hpp "random numbers")
// declared at the start of the kernel body and seeded there with seed 0 the first time a trace
// asks for it; every random instruction of the trace reads or advances this one tile.
BufferPtr rng_state(const Span& span);

// A fresh register ("r0", "r1", ... in trace order).
std::string new_register(const Span& span);
// Closes the innermost loop if it is `id`. Never throws (called from destructors).
void close_loop(int id) noexcept;

// Segments of the kernel body, for the cores of an LNC grid traced one after another and then
// interleaved at their collectives (python/neuron/collectives.py): seal_segment() moves the body's
// statements so far into a new segment and returns its index, or -1 (sealing nothing) while a
// block is open; order_segments() makes the body those segments in the given order (each once),
// followed by any statements not yet sealed. seal_statements() seals each of the body's
// statements so far into a segment of its own (the cores run in lock step between collectives)
// and returns their indices in order, or nullopt while a block is open.
int seal_segment();
std::optional<std::vector<int>> seal_statements();
void order_segments(const std::vector<int>& order, const Span& span);
// The core whose program is being traced (-1: none): the SBUF and PSUM tiles created from now on
// are that core's (Buffer::core), and the allocator places them in its memory. Returns the core
// set before; ignored (returning -1) when no trace runs.
int set_core(int core);

// The kernel returns one of its input tensors (NKI's output alias of an input): a kernel with
// no outputs that writes no input is then a kernel whose result is that input, not an error.
void note_returned_input();

// A running trace. Constructing one starts tracing on this thread (nested traces are a
// UserError "nested-trace"); destroying it without finish() discards everything. `syntax` is
// the language of the kernel's source, which user messages quote code in while it runs.
class TraceScope {
 public:
  TraceScope(std::string name, Span span, Syntax syntax = Syntax::cpp);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  // Declares the kernel inputs and returns their handles.
  std::vector<nl::tensor> inputs(const std::vector<TensorSpec>& specs);
  // Ends the trace. `outputs`: the tensors the kernel returned, or nullopt when it returned
  // nothing (then every shared_hbm tensor it created is an output, in creation order).
  Kernel finish(const std::optional<std::vector<nl::tensor>>& outputs);

 private:
  SyntaxScope syntax_;
  bool active_ = false;
};

}  // namespace dsl
}  // namespace neuron
