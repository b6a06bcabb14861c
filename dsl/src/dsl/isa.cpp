// neuron::isa: each call appends one ISA Op with the keyword arguments of docs/ir.md.
#include "neuron/isa.hpp"

#include <algorithm>

#include "neuron/dsl/emit.hpp"

namespace neuron::isa {

using dsl::view_of;

namespace {

Value op_name(AluOp op) {
  return std::string(alu_op_name(op));
}

Value operand_arg(const operand& x, const Span& span) {
  if (!x.is_tile()) return x.scalar();
  return view_of(x.tile(), span);
}

}  // namespace

AluOp alu::get(const Span& span) const {
  if (op_) return *op_;
  if (what_)
    user_error(span, "alu-op", "{}{} is an activation function, not an ALU operator",
               dsl::spell("nl::", "nl."), act_func_name(*what_));
  user_error(span, "alu-op", "{}{} has no ALU operator", dsl::spell("nl::", "nl."),
             reduce_ ? reduce_ : "?");
}

namespace {
int64_t accumulate_value(accumulate_flag a, const char* fn, const Span& span) {
  const int64_t v = a.get();
  if (v < -1 || v > 1)
    user_error(span, "unknown-arg",
               "{}: accumulate={} is not a flag: -1 (None: the first write to a PSUM location "
               "overwrites, later ones add), 0 (false: overwrite) or 1 (true: add)",
               fn, v);
  return v;
}
}  // namespace

void nc_matmul(const tensor& dst, const tensor& stationary, const tensor& moving,
               accumulate_flag accumulate, Span span) {
  dsl::require_trace(span);
  accumulate_value(accumulate, "nc_matmul", span);
  dsl::emit(Opcode::nc_matmul,
            {{"dst", view_of(dst, span)},
             {"stationary", view_of(stationary, span)},
             {"moving", view_of(moving, span)},
             {"accumulate", accumulate.get()}},
            span);
}

void nc_matmul_mx(const tensor& dst, const tensor& stationary, const tensor& moving,
                  const tensor& stationary_scale, const tensor& moving_scale,
                  accumulate_flag accumulate, Span span) {
  dsl::require_trace(span);
  accumulate_value(accumulate, "nc_matmul_mx", span);
  dsl::emit(Opcode::nc_matmul_mx,
            {{"dst", view_of(dst, span)},
             {"stationary", view_of(stationary, span)},
             {"moving", view_of(moving, span)},
             {"stationary_scale", view_of(stationary_scale, span)},
             {"moving_scale", view_of(moving_scale, span)},
             {"accumulate", accumulate.get()}},
            span);
}

void quantize_mx(const tensor& dst, const tensor& src, const tensor& dst_scale, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::quantize_mx,
            {{"dst", view_of(dst, span)},
             {"src", view_of(src, span)},
             {"dst_scale", view_of(dst_scale, span)}},
            span);
}

void nc_transpose(const tensor& dst, const tensor& data, Span span) {
  dsl::require_trace(span);
  nc_transpose(dst, data, view_of(dst, span).buffer->memory == Memory::sbuf, span);
}

void nc_transpose(const tensor& dst, const tensor& data, bool vector, Span span) {
  dsl::require_trace(span);
  dsl::emit(vector ? Opcode::nc_transpose_vector : Opcode::nc_transpose,
            {{"dst", view_of(dst, span)}, {"data", view_of(data, span)}}, span);
}

void activation(const tensor& dst, act op, const tensor& data, std::optional<tensor> bias,
                operand scale, std::optional<alu> reduce_op, std::optional<tensor> reduce_res,
                Span span) {
  dsl::require_trace(span);
  std::vector<Arg> args{{"dst", view_of(dst, span)},
                        {"data", view_of(data, span)},
                        {"func", std::string(act_func_name(op.get()))}};
  if (bias) args.push_back({"bias", view_of(*bias, span)});
  args.push_back({"scale", operand_arg(scale, span)});
  if (reduce_op) args.push_back({"reduce_op", op_name(reduce_op->get(span))});
  if (reduce_res) args.push_back({"reduce_res", view_of(*reduce_res, span)});
  dsl::emit(Opcode::activation, std::move(args), span);
}

void tensor_tensor(const tensor& dst, const tensor& data1, const tensor& data2, alu op, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::tensor_tensor,
            {{"dst", view_of(dst, span)},
             {"data1", view_of(data1, span)},
             {"data2", view_of(data2, span)},
             {"op", op_name(op.get(span))}},
            span);
}

void tensor_tensor_scan(const tensor& dst, const tensor& data0, const tensor& data1,
                        operand initial, alu op0, alu op1, bool reverse0, bool reverse1,
                        Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::tensor_tensor_scan,
            {{"dst", view_of(dst, span)},
             {"data0", view_of(data0, span)},
             {"data1", view_of(data1, span)},
             {"initial", operand_arg(initial, span)},
             {"op0", op_name(op0.get(span))},
             {"op1", op_name(op1.get(span))},
             {"reverse0", int64_t{reverse0}},
             {"reverse1", int64_t{reverse1}}},
            span);
}

void tensor_scalar(const tensor& dst, const tensor& data, alu op0, operand operand0, bool reverse0,
                   std::optional<alu> op1, std::optional<operand> operand1, bool reverse1,
                   Span span) {
  dsl::require_trace(span);
  std::vector<Arg> args{{"dst", view_of(dst, span)},
                        {"data", view_of(data, span)},
                        {"op0", op_name(op0.get(span))},
                        {"operand0", operand_arg(operand0, span)},
                        {"reverse0", int64_t{reverse0}}};
  if (op1.has_value() != operand1.has_value())
    user_error(span, "tensor-scalar", "op1 and operand1 must be given together");
  if (op1) {
    args.push_back({"op1", op_name(op1->get(span))});
    args.push_back({"operand1", operand_arg(*operand1, span)});
    args.push_back({"reverse1", int64_t{reverse1}});
  }
  dsl::emit(Opcode::tensor_scalar, std::move(args), span);
}

void tensor_reduce(const tensor& dst, alu op, const tensor& data, nl::axes axis, bool negate,
                   Span span) {
  dsl::require_trace(span);
  const int64_t rank = static_cast<int64_t>(view_of(data, span).shape().size());
  std::vector<int64_t> ax;
  for (int64_t a : axis.list) {
    int64_t n = a < 0 ? a + rank : a;
    if (n == 0)
      user_error(span, "reduce-axis",
                 "cannot reduce over axis 0: it is the partition dimension; reductions run over "
                 "free axes only");
    if (n < 0 || n >= rank)
      user_error(span, "reduce-axis", "axis {} is out of range for a {}-D tile", a, rank);
    if (std::find(ax.begin(), ax.end(), n) != ax.end())
      user_error(span, "reduce-axis", "axis {} is listed twice", a);
    ax.push_back(n);
  }
  std::sort(ax.begin(), ax.end());
  dsl::emit(Opcode::tensor_reduce,
            {{"dst", view_of(dst, span)},
             {"data", data.access()},
             {"op", op_name(op.get(span))},
             {"axes", ax},
             {"negate", int64_t{negate}}},
            span);
}

void tensor_copy(const tensor& dst, const tensor& src, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::tensor_copy, {{"dst", view_of(dst, span)}, {"src", view_of(src, span)}}, span);
}

void tensor_copy_predicated(const tensor& dst, const tensor& src, const tensor& predicate,
                            Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::tensor_copy_predicated,
            {{"dst", view_of(dst, span)},
             {"src", view_of(src, span)},
             {"predicate", view_of(predicate, span)}},
            span);
}

void memset(const tensor& dst, double value, Span span) {
  dsl::require_trace(span);
  const Access& d = view_of(dst, span);
  dsl::emit(Opcode::memset, {{"dst", d}, {"value", dsl::fill_value(value, dst.dtype())}}, span);
}

namespace {

std::vector<int64_t> flatten(const pattern& p) {
  std::vector<int64_t> out;
  for (auto& [stride, count] : p) {
    out.push_back(stride);
    out.push_back(count);
  }
  return out;
}

}  // namespace

void iota(const tensor& dst, const pattern& pattern, int64_t offset, int64_t channel_multiplier,
          Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::iota,
            {{"dst", view_of(dst, span)},
             {"pattern", flatten(pattern)},
             {"offset", offset},
             {"channel_multiplier", channel_multiplier}},
            span);
}

void affine_select(const tensor& dst, const pattern& pattern, int64_t channel_multiplier,
                   const tensor& on_true, double on_false, alu cmp_op, int64_t offset, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::affine_select,
            {{"dst", view_of(dst, span)},
             {"on_true", view_of(on_true, span)},
             {"pattern", flatten(pattern)},
             {"offset", offset},
             {"channel_multiplier", channel_multiplier},
             {"cmp_op", op_name(cmp_op.get(span))},
             {"on_false", on_false}},
            span);
}

void dma_copy(const tensor& dst, const tensor& src, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::dma_copy, {{"dst", view_of(dst, span)}, {"src", view_of(src, span)}}, span);
}

void dma_copy(const tensor& dst, const tensor& src, nl::oob_mode oob, Span span) {
  if (oob == nl::oob_mode::error) return dma_copy(dst, src, span);
  dsl::require_trace(span);
  dsl::emit(Opcode::dma_copy,
            {{"dst", view_of(dst, span)},
             {"src", view_of(src, span)},
             {"oob_mode", static_cast<int64_t>(oob)}},
            span);
}

void dma_copy_bitcast(const tensor& dst, const tensor& src, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::dma_copy,
            {{"dst", view_of(dst, span)}, {"src", view_of(src, span)}, {"bitcast", int64_t{1}}},
            span);
}

void tensor_partition_reduce(const tensor& dst, alu op, const tensor& data, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::tensor_partition_reduce,
            {{"dst", view_of(dst, span)}, {"data", view_of(data, span)}, {"op", op_name(op.get(span))}},
            span);
}

void max8(const tensor& dst, const tensor& src, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::max8, {{"dst", view_of(dst, span)}, {"src", view_of(src, span)}}, span);
}

void nc_find_index8(const tensor& dst, const tensor& data, const tensor& vals, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::nc_find_index8,
            {{"dst", view_of(dst, span)}, {"data", view_of(data, span)}, {"vals", view_of(vals, span)}},
            span);
}

void nc_match_replace8(const tensor& dst, const tensor& data, const tensor& vals, double imm,
                       const tensor& dst_idx, Span span) {
  // The indices first: dst may be data itself. Repeated vals pair with matches from the last
  // slot down (NKI: the instruction takes vals in reverse order).
  dsl::require_trace(span);
  dsl::emit(Opcode::nc_find_index8,
            {{"dst", view_of(dst_idx, span)},
             {"data", view_of(data, span)},
             {"vals", view_of(vals, span)},
             {"reverse", int64_t{1}}},
            span);
  nc_match_replace8(dst, data, vals, imm, span);
}

void nc_match_replace8(const tensor& dst, const tensor& data, const tensor& vals, double imm,
                       Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::nc_match_replace8,
            {{"dst", view_of(dst, span)},
             {"data", view_of(data, span)},
             {"vals", view_of(vals, span)},
             {"imm", imm}},
            span);
}

void bn_stats(const tensor& dst, const tensor& data, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::bn_stats, {{"dst", view_of(dst, span)}, {"data", view_of(data, span)}}, span);
}

void bn_aggr(const tensor& dst, const tensor& data, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::bn_aggr, {{"dst", view_of(dst, span)}, {"data", view_of(data, span)}}, span);
}

void nc_stream_shuffle(const tensor& dst, const tensor& src, std::vector<int64_t> shuffle_mask,
                       Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::nc_stream_shuffle,
            {{"dst", view_of(dst, span)},
             {"src", view_of(src, span)},
             {"shuffle_mask", std::move(shuffle_mask)}},
            span);
}

}  // namespace neuron::isa

namespace neuron::isa {

void dma_copy_rows(const tensor& dst, const tensor& src, const tensor& rows, bool rows_of_src,
                   nl::oob_mode oob, Span span) {
  dsl::require_trace(span);
  const int64_t P = rows.shape().empty() ? 1 : rows.shape()[0];
  auto side = [&](const tensor& t, bool indirect) {
    return indirect ? dsl::rows_view(t, P, dsl::spell("dma_copy_rows", "nisa.dma_copy"), span)
                    : view_of(t, span);
  };
  dsl::emit(Opcode::dma_copy,
            {{"dst", side(dst, !rows_of_src)},
             {"src", side(src, rows_of_src)},
             {rows_of_src ? "src_rows" : "dst_rows", view_of(rows, span)},
             {"oob_mode", static_cast<int64_t>(oob)}},
            span);
}

void nc_n_gather(const tensor& dst, const tensor& data, const tensor& indices, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::nc_n_gather,
            {{"dst", view_of(dst, span)},
             {"data", view_of(data, span)},
             {"indices", view_of(indices, span)}},
            span);
}

void local_gather(const tensor& dst, const tensor& src, const tensor& index,
                  int64_t num_elem_per_idx, int64_t num_valid_indices, Span span) {
  dsl::require_trace(span);
  std::vector<Arg> args{{"dst", view_of(dst, span)},
                        {"src", view_of(src, span)},
                        {"index", view_of(index, span)},
                        {"num_elem_per_idx", num_elem_per_idx}};
  if (num_valid_indices >= 0) args.push_back({"num_valid_indices", num_valid_indices});
  dsl::emit(Opcode::local_gather, std::move(args), span);
}

}  // namespace neuron::isa
