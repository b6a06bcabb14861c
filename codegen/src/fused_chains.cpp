// Fused chains: consecutive element-wise instructions of a partition-blocked run, each reading
// the one before, that the native backend runs as one loop over the elements (neuron_k_chain)
// instead of one loop per instruction. A norm's last steps, (x - mean) * rstd, * weight,
// + bias, then the store, become one pass that reads x and the weight and writes the output,
// instead of four passes that each write a temporary and read it back. Values are unchanged:
// every step computes what its instruction's kernel computes per element and rounds to its
// destination's dtype, so results stay the simulator's bits (docs/native.md "Fused chains").
//
// Element order is what the fusion changes: the instructions ran one after the other over whole
// tiles, the chain runs them element by element. So a chain takes only instructions whose
// elements are independent (element-wise, float dtypes, no PSUM writes) and views where the two
// orders agree: every view a step reads either shares no bytes with any destination of the
// chain or is exactly that destination's view (then element e is read and written at the same
// position in both orders), and [P, 1] columns, read before the loop, share no bytes with any
// destination.
#include <optional>
#include <set>

#include "neuron/codegen/plan.hpp"

namespace neuron::native {
namespace {

bool float_dtype(DType t) {
  return t == DType::float32 || t == DType::bfloat16 || t == DType::float16;
}

// Activation functions that are a few arithmetic instructions. The others (exp, tanh, silu,
// ...: a polynomial and a range reduction) stay their own loop: measured, swiglu's silu fused
// with its multiply and store took 5.5-6.0 ms a call against 4.3-5.4 as separate loops (one
// thread, [4096, 2x1024], Zen 4): a loop that busy no longer hides the other steps' memory
// traffic behind its arithmetic.
bool cheap(ActFunc f) {
  switch (f) {
    case ActFunc::copy:
    case ActFunc::relu:
    case ActFunc::abs:
    case ActFunc::square:
    case ActFunc::sign:
    case ActFunc::negative:
    case ActFunc::reciprocal:
    case ActFunc::sqrt:
    case ActFunc::rsqrt:
      return true;
    default:
      return false;
  }
}

// A step's operands: the view holding its chain value (the previous step's destination), its
// second tensor operand and its columns.
struct StepViews {
  const AccessPattern* chain = nullptr;
  const AccessPattern* other = nullptr;
  bool other_first = false;
  std::vector<const AccessPattern*> columns;
};

// Whether `in` can be a step: an element-wise instruction with float operands, at offsets known
// when the program starts, writing outside PSUM (a PSUM write also clears its matmul flags; a
// read is a plain read, so a chain may start from a matmul's result).
bool chainable(const Instr& in, const std::function<bool(const Affine&)>& dynamic) {
  switch (in.op) {
    case Opcode::tensor_scalar:
    case Opcode::tensor_tensor:
    case Opcode::tensor_copy:
      break;
    case Opcode::activation:
      if (in.has_reduce_res || !cheap(in.args.func)) return false;
      break;
    case Opcode::dma_copy:
      if (in.args.bitcast || in.args.indirect != InstrArgs::Indirect::none || in.args.oob_skip)
        return false;
      break;
    default:
      return false;
  }
  for (auto [ap, written] : operands_of(in)) {
    if ((written && ap->memory == Memory::psum) || !float_dtype(ap->dtype) || dynamic(ap->offset) ||
        dynamic(ap->partition) || ap->dims.empty())
      return false;
  }
  return true;
}

// The operands of step `in` when its chain value is read through `prev` (the previous step's
// destination; null for the first step, whose chain value is its first source).
std::optional<StepViews> step_views(const Instr& in, const AccessPattern* prev) {
  StepViews v;
  if (in.op == Opcode::tensor_tensor) {
    if (!prev || in.src[0] == *prev) {
      v.chain = &in.src[0];
      v.other = &in.src[1];
    } else if (in.src[1] == *prev) {
      v.chain = &in.src[1];
      v.other = &in.src[0];
      v.other_first = true;
    } else {
      return std::nullopt;
    }
  } else {
    if (prev && !(in.src[0] == *prev)) return std::nullopt;
    v.chain = &in.src[0];
    for (size_t k = 1; k < in.src.size(); ++k) v.columns.push_back(&in.src[k]);
  }
  // A copy within one dtype moves bits; the chain moves values, which differ only in NaN
  // payloads of bf16/fp16 read from memory. After a first step the value is one the chain
  // computed and rounded, which a copy keeps.
  const bool bit_copy = (in.op == Opcode::tensor_copy || in.op == Opcode::dma_copy) &&
                        in.dst.dtype == in.src[0].dtype && in.dst.dtype != DType::float32;
  if (!prev && bit_copy) return std::nullopt;
  return v;
}

int64_t elements(const AccessPattern& ap) {
  int64_t n = 1;
  for (auto& d : ap.dims) n *= d.size;
  return n;
}

// Whether `in` can end a chain whose last destination is `last`: a tensor_reduce of exactly that
// view over all its free axes (each partition's values in row-major order, the loop's order),
// with an arithmetic op into a float destination outside PSUM at a known offset. Its result is
// written after the loop, where the instruction writes it: after every step.
bool reduces_last(const Instr& in, const AccessPattern& last,
                  const std::function<bool(const Affine&)>& dynamic) {
  if (in.op != Opcode::tensor_reduce || in.src.size() != 1 || !(in.src[0] == last)) return false;
  const size_t nd = last.dims.size();
  std::set<int> axes(in.args.axes.begin(), in.args.axes.end());
  if (nd < 2 || axes.size() != nd - 1 || *axes.begin() != 1 ||
      *axes.rbegin() != static_cast<int>(nd) - 1)
    return false;
  switch (in.args.reduce_op) {
    case AluOp::add:
    case AluOp::subtract:
    case AluOp::multiply:
    case AluOp::maximum:
    case AluOp::minimum:
      break;
    default:
      return false;
  }
  const AccessPattern& d = in.dst;
  return d.memory != Memory::psum && float_dtype(d.dtype) && !dynamic(d.offset) &&
         !dynamic(d.partition) && !d.dims.empty() && d.dims[0].size == last.dims[0].size;
}

// Reading `r` while the chain writes `w`: fine when they share no bytes or are the same view.
bool agrees(const AccessPattern& r, const AccessPattern& w) {
  return r == w || !may_overlap(r, w);
}

}  // namespace

std::vector<Chain> plan_chains(const ForwardedRun& run, const std::vector<RunLocal>& ranges,
                               const std::function<bool(const Affine&)>& dynamic) {
  std::vector<size_t> live;  // the instructions the run executes
  for (size_t k = 0; k < run.instrs.size(); ++k)
    if (!run.dropped[k]) live.push_back(k);

  std::vector<Chain> chains;
  size_t a = 0;
  while (a < live.size()) {
    const Instr& first = run.instrs[live[a]];
    std::optional<StepViews> sv =
        chainable(first, dynamic) ? step_views(first, nullptr) : std::nullopt;
    // At most pmax partitions: the kernel keeps each column's values in a local array.
    if (!sv || first.dst.dims[0].size > tile_limits::pmax) {
      ++a;
      continue;
    }
    Chain c;
    std::vector<const AccessPattern*> walked{sv->chain}, columns, dsts;
    std::vector<StepViews> views;
    const int64_t n = elements(first.dst);
    size_t b = a;
    while (b < live.size() && c.steps.size() < static_cast<size_t>(kChainMax)) {
      const Instr& in = run.instrs[live[b]];
      std::optional<StepViews> s =
          b == a ? sv : (chainable(in, dynamic) ? step_views(in, dsts.back()) : std::nullopt);
      if (!s || elements(in.dst) != n || (s->other && elements(*s->other) != n)) break;
      // The orders agree: this step's reads against every destination so far and its own, and
      // its destination against every read and destination so far.
      bool ok = true;
      std::vector<const AccessPattern*> w = dsts;
      w.push_back(&in.dst);
      for (const AccessPattern* d : w) {
        if (s->other) ok = ok && agrees(*s->other, *d);
        for (const AccessPattern* col : s->columns) ok = ok && !may_overlap(*col, *d);
        if (b == a) ok = ok && agrees(*s->chain, *d);
      }
      for (const AccessPattern* r : walked) ok = ok && agrees(*r, in.dst);
      for (const AccessPattern* col : columns) ok = ok && !may_overlap(*col, in.dst);
      for (const AccessPattern* d : dsts) ok = ok && agrees(*d, in.dst);
      if (!ok) break;
      if (s->other) walked.push_back(s->other);
      columns.insert(columns.end(), s->columns.begin(), s->columns.end());
      dsts.push_back(&in.dst);
      views.push_back(*s);
      c.steps.push_back(live[b]);
      ++b;
    }
    if (!dsts.empty() && b < live.size() &&
        reduces_last(run.instrs[live[b]], *dsts.back(), dynamic))
      c.reduce = live[b++];
    if (c.steps.size() + (c.reduce ? 1 : 0) < 2) {
      ++a;
      continue;
    }
    // A destination the chain need not write: a run-local temporary (nothing outside the run
    // touches it) that nothing reads after the next step (or the reduction) takes it.
    c.store.assign(c.steps.size(), true);
    const size_t end = c.reduce ? *c.reduce : c.steps.back();
    for (size_t s = 0; s < c.steps.size() - (c.reduce ? 0 : 1); ++s) {
      const AccessPattern& d = run.instrs[c.steps[s]].dst;
      const auto r = byte_range(d, false);
      bool local = false;
      for (const RunLocal& l : ranges)
        local = local ||
                (r && d.partition.constant == l.partition && r->first >= l.lo && r->second <= l.hi);
      if (!local) continue;
      bool read = false;
      for (size_t t = s + 1; t < c.steps.size(); ++t) {
        if (views[t].other) read = read || may_overlap(*views[t].other, d);
        for (const AccessPattern* col : views[t].columns) read = read || may_overlap(*col, d);
      }
      for (size_t k = end + 1; k < run.instrs.size() && !read; ++k) {
        if (run.dropped[k]) continue;
        for (auto [ap, written] : in_order(run.instrs[k]))
          read = read || (!written && may_overlap(*ap, d));
      }
      c.store[s] = read;
    }
    c.source = views[0].chain;
    for (const StepViews& v : views) {
      c.other.push_back(v.other);
      c.other_first.push_back(v.other_first);
    }
    chains.push_back(std::move(c));
    a = b;
  }
  return chains;
}

}  // namespace neuron::native
