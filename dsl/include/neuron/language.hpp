// neuron::nl — the NKI `nki.language` surface in C++: allocation, data movement, element-wise
// math, reductions, loops and program ids. Each call records IR into the running trace.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "neuron/dsl/range.hpp"
#include "neuron/dsl/tensor.hpp"
#include "neuron/base/error.hpp"
#include "neuron/base/target.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron::nl {

// ---- dtypes and buffers ---------------------------------------------------------------------

inline constexpr DType float32 = DType::float32, bfloat16 = DType::bfloat16,
                       float16 = DType::float16, float8_e4m3 = DType::float8_e4m3,
                       float8_e5m2 = DType::float8_e5m2, float8_e4m3fn = DType::float8_e4m3fn,
                       float8_e8m0fnu = DType::float8_e8m0fnu,
                       int8 = DType::int8, int16 = DType::int16,
                       int32 = DType::int32, uint8 = DType::uint8, uint16 = DType::uint16,
                       uint32 = DType::uint32, bool_ = DType::bool_;

inline constexpr Memory sbuf = Memory::sbuf, psum = Memory::psum, hbm = Memory::hbm,
                        shared_hbm = Memory::shared_hbm;

namespace tile_size {  // NKI's nl.tile_size; the numbers live in neuron/base/target.hpp
using tile_limits::bn_stats_fmax;
using tile_limits::gemm_moving_fmax;
using tile_limits::gemm_stationary_fmax;
using tile_limits::pmax;
using tile_limits::psum_fmax;
}  // namespace tile_size

// The result dtype of a binary operation on two tiles (NKI's promotion table): float with int
// gives the float, two floats the wider (fp16 with bf16: fp32; the two fp8s: bf16), two ints
// the wider or the smallest signed type holding both (int32 with uint32: fp32).
DType promote(DType a, DType b);

// ---- allocation ------------------------------------------------------------------------------

// An uninitialised tensor. buffer nl::shared_hbm makes a kernel output.
tensor ndarray(std::vector<int64_t> shape, DType dtype, Memory buffer = sbuf,
               const std::string& name = "", Span span = Span::current());
// On-chip tensors filled by memset. HBM tensors cannot be created with a value (rule "hbm-init").
tensor zeros(std::vector<int64_t> shape, DType dtype, Memory buffer = sbuf,
             const std::string& name = "", Span span = Span::current());
tensor ones(std::vector<int64_t> shape, DType dtype, Memory buffer = sbuf,
            const std::string& name = "", Span span = Span::current());
tensor full(std::vector<int64_t> shape, double fill_value, DType dtype, Memory buffer = sbuf,
            const std::string& name = "", Span span = Span::current());
// Shape (and dtype unless given) of x; buffer defaults to x's.
tensor zeros_like(const tensor& x, std::optional<DType> dtype = std::nullopt,
                  std::optional<Memory> buffer = std::nullopt, const std::string& name = "",
                  Span span = Span::current());

// ---- data movement ---------------------------------------------------------------------------

tensor load(const tensor& src, std::optional<DType> dtype = std::nullopt,
            Span span = Span::current());
void store(const tensor& dst, const tensor& value, Span span = Span::current());
tensor broadcast_to(const tensor& x, std::vector<int64_t> shape, Span span = Span::current());
void device_print(const std::string& prefix, const tensor& x, Span span = Span::current());

// ---- matrix operations (Tensor engine, result in PSUM) ---------------------------------------

// x @ y with x [M,K] (or [K,M] with transpose_x) and y [K,N]; result [M,N] fp32 in PSUM.
tensor matmul(const tensor& x, const tensor& y, bool transpose_x = false,
              Span span = Span::current());
// x.T for a 2-D tile, in PSUM.
tensor transpose(const tensor& x, std::optional<DType> dtype = std::nullopt,
                 Span span = Span::current());

// ---- element-wise functions ------------------------------------------------------------------
// NKI passes a function itself as an ISA op (`op=nl.add`). Here every element-wise function is
// a constant object: call it to compute (`nl::exp(x)`), pass it to say which operator an ISA
// instruction applies (`isa::activation(dst, nl::exp, x)`, `isa::tensor_tensor(d, a, b, nl::add)`).

// nl::copy: a fresh SBUF copy (nl.copy); as an activation function, the identity.
struct copy_fn {
  ActFunc act = ActFunc::copy;
  tensor operator()(const tensor& x, std::optional<DType> dtype = std::nullopt,
                    Span span = Span::current()) const;
};

// Unary math on the Scalar engine (nl.unary). `alu` is set where the Vector ALU has the same
// operator (abs, rsqrt, reciprocal), so it can also be a tensor_scalar op.
struct unary_fn {
  ActFunc act;
  std::optional<AluOp> alu = std::nullopt;
  tensor operator()(const tensor& x, std::optional<DType> dtype = std::nullopt,
                    Span span = Span::current()) const;
};

// Binary math (nl.binary) with numpy broadcasting. Result dtype: the promoted dtype of the two
// tiles, or the tile's dtype when the other operand is a scalar; comparisons and logical ops
// return 1.0 / 0.0 in that dtype.
struct binary_fn {
  AluOp alu;
  tensor operator()(operand x, operand y, std::optional<DType> dtype = std::nullopt,
                    Span span = Span::current()) const;
};

// Reduction axes: one axis (`1`, `-1`) or several (`{1, 2}`); never axis 0 (partitions).
struct axes {
  std::vector<int64_t> list;
  axes(int64_t a) : list{a} {}  // NOLINT: implicit on purpose
  axes(std::initializer_list<int64_t> l) : list(l) {}
  axes(std::vector<int64_t> l) : list(std::move(l)) {}  // NOLINT
};

// The shape rule of a reduction over `axes` of a tile of `shape`: the axes normalised (negative
// ones count from the end; sorted), the result's shape with reduced dims as size 1, and the
// dims of it that the returned view keeps: all with keepdims, else all but the reduced ones,
// except that the last reduced dims stay (as size 1) while fewer than 2 dims would remain.
// Axis 0 (partitions), an axis out of range or listed twice, or no axis are UserErrors
// "reduce-axis".
struct Reduction {
  std::vector<int64_t> axes, shape, kept;
};
Reduction reduction(const std::vector<int64_t>& shape, const std::vector<int64_t>& axes,
                    bool keepdims, const Span& span);

// Reductions over free axes (nl.reduce). keepdims=false drops the reduced dims from the
// returned view unless that leaves fewer than 2 dims: a [P,F] tile reduces to [P,1].
struct reduce_fn {
  const char* op;            // nl.reduce op: add, maximum, minimum, mean
  std::optional<AluOp> alu;  // the ALU operator (none for mean)
  tensor operator()(const tensor& x, axes axis, std::optional<DType> dtype = std::nullopt,
                    bool keepdims = false, Span span = Span::current()) const;
};

inline constexpr copy_fn copy{};

inline constexpr unary_fn exp{ActFunc::exp}, log{ActFunc::log}, tanh{ActFunc::tanh},
    sqrt{ActFunc::sqrt}, rsqrt{ActFunc::rsqrt, AluOp::rsqrt}, sigmoid{ActFunc::sigmoid},
    silu{ActFunc::silu}, gelu{ActFunc::gelu}, gelu_apprx_tanh{ActFunc::gelu_apprx_tanh},
    relu{ActFunc::relu}, abs{ActFunc::abs, AluOp::abs}, negative{ActFunc::negative},
    reciprocal{ActFunc::reciprocal, AluOp::reciprocal}, square{ActFunc::square}, sin{ActFunc::sin},
    cos{ActFunc::cos}, erf{ActFunc::erf}, softplus{ActFunc::softplus}, sign{ActFunc::sign},
    floor{ActFunc::floor}, ceil{ActFunc::ceil}, trunc{ActFunc::trunc}, tan{ActFunc::tan},
    arctan{ActFunc::arctan}, gelu_dx{ActFunc::gelu_dx},
    gelu_apprx_sigmoid{ActFunc::gelu_apprx_sigmoid},
    gelu_apprx_sigmoid_dx{ActFunc::gelu_apprx_sigmoid_dx}, silu_dx{ActFunc::silu_dx},
    mish{ActFunc::mish}, erf_dx{ActFunc::erf_dx};

inline constexpr binary_fn add{AluOp::add}, subtract{AluOp::subtract}, multiply{AluOp::multiply},
    divide{AluOp::divide}, maximum{AluOp::maximum}, minimum{AluOp::minimum}, power{AluOp::power},
    mod{AluOp::mod}, fmod{AluOp::fmod},
    equal{AluOp::equal}, not_equal{AluOp::not_equal}, greater{AluOp::greater},
    greater_equal{AluOp::greater_equal}, less{AluOp::less}, less_equal{AluOp::less_equal},
    logical_and{AluOp::logical_and}, logical_or{AluOp::logical_or}, logical_xor{AluOp::logical_xor},
    bitwise_and{AluOp::bitwise_and}, bitwise_or{AluOp::bitwise_or}, bitwise_xor{AluOp::bitwise_xor},
    left_shift{AluOp::left_shift}, right_shift{AluOp::right_shift};

inline constexpr reduce_fn sum{"add", AluOp::add}, max{"maximum", AluOp::maximum},
    min{"minimum", AluOp::minimum}, mean{"mean", std::nullopt};

// The no-op ALU stage (an ISA operand only).
inline constexpr AluOp bypass = AluOp::bypass;

// cond != 0 ? x : y, element-wise with broadcasting; x and y may be scalars.
tensor where(const tensor& cond, operand x, operand y, std::optional<DType> dtype = std::nullopt,
             Span span = Span::current());

// ---- SPMD programs ---------------------------------------------------------------------------

// This program's index along grid axis `axis` (0..3), and the grid size along it.
index program_id(int axis = 0, Span span = Span::current());
index num_programs(int axis = 0, Span span = Span::current());

// ---- the dynamic half: values read at run time ---------------------------------------------

// What an indirect DMA does with a row index outside the tensor: a UserError naming the index
// (error), or leave that row alone (skip).
enum class oob_mode { error = 0, skip = 1 };

// Rows chosen at run time: result row p is row rows[p, 0] of src's first kept dim (src is an HBM
// tensor or a view of one; a first kept dim sliced a:b:k names row a + k * rows[p, 0]); rows is
// an integer [P, 1] SBUF tile. The result is [P, other kept dims of src...] in SBUF.
tensor load_rows(const tensor& src, const tensor& rows, oob_mode oob = oob_mode::error,
                 std::optional<DType> dtype = std::nullopt, Span span = Span::current());
// The inverse: row p of value goes to row rows[p, 0] of dst's first kept dim.
void store_rows(const tensor& dst, const tensor& rows, const tensor& value,
                oob_mode oob = oob_mode::error, Span span = Span::current());

// NKI's gather_flattened: result[p, j...] = data[p, flat free index indices[p, j...]] (each
// partition gathers from its own row of data, free dims flattened); the result has indices'
// shape and data's dtype (or dtype). An index outside the row is a fault naming it.
tensor gather_flattened(const tensor& data, const tensor& indices,
                        std::optional<DType> dtype = std::nullopt, Span span = Span::current());

// ---- random numbers (isa::rng and friends; docs/random.md) ----

// A new SBUF tile of uniform values in [0, 1) (float dtypes) or 32 random bits (integer dtypes).
tensor rand(std::vector<int64_t> shape, DType dtype = DType::float32,
            Span span = Span::current());
// Seeds the kernel's generator with a number or a [1, 1] integer tile (isa::set_rng_seed).
void random_seed(operand seed, Span span = Span::current());
// x with each element zeroed with probability rate (a number or a [P, 1] tile), not rescaled.
tensor dropout(const tensor& x, operand rate, std::optional<DType> dtype = std::nullopt,
               Span span = Span::current());

// Registers: 32-bit integers known at run time, usable in index expressions (dynamic offsets:
// t(nl::ds(r * 128, 128))) and as runtime loop bounds. A register is an nl::index naming it.
index register_alloc(int64_t init = 0, Span span = Span::current());
// reg = the one element of src (SBUF or HBM; integer values, floats rounded).
void register_load(const index& reg, const tensor& src, Span span = Span::current());
// dst (one element) = reg.
void register_store(const tensor& dst, const index& reg, Span span = Span::current());
// reg = value, a constant or another register.
void register_move(const index& reg, const index& value, Span span = Span::current());

// NKI's access pattern t.ap(pattern, offset, scalar_offset, indirect_dim): the view of t's whole
// buffer that walks pattern = {{stride, count}, ...} (strides in elements of the row-major
// buffer) from element `offset` (default: t's own first element), moved by scalar_offset (a
// register, usually) times the element stride of dim indirect_dim. Each entry walks one buffer
// dim, in dim order (its stride a multiple of that dim's stride, staying inside the dim); on
// chip the first entry walks the partitions. Dims no entry walks are fixed at the offset. A
// pattern that splits or merges the buffer's dims walks the storage seen as the row-major shape
// whose dims are its entries (Access::storage); one whose strides do not nest (each a multiple
// of the next) or whose entries overlap is a UserError "access-pattern".
tensor ap(const tensor& t, const std::vector<std::pair<int64_t, int64_t>>& pattern,
          std::optional<index> offset = std::nullopt,
          std::optional<index> scalar_offset = std::nullopt, int64_t indirect_dim = 0,
          Span span = Span::current());
// The bytes of on-chip tile t's buffer read as `dtype` (NKI's t.view(dtype) and
// t.ap(..., dtype=) of a tile): each partition's bytes are row_bytes / sizeof(dtype) elements of
// dtype, which pattern (first entry: the partitions, stride row_bytes / sizeof(dtype)) and
// offset (default: t's first element) count. A bit cast: no value changes, no copy.
tensor ap_as(const tensor& t, DType dtype, const std::vector<std::pair<int64_t, int64_t>>& pattern,
             std::optional<index> offset = std::nullopt, Span span = Span::current());

// Runtime loops (NKI's nl.fori_loop / nl.while_loop): body(i) for i in range(lower, upper, step)
// with the trip count read when the loop starts; body(r) while r != 0, r = init first and then
// what body returns (a register or a constant). Bodies are traced once.
template <typename F>
void fori_loop(index lower, index upper, F&& body, int64_t step = 1,
               Span span = Span::current()) {
  for (index i : dynamic_range(std::move(lower), std::move(upper), step, span)) body(i);
}
void while_loop_begin(const index& reg, Span span);  // (implementation of while_loop)
void while_loop_end(const index& reg, const index& next, Span span);
template <typename F>
void while_loop(index init, F&& body, Span span = Span::current()) {
  index r = register_alloc(0, span);
  register_move(r, init, span);
  while_loop_begin(r, span);
  index next = body(r);
  while_loop_end(r, next, span);
}

}  // namespace neuron::nl
