// neuron::isa — the NKI `nki.isa` instructions (current generation): the destination comes
// first, nothing is returned, and the output dtype is the destination's.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "neuron/language.hpp"

namespace neuron::isa {

using nl::operand;
using nl::tensor;

// An ALU operator argument: pass the nl function (`nl::add`, `nl::maximum`, `nl::sum`,
// `nl::rsqrt`) or an AluOp (`nl::bypass`). A function with no ALU form (`nl::exp`) is a
// UserError "alu-op" when the instruction is traced.
class alu {
 public:
  alu(AluOp op) : op_(op) {}                                  // NOLINT: implicit on purpose
  alu(const nl::binary_fn& f) : op_(f.alu) {}                 // NOLINT
  alu(const nl::unary_fn& f) : op_(f.alu), what_(f.act) {}    // NOLINT
  alu(const nl::reduce_fn& f) : op_(f.alu), reduce_(f.op) {}  // NOLINT
  AluOp get(const Span& span) const;

 private:
  std::optional<AluOp> op_;
  std::optional<ActFunc> what_;
  const char* reduce_ = nullptr;
};

// An activation function argument: `nl::exp`, `nl::copy`, ... or an ActFunc.
class act {
 public:
  act(ActFunc f) : f_(f) {}                  // NOLINT: implicit on purpose
  act(const nl::unary_fn& f) : f_(f.act) {}  // NOLINT
  act(const nl::copy_fn& f) : f_(f.act) {}   // NOLINT
  ActFunc get() const { return f_; }

 private:
  ActFunc f_;
};

// nc_matmul's accumulate flag: -1 (default) lets the compiler decide (first write to a PSUM
// location overwrites, later ones add), false/0 overwrites, true/1 adds.
class accumulate_flag {
 public:
  accumulate_flag() = default;
  template <std::integral I>
  accumulate_flag(I v)
      : v_(std::is_same_v<I, bool> ? (v ? 1 : 0) : static_cast<int64_t>(v)) {}  // NOLINT
  int64_t get() const { return v_; }

 private:
  int64_t v_ = -1;
};

// iota / affine_select patterns: [[stride, count], ...] over the free dims.
using pattern = std::vector<std::pair<int64_t, int64_t>>;

// dst[M,N] (PSUM) = stationary[K,M].T @ moving[K,N], accumulated in fp32.
void nc_matmul(const tensor& dst, const tensor& stationary, const tensor& moving,
               accumulate_flag accumulate = {}, Span span = Span::current());
// MX (NeuronCore-v4 microscaling, docs/mx.md). dst[M, N] (PSUM fp32/bf16) = stationary[K, M]
// .T @ moving[K, N] over x4 data (four values per element, all contracted), each value times
// 2^(scale - 127) of its block of 8 partitions (uint8 scales; block g's row is
// (g // 4) * 32 + g % 4 of the scale tile).
void nc_matmul_mx(const tensor& dst, const tensor& stationary, const tensor& moving,
                  const tensor& stationary_scale, const tensor& moving_scale,
                  accumulate_flag accumulate = {}, Span span = Span::current());
// dst [P, F/4] (float8_e5m2_x4 / float8_e4m3fn_x4) and dst_scale (uint8, layout as above) <-
// src [P, F] (bf16/fp16) quantized in blocks of 8 partitions x 4 values (VectorE).
void quantize_mx(const tensor& dst, const tensor& src, const tensor& dst_scale,
                 Span span = Span::current());
// dst[F,P] = data[P,F].T: on the Tensor engine into PSUM, or (vector, the default for a dst in
// SBUF) on the Vector engine, at most 32 x 32.
void nc_transpose(const tensor& dst, const tensor& data, Span span = Span::current());
void nc_transpose(const tensor& dst, const tensor& data, bool vector, Span span = Span::current());
// dst = op(data * scale + bias) on the Scalar engine; with reduce_op, reduce_res[P,1] gets the
// reduction of the result over the free axes. scale is a float or a [P,1] tile.
void activation(const tensor& dst, act op, const tensor& data,
                std::optional<tensor> bias = std::nullopt, operand scale = 1.0,
                std::optional<alu> reduce_op = std::nullopt,
                std::optional<tensor> reduce_res = std::nullopt, Span span = Span::current());
// dst = op(data1, data2), same shapes (no broadcasting at the ISA level).
void tensor_tensor(const tensor& dst, const tensor& data1, const tensor& data2, alu op,
                   Span span = Span::current());
// A scan along each partition's free dims (row-major): r = initial (a float or [P,1] tile),
// then per element r = op1(op0(data0[i], r), data1[i]) and dst[i] = r; reverse0 / reverse1
// swap the operands of op0 / op1. data0, data1 and dst have the same shape.
void tensor_tensor_scan(const tensor& dst, const tensor& data0, const tensor& data1,
                        operand initial, alu op0, alu op1, bool reverse0 = false,
                        bool reverse1 = false, Span span = Span::current());
// dst = (data op0 operand0) op1 operand1; operands are floats or [P,1] tiles; reverse swaps
// the two sides of a stage.
void tensor_scalar(const tensor& dst, const tensor& data, alu op0, operand operand0,
                   bool reverse0 = false, std::optional<alu> op1 = std::nullopt,
                   std::optional<operand> operand1 = std::nullopt, bool reverse1 = false,
                   Span span = Span::current());
// dst = op-reduction of data over the given free axes (kept as size 1); negate multiplies by -1.
void tensor_reduce(const tensor& dst, alu op, const tensor& data, nl::axes axis,
                   bool negate = false, Span span = Span::current());
void tensor_copy(const tensor& dst, const tensor& src, Span span = Span::current());
// dst = src where predicate != 0; other elements of dst are left unchanged.
void tensor_copy_predicated(const tensor& dst, const tensor& src, const tensor& predicate,
                            Span span = Span::current());
void memset(const tensor& dst, double value, Span span = Span::current());
// dst[p, f...] = offset + p * channel_multiplier + sum(stride_i * f_i).
void iota(const tensor& dst, const pattern& pattern, int64_t offset = 0,
          int64_t channel_multiplier = 0, Span span = Span::current());
// dst = cmp_op(affine value, 0) ? on_true : on_false, the affine value built like iota's.
void affine_select(const tensor& dst, const pattern& pattern, int64_t channel_multiplier,
                   const tensor& on_true, double on_false, alu cmp_op = nl::equal,
                   int64_t offset = 0, Span span = Span::current());
// DMA copy between HBM and SBUF (either direction, or SBUF to SBUF).
void dma_copy(const tensor& dst, const tensor& src, Span span = Span::current());
// The same; with oob_mode::skip, a copy whose HBM side a register or runtime loop index moves
// out of its tensor at run time is skipped instead of faulting (NKI's oob_mode on dma_copy).
void dma_copy(const tensor& dst, const tensor& src, nl::oob_mode oob, Span span = Span::current());
// dst's bytes = src's bytes, each walked in row-major order (NKI's .ap(dtype=...) views: the
// two sides may have different dtypes and shapes but hold the same number of bytes).
void dma_copy_bitcast(const tensor& dst, const tensor& src, Span span = Span::current());
// An indirect DMA (NKI's .ap(vector_offset=rows)): partition p moves row rows[p, 0] of the HBM
// side's first kept dim (src when rows_of_src, else dst), which the view takes from row 0.
void dma_copy_rows(const tensor& dst, const tensor& src, const tensor& rows, bool rows_of_src,
                   nl::oob_mode oob = nl::oob_mode::error, Span span = Span::current());
// dst[p, j] = data[p, indices[p, j]] over data's flattened free dims (GpSimd; indices integers
// in 0..elements per partition - 1).
void nc_n_gather(const tensor& dst, const tensor& data, const tensor& indices,
                 Span span = Span::current());
// For each group of 16 partitions: the group's indices (index's 16 rows read partition-first,
// the first num_valid_indices of them, all when -1) each select num_elem_per_idx consecutive
// elements of every partition's own row of src; dst is [P, num_valid_indices * num_elem_per_idx].
void local_gather(const tensor& dst, const tensor& src, const tensor& index,
                  int64_t num_elem_per_idx = 1, int64_t num_valid_indices = -1,
                  Span span = Span::current());

// ---- partition reduction, selection and statistics ----
// dst[0, j] = op over the partitions of data[:, j] (GpSimd): add, maximum, minimum; bitwise_and
// and bitwise_or on integer tiles.
void tensor_partition_reduce(const tensor& dst, alu op, const tensor& data,
                             Span span = Span::current());
// dst[p, 0:8] = the 8 largest values of src[p, :] (8 to 16384 elements), descending.
void max8(const tensor& dst, const tensor& src, Span span = Span::current());
// dst[p, k] (an integer tile) = the index in data[p, :] of vals[p, k]; a value repeated in vals
// takes the next occurrence; all ones when absent.
void nc_find_index8(const tensor& dst, const tensor& data, const tensor& vals,
                    Span span = Span::current());
// dst = data with the elements nc_find_index8 would find replaced by imm.
void nc_match_replace8(const tensor& dst, const tensor& data, const tensor& vals, double imm,
                       Span span = Span::current());
// The same, with the indices of the replaced elements in dst_idx; a value repeated in vals
// pairs with the occurrences from the last slot down (dst_idx [2, 10, 9, ..., 4] for vals
// [3, 8, 8, ...] in [1, 2, 3, 4, 8, 8, ...]), the opposite of nc_find_index8.
void nc_match_replace8(const tensor& dst, const tensor& data, const tensor& vals, double imm,
                       const tensor& dst_idx, Span span = Span::current());
// dst[p, 0:6] = count, mean, count * variance of the even-indexed elements of data[p, :] (at
// most 512), then of the odd-indexed ones.
void bn_stats(const tensor& dst, const tensor& data, Span span = Span::current());
// dst[p, 0:2] = mean, variance of data[p, :]'s (count, mean, count * variance) triples combined.
void bn_aggr(const tensor& dst, const tensor& data, Span span = Span::current());
// In every group of 32 partitions, dst partition i = src partition shuffle_mask[i] (32 entries;
// 255 leaves dst partition i unchanged).
void nc_stream_shuffle(const tensor& dst, const tensor& src, std::vector<int64_t> shuffle_mask,
                       Span span = Span::current());

// ---- random numbers (a counter-based generator: docs/random.md) ----
// Draws use the rows 0..P-1 of a state tile for a destination of P partitions (row p for
// partition p) and advance them past the values drawn: the kernel's own state (a [128, 4]
// uint32 SBUF tile declared and seeded with 0 at the start of the kernel) unless `state` names
// another [>= P, 4] uint32 SBUF tile.
// dst = 32 random bits per element (integer dst) or uniform values in [0, 1) (float dst).
void rng(const tensor& dst, std::optional<tensor> state = std::nullopt,
         Span span = Span::current());
// dst (float) = uniform values in [low, high).
void rand2(const tensor& dst, double low, double high, std::optional<tensor> state = std::nullopt,
           Span span = Span::current());
// dst = 0 where a uniform draw is below prob (a number or a [P, 1] tile), else data; the kept
// values are not rescaled.
void dropout(const tensor& dst, const tensor& data, operand prob,
             std::optional<tensor> state = std::nullopt, Span span = Span::current());
// Seeds the state: a number or a [1, 1] tile seeds all 128 rows, a [P, 1] tile row p with its
// value p (integers taken modulo 2^32); counters restart at 0. The same seed gives the same
// draws.
void set_rng_seed(operand seeds, std::optional<tensor> state = std::nullopt,
                  Span span = Span::current());
// dst ([P, 4] uint32) = rows 0..P-1 of the state; rand_set_state writes them from src.
void rand_get_state(const tensor& dst, std::optional<tensor> state = std::nullopt,
                    Span span = Span::current());
void rand_set_state(const tensor& src, std::optional<tensor> state = std::nullopt,
                    Span span = Span::current());

}  // namespace neuron::isa
