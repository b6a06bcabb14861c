// The dynamic half of the nl surface: indirect rows, registers and while loops (language.hpp).
#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/emit.hpp"
#include "neuron/dsl/syntax.hpp"
#include "neuron/language.hpp"

namespace neuron::nl {

namespace {

using dsl::rows_view;
using dsl::view_of;

// A register named by an index expression: exactly one register with coefficient 1.
std::string register_name(const index& r, const char* what, const Span& span) {
  if (r.constant != 0 || r.terms.size() != 1 || r.terms[0].coeff != 1 ||
      !is_register_var(r.terms[0].var))
    user_error(span, "register", "{}: '{}' is not a register (make one with {})", what, r.str(),
               dsl::spell("nl::register_alloc", "nisa.register_alloc"));
  return r.terms[0].var;
}

}  // namespace

tensor load_rows(const tensor& src, const tensor& rows, oob_mode oob, std::optional<DType> dtype,
                 Span span) {
  dsl::require_trace(span);
  const int64_t P = rows.shape().empty() ? 1 : rows.shape()[0];
  Access v = rows_view(src, P, dsl::spell("load_rows", "nl.load of indirect rows"), span);
  tensor dst = dsl::new_tile(v.shape(), dtype.value_or(src.dtype()), Memory::sbuf, span);
  dsl::emit(Opcode::nl_load,
            {{"dst", dst.access()},
             {"src", std::move(v)},
             {"src_rows", view_of(rows, span)},
             {"oob_mode", static_cast<int64_t>(oob)}},
            span);
  return dst;
}

void store_rows(const tensor& dst, const tensor& rows, const tensor& value, oob_mode oob,
                Span span) {
  dsl::require_trace(span);
  const int64_t P = rows.shape().empty() ? 1 : rows.shape()[0];
  Access v = rows_view(dst, P, dsl::spell("store_rows", "nl.store to indirect rows"), span);
  dsl::emit(Opcode::nl_store,
            {{"dst", std::move(v)},
             {"src", view_of(value, span)},
             {"dst_rows", view_of(rows, span)},
             {"oob_mode", static_cast<int64_t>(oob)}},
            span);
}

tensor gather_flattened(const tensor& data, const tensor& indices, std::optional<DType> dtype,
                        Span span) {
  dsl::require_trace(span);
  tensor dst = dsl::new_tile(indices.shape(), dtype.value_or(data.dtype()), Memory::sbuf, span);
  dsl::emit(Opcode::nc_n_gather,
            {{"dst", dst.access()}, {"data", view_of(data, span)}, {"indices", view_of(indices, span)}},
            span);
  return dst;
}

index register_alloc(int64_t init, Span span) {
  dsl::require_trace(span);
  index r = index::var(dsl::new_register(span));
  register_move(r, index(init), span);
  return r;
}

void register_load(const index& reg, const tensor& src, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::register_load,
            {{"reg", register_name(reg, "register_load", span)}, {"src", view_of(src, span)}},
            span);
}

void register_store(const tensor& dst, const index& reg, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::register_store,
            {{"dst", view_of(dst, span)}, {"reg", register_name(reg, "register_store", span)}},
            span);
}

void register_move(const index& reg, const index& value, Span span) {
  dsl::require_trace(span);
  std::vector<Arg> args{{"reg", register_name(reg, "register_move", span)}};
  if (value.is_constant())
    args.push_back({"value", value.constant});
  else
    args.push_back({"src", register_name(value, "register_move (its value)", span)});
  dsl::emit(Opcode::register_move, std::move(args), span);
}

// while_loop's loop is a frame of its own, closed by while_loop_end; nesting follows C++ scopes
// (the template in language.hpp calls these in pairs).
namespace {
thread_local std::vector<int> t_while_ids;
}

void while_loop_begin(const index& reg, Span span) {
  auto [var, id] =
      dsl::open_dynamic_loop(0, 0, 1, register_name(reg, "while_loop", span), span);
  t_while_ids.push_back(id);
}

void while_loop_end(const index& reg, const index& next, Span span) {
  register_move(reg, next, span);
  if (!t_while_ids.empty()) {
    dsl::close_loop(t_while_ids.back());
    t_while_ids.pop_back();
  }
}

}  // namespace neuron::nl

namespace neuron::dsl {

Access rows_view(const nl::tensor& t, int64_t P, std::string_view what, const Span& span) {
  Access v = view_of(t, span);
  if (is_on_chip(v.buffer->memory))
    user_error(span, "indirect-dma", "{}: '{}' is in {}; indirect rows index an HBM tensor", what,
               v.buffer->name, memory_name(v.buffer->memory));
  for (auto& d : v.dims)
    if (d.keep) {
      // Row i of the index tile picks row start + step * i of the tensor: a strided slice
      // of the row dim (TensorView's t[0:512:2] before a vector select) is a valid source.
      if (!d.start.is_constant() || d.start.constant < 0 || d.step < 1)
        user_error(span, "indirect-dma",
                   "{}: the row dim of '{}' must start at a constant row and step forward "
                   "(the rows come from the index tile), got start {} step {}; slice it as "
                   "a:b:k with a constant a >= 0 and k >= 1",
                   what, v.buffer->name, d.start.str(), d.step);
      d.size = P;
      return v;
    }
  user_error(span, "indirect-dma", "{}: '{}' has no dim left to select rows of", what,
             v.buffer->name);
}

}  // namespace neuron::dsl
