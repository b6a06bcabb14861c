// Random numbers (isa.hpp / language.hpp "random numbers"): every draw is an instruction that
// reads a state tile followed by rng_skip, which advances that tile's counters past the values
// drawn, so the next draw continues the stream and a reseed restarts it.
#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/emit.hpp"
#include "neuron/dsl/syntax.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"

namespace neuron {

namespace {

using dsl::view_of;

int64_t partitions(const Access& v) {
  auto shape = v.shape();
  return shape.empty() ? 1 : shape[0];
}

int64_t per_partition(const Access& v) {
  int64_t n = 1;
  auto shape = v.shape();
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

// Rows 0..P-1 of the state tile (the kernel's unless one is given).
Access state_rows(const std::optional<nl::tensor>& state, int64_t P, std::string_view what,
                  const Span& span) {
  nl::tensor st = state ? *state : nl::tensor(Access::whole(dsl::rng_state(span)));
  auto shape = st.shape();
  if (st.dtype() != DType::uint32 || st.buffer() != Memory::sbuf || shape.size() != 2 ||
      shape[1] != 4 || shape[0] < P)
    user_error(span, "rng-state",
               "{}: the random state must be a uint32 SBUF tile of [{}, 4] or more rows, got {} "
               "[{}] in {}",
               what, P, dtype_name(st.dtype()), fmt::join(shape, ", "), memory_name(st.buffer()));
  return view_of(st(nl::ds(0, P)), span);
}

// A state copy's other side: [P, 4] uint32 like the state's rows.
void check_state_copy(const nl::tensor& t, std::string_view what, const Span& span) {
  auto shape = t.shape();
  if (t.dtype() != DType::uint32 || shape.size() != 2 || shape[1] != 4)
    user_error(span, "rng-state",
               "{}: a random state is a uint32 [P, 4] tile (four words per partition), got {} "
               "[{}]",
               what, dtype_name(t.dtype()), fmt::join(shape, ", "));
}

// rand_get_state / rand_set_state: a copy between `tile` and the state's rows.
void copy_state(const nl::tensor& tile, const std::optional<nl::tensor>& state, bool to_state,
                std::string_view what, const Span& span) {
  dsl::require_trace(span);
  check_state_copy(tile, what, span);
  Access t = view_of(tile, span);
  Access st = state_rows(state, partitions(t), what, span);
  dsl::emit(Opcode::tensor_copy, {{"dst", to_state ? st : t}, {"src", to_state ? t : st}}, span);
}

// A draw of `dst`'s values, then the counters of the rows it used advanced past them.
void draw(Opcode code, std::vector<Arg> args, const Access& dst,
          const std::optional<nl::tensor>& state, std::string_view what, const Span& span) {
  Access st = state_rows(state, partitions(dst), what, span);
  args.insert(args.begin(), {"dst", dst});
  args.push_back({"state", st});
  dsl::emit(code, std::move(args), span);
  dsl::emit(Opcode::rng_skip, {{"dst", st}, {"state", st}, {"count", per_partition(dst)}}, span);
}

Value number_or_tile(const nl::operand& x, const Span& span) {
  if (x.is_tile()) return view_of(x.tile(), span);
  return x.scalar();
}

}  // namespace

namespace isa {

void rng(const tensor& dst, std::optional<tensor> state, Span span) {
  dsl::require_trace(span);
  draw(Opcode::rng, {{"low", 0.0}, {"high", 1.0}}, view_of(dst, span), state,
       dsl::spell("isa::rng", "nisa.rng"), span);
}

void rand2(const tensor& dst, double low, double high, std::optional<tensor> state, Span span) {
  dsl::require_trace(span);
  std::string_view what = dsl::spell("isa::rand2", "nisa.rand2");
  if (!dtype_is_float(dst.dtype()))
    user_error(span, "dtype", "{}: the destination must be a float tile, got {}", what,
               dtype_name(dst.dtype()));
  if (!(low <= high))
    user_error(span, "unknown-arg", "{}: min {} is above max {}", what, low, high);
  draw(Opcode::rng, {{"low", low}, {"high", high}}, view_of(dst, span), state, what, span);
}

void dropout(const tensor& dst, const tensor& data, operand prob, std::optional<tensor> state,
             Span span) {
  dsl::require_trace(span);
  if (!prob.is_tile() && !(prob.scalar() >= 0.0 && prob.scalar() <= 1.0))
    user_error(span, "unknown-arg", "{}: the drop probability {} is not in [0, 1]",
               dsl::spell("isa::dropout", "nisa.dropout / nl.dropout"), prob.scalar());
  draw(Opcode::dropout, {{"data", view_of(data, span)}, {"prob", number_or_tile(prob, span)}},
       view_of(dst, span), state, dsl::spell("isa::dropout", "nisa.dropout"), span);
}

void set_rng_seed(operand seeds, std::optional<tensor> state, Span span) {
  dsl::require_trace(span);
  std::string_view what = dsl::spell("isa::set_rng_seed", "nisa.set_rng_seed");
  const bool per_row = seeds.is_tile() && seeds.tile().shape()[0] > 1;
  const int64_t rows = per_row ? seeds.tile().shape()[0] : state ? state->shape()[0] : 128;
  Access st = state_rows(state, rows, what, span);
  dsl::emit(Opcode::rng_seed, {{"dst", st}, {"seed", number_or_tile(seeds, span)}}, span);
}

void rand_get_state(const tensor& dst, std::optional<tensor> state, Span span) {
  copy_state(dst, state, false, dsl::spell("isa::rand_get_state", "nisa.rand_get_state"), span);
}

void rand_set_state(const tensor& src, std::optional<tensor> state, Span span) {
  copy_state(src, state, true, dsl::spell("isa::rand_set_state", "nisa.rand_set_state"), span);
}

}  // namespace isa

namespace nl {

tensor rand(std::vector<int64_t> shape, DType dtype, Span span) {
  dsl::require_trace(span);
  tensor t = dsl::new_tile(std::move(shape), dtype, Memory::sbuf, span);
  isa::rng(t, std::nullopt, span);
  return t;
}

void random_seed(operand seed, Span span) {
  isa::set_rng_seed(std::move(seed), std::nullopt, span);
}

tensor dropout(const tensor& x, operand rate, std::optional<DType> dtype, Span span) {
  dsl::require_trace(span);
  tensor t = dsl::new_tile(x.shape(), dtype.value_or(x.dtype()), Memory::sbuf, span);
  isa::dropout(t, x, std::move(rate), std::nullopt, span);
  return t;
}

}  // namespace nl

}  // namespace neuron
