// The per-thread tracing state: open blocks, counters, buffer naming, kernel inputs/outputs.
#include "neuron/dsl/builder.hpp"

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>

#include "neuron/dsl/syntax.hpp"
#include "neuron/ir/visitor.hpp"
#include "neuron/trace.hpp"

namespace neuron::dsl {

namespace {

// Does some instruction of k write (its "dst") one of k's input tensors?
bool writes_an_input(const Kernel& k) {
  struct Finder : IRVisitor {
    const Kernel& k;
    bool found = false;
    explicit Finder(const Kernel& kernel) : k(kernel) {}
    void visit_Op(const Op& op) override {
      const Access* dst = op.access("dst");
      if (dst == nullptr) return;
      for (auto& in : k.inputs) found |= dst->buffer == in;
    }
  } finder(k);
  finder.visit(k.body);
  return finder.found;
}

struct Frame {
  std::vector<StmtPtr> stmts;
  // Set for loop frames; the kernel body frame has id -1.
  int id = -1;
  std::string var;
  int64_t extent = 0;
  LoopKind kind = LoopKind::affine;
  Affine start = 0, stop = 0;  // dynamic loops (For in ir.hpp)
  int64_t step = 1;
  std::string cond;
  Span span;
};

struct TraceState {
  std::string name;
  Span span;
  std::vector<BufferPtr> inputs;
  std::vector<BufferPtr> shared;  // shared_hbm tensors created by the kernel, in order
  std::vector<Frame> frames;      // frames[0] is the kernel body
  std::vector<std::vector<StmtPtr>> segments;  // sealed parts of the body (seal_segment)
  int next_loop = 0, next_tile = 0, next_out = 0, next_loop_id = 0, next_register = 0;
  std::set<std::string> names;
  BufferPtr rng_state;
  int64_t serial = 0;
  bool returns_input = false;  // note_returned_input()
  int core = -1;               // set_core()
};

thread_local TraceState* current = nullptr;

TraceState& state(const Span& span) {
  if (!current)
    user_error(span, "no-trace", "{}",
               spell("DSL functions can only be called while a kernel is traced (inside the "
                     "function given to neuron::trace)",
                     "nl and nisa functions can only be called while a kernel is traced (inside "
                     "a @neuron.kernel function)"));
  return *current;
}

std::string unique_name(TraceState& st, const std::string& wanted) {
  std::string name = wanted;
  for (int k = 1; st.names.count(name); ++k) name = fmt::format("{}_{}", wanted, k);
  st.names.insert(name);
  return name;
}

void check_shape(const std::vector<int64_t>& shape, const Span& span) {
  if (shape.empty()) user_error(span, "shape", "a tensor needs at least one dimension");
  for (auto d : shape)
    if (d <= 0)
      user_error(span, "shape", "tensor dimensions must be positive, got [{}]{}",
                 fmt::join(shape, ", "),
                 d == 0 ? " (the shape of an empty view: a slice that selects nothing can be "
                          "made, but no instruction takes it)"
                        : "");
}

}  // namespace

bool tracing() {
  return current != nullptr;
}

int64_t trace_serial() {
  return current ? current->serial : -1;
}

void require_trace(const Span& span) {
  state(span);
}

BufferPtr new_buffer(const std::string& name, Memory memory, std::vector<int64_t> shape,
                     DType dtype, const Span& span) {
  TraceState& st = state(span);
  check_shape(shape, span);
  auto b = std::make_shared<Buffer>();
  if (!name.empty())
    b->name = unique_name(st, name);
  else if (memory == Memory::shared_hbm)
    b->name = unique_name(st, fmt::format("out{}", st.next_out++));
  else
    b->name = unique_name(st, fmt::format("t{}", st.next_tile++));
  b->memory = memory;
  b->shape = std::move(shape);
  b->dtype = dtype;
  b->span = span;
  if (is_on_chip(memory)) b->core = st.core;
  BufferPtr ptr = b;
  if (memory == Memory::shared_hbm)
    st.shared.push_back(ptr);
  else
    st.frames.back().stmts.push_back(Alloc::make(ptr, span));
  return ptr;
}

void emit(Opcode code, std::vector<Arg> args, const Span& span) {
  TraceState& st = state(span);
  st.frames.back().stmts.push_back(Op::make(code, std::move(args), span));
}

std::pair<std::string, int> open_loop(int64_t extent, LoopKind kind, const Span& span) {
  TraceState& st = state(span);
  Frame f;
  f.id = st.next_loop_id++;
  f.var = fmt::format("i{}", st.next_loop++);
  f.extent = extent;
  f.kind = kind;
  f.span = span;
  st.frames.push_back(std::move(f));
  return {st.frames.back().var, st.frames.back().id};
}

std::pair<std::string, int> open_dynamic_loop(Affine start, Affine stop, int64_t step,
                                              std::string cond, const Span& span) {
  auto [var, id] = open_loop(0, LoopKind::dynamic, span);
  Frame& f = current->frames.back();
  f.start = std::move(start);
  f.stop = std::move(stop);
  f.step = step;
  f.cond = std::move(cond);
  return {var, id};
}

BufferPtr rng_state(const Span& span) {
  TraceState& st = state(span);
  if (st.rng_state) return st.rng_state;
  auto b = std::make_shared<Buffer>();
  b->name = unique_name(st, "rng_state");
  b->memory = Memory::sbuf;
  b->shape = {128, 4};
  b->dtype = DType::uint32;
  b->span = span;
  // At the front of the body, so the tile outlives every loop and is seeded before any use.
  auto& body = st.segments.empty() ? st.frames.front().stmts : st.segments.front();
  body.insert(body.begin(),
              {Alloc::make(b, span),
               Op::make(Opcode::rng_seed, {{"dst", Access::whole(b)}, {"seed", 0.0}}, span)});
  st.rng_state = b;
  return b;
}

std::string new_register(const Span& span) {
  TraceState& st = state(span);
  return register_var(st.next_register++);
}

void close_loop(int id) noexcept {
  if (!current || current->frames.size() < 2 || current->frames.back().id != id) return;
  Frame f = std::move(current->frames.back());
  current->frames.pop_back();
  auto body = Block::make(std::move(f.stmts), f.span);
  current->frames.back().stmts.push_back(
      f.kind == LoopKind::dynamic
          ? For::make_dynamic(f.var, f.start, f.stop, f.step, f.cond, body, f.span)
          : For::make(f.var, f.extent, f.kind, body, f.span));
}

void note_returned_input() {
  if (current) current->returns_input = true;
}

int seal_segment() {
  if (!current || current->frames.size() != 1) return -1;
  current->segments.push_back(std::move(current->frames.front().stmts));
  current->frames.front().stmts.clear();
  return int(current->segments.size()) - 1;
}

std::optional<std::vector<int>> seal_statements() {
  if (!current || current->frames.size() != 1) return std::nullopt;
  std::vector<int> ids;
  for (auto& stmt : current->frames.front().stmts) {
    current->segments.push_back({std::move(stmt)});
    ids.push_back(int(current->segments.size()) - 1);
  }
  current->frames.front().stmts.clear();
  return ids;
}

int set_core(int core) {
  if (!current) return -1;
  return std::exchange(current->core, core);
}

void order_segments(const std::vector<int>& order, const Span& span) {
  TraceState& st = state(span);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != int(i) || sorted.size() != st.segments.size())
      internal_error("order_segments: [{}] is not an order of {} segments",
                     fmt::join(order, ", "), st.segments.size());
  std::vector<StmtPtr> body;
  for (int k : order)
    for (auto& s : st.segments[size_t(k)]) body.push_back(std::move(s));
  for (auto& s : st.frames.front().stmts) body.push_back(std::move(s));
  st.frames.front().stmts = std::move(body);
  st.segments.clear();
}

TraceScope::TraceScope(std::string name, Span span, Syntax syntax) : syntax_(syntax) {
  if (current)
    user_error(span, "nested-trace",
               "{} called while tracing kernel '{}' (started at {}); kernels cannot be traced "
               "from inside another kernel",
               spell("neuron::trace", "a @neuron.kernel"), current->name, current->span.str());
  static std::atomic<int64_t> traces{0};
  current = new TraceState();
  current->serial = traces++;
  current->name = std::move(name);
  current->span = std::move(span);
  current->frames.emplace_back();
  active_ = true;
}

TraceScope::~TraceScope() {
  if (active_) {
    delete current;
    current = nullptr;
  }
}

std::vector<nl::tensor> TraceScope::inputs(const std::vector<TensorSpec>& specs) {
  TraceState& st = *current;
  std::vector<nl::tensor> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    // The span is the kernel's, so the message names the argument.
    const std::string arg = spec.name.empty() ? fmt::format("in{}", i) : spec.name;
    if (spec.shape.empty())
      user_error(st.span, "shape",
                 "kernel input '{}' has no dimensions (a 0-d array?); a tensor needs at least one",
                 arg);
    for (auto d : spec.shape)
      if (d <= 0)
        user_error(st.span, "shape",
                   "kernel input '{}' has shape [{}]; tensor dimensions must be positive (empty "
                   "tensors are not supported)",
                   arg, fmt::join(spec.shape, ", "));
    auto b = std::make_shared<Buffer>();
    b->name = unique_name(st, arg);
    b->memory = Memory::shared_hbm;
    b->shape = spec.shape;
    b->dtype = spec.dtype;
    b->span = st.span;
    st.inputs.push_back(b);
    out.emplace_back(Access::whole(b));
  }
  return out;
}

Kernel TraceScope::finish(const std::optional<std::vector<nl::tensor>>& outputs) {
  TraceState& st = *current;
  if (st.frames.size() != 1)
    user_error(st.frames.back().span, "loop-nesting",
               "loop '{}' is still open when kernel '{}' returns (a range object outlived its "
               "for statement)",
               st.frames.back().var, st.name);
  Kernel k;
  std::vector<StmtPtr> scratch;  // Allocs of shared_hbm tensors not returned
  k.name = st.name;
  k.span = st.span;
  k.inputs = st.inputs;
  if (outputs) {
    for (auto& t : *outputs) {
      if (!t.valid())
        user_error(st.span, "kernel-output", "kernel returned an empty tensor handle");
      const BufferPtr& b = t.access().buffer;
      if (b->memory != Memory::shared_hbm)
        user_error(st.span, "kernel-output",
                   "kernel outputs must be created with {}; '{}' lives in {}",
                   spell("nl::ndarray(..., nl::shared_hbm)",
                         "nl.ndarray(..., buffer=nl.shared_hbm)"),
                   b->name, memory_name(b->memory));
      for (auto& in : st.inputs)
        if (in == b)
          user_error(st.span, "kernel-output", "kernel input '{}' cannot be returned as an output",
                     b->name);
      if (!(t.access().dims == Access::whole(b).dims) || !t.access().storage.empty() ||
          !t.access().order.empty())
        user_error(st.span, "kernel-output",
                   "kernel outputs must be whole tensors, not a view of '{}'", b->name);
      for (auto& o : k.outputs)
        if (o == b) user_error(st.span, "kernel-output", "'{}' is returned twice", b->name);
      k.outputs.push_back(b);
    }
    // A shared_hbm tensor the kernel does not return is scratch, as in NKI (attention
    // tutorials keep intermediate results in one): HBM of the kernel's own, declared at the
    // start of its body. The buffer was created by new_buffer, not const, and nothing else
    // holds it yet, so it is changed in place.
    for (auto& b : st.shared) {
      bool returned = false;
      for (auto& o : k.outputs) returned |= o == b;
      if (returned) continue;
      const_cast<Buffer&>(*b).memory = Memory::hbm;
      scratch.push_back(Alloc::make(b, b->span));
    }
  } else {
    k.outputs = st.shared;
  }
  if (!st.segments.empty()) {  // sealed but never ordered: in the order they were traced
    std::vector<int> order(st.segments.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
    order_segments(order, st.span);
  }
  auto& body = st.frames[0].stmts;
  body.insert(body.begin(), scratch.begin(), scratch.end());
  k.body = Block::make(std::move(body), st.span);
  // A kernel may write its results into input tensors instead of returning outputs (NKI's
  // output arguments); one that does neither has nothing to show for its work.
  if (k.outputs.empty() && !writes_an_input(k) && !st.returns_input)
    user_error(st.span, "kernel-output",
               "kernel '{}' has no outputs and writes none of its inputs: create outputs with "
               "{} and return them, or store into an input tensor",
               st.name,
               spell("nl::ndarray(shape, dtype, nl::shared_hbm)",
                     "nl.ndarray(shape, dtype, buffer=nl.shared_hbm)"));
  return k;
}

}  // namespace neuron::dsl
