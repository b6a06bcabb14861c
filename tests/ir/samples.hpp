// Hand-built kernels shared by the IR text and equality tests.
#pragma once
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "neuron/ir/ir.hpp"

namespace neuron::samples {

inline std::shared_ptr<Buffer> buf(std::string name, Memory m, std::vector<int64_t> shape,
                                   DType t = DType::float32) {
  auto b = std::make_shared<Buffer>();
  b->name = std::move(name);
  b->memory = m;
  b->shape = std::move(shape);
  b->dtype = t;
  return b;
}

inline Access view(BufferPtr b, std::vector<DimSlice> dims) {
  Access a;
  a.buffer = std::move(b);
  a.dims = std::move(dims);
  return a;
}

inline DimSlice sl(Affine start, int64_t size, int64_t step = 1) {
  return DimSlice{std::move(start), size, step, true};
}
inline DimSlice drop(Affine start) {
  return DimSlice{std::move(start), 1, 1, false};
}

inline Affine v(const char* name, int64_t coeff = 1) {
  return Affine::var(name, coeff);
}

// The vector-add kernel of the text-form sketch.
inline Kernel vector_add() {
  auto a = buf("a", Memory::shared_hbm, {1024, 512});
  auto b = buf("b", Memory::shared_hbm, {1024, 512});
  auto out = buf("out", Memory::shared_hbm, {1024, 512});
  auto t0 = buf("t0", Memory::sbuf, {128, 512});
  auto t1 = buf("t1", Memory::sbuf, {128, 512});
  auto rows = sl(v("i0", 128), 128);
  auto body =
      For::make("i0", 8, LoopKind::affine,
                Block::make({
                    Alloc::make(t0),
                    Op::make(Opcode::nl_load,
                             {{"dst", Access::whole(t0)}, {"src", view(a, {rows, sl(0, 512)})}}),
                    Alloc::make(t1),
                    Op::make(Opcode::nl_load,
                             {{"dst", Access::whole(t1)}, {"src", view(b, {rows, sl(0, 512)})}}),
                    Op::make(Opcode::nl_binary, {{"dst", Access::whole(t0)},
                                                 {"x", Access::whole(t0)},
                                                 {"y", Access::whole(t1)},
                                                 {"op", std::string("add")}}),
                    Op::make(Opcode::nl_binary, {{"dst", Access::whole(t1)},
                                                 {"x", Access::whole(t0)},
                                                 {"y", 2.5},
                                                 {"op", std::string("multiply")}}),
                    Op::make(Opcode::nl_store,
                             {{"dst", view(out, {rows, sl(0, 512)})}, {"src", Access::whole(t1)}}),
                }));
  return Kernel{"vector_add", {a, b}, {out}, Block::make({body}), {}};
}

// A kernel touching every statement kind, value kind, memory and dtype, dropped dims, step 0,
// negative coefficients, program ids, allocated buffers, nested loops of both kinds, float edge
// cases, awkward strings and names, and every opcode.
inline Kernel everything() {
  std::vector<BufferPtr> inputs;
  const DType all[] = {
#define X(e, name, bytes, is_float, is_signed) DType::e,
      NEURON_DTYPES(X)
#undef X
  };
  for (DType t : all)
    inputs.push_back(buf(fmt::format("in_{}", dtype_name(t)), Memory::shared_hbm, {256, 64}, t));
  auto x = inputs[0];
  auto odd = buf("my buffer \"1\"", Memory::shared_hbm, {4});
  inputs.push_back(odd);
  auto out = buf("out", Memory::shared_hbm, {256, 64}, DType::bfloat16);
  auto scalar_out = buf("inf", Memory::shared_hbm, {});

  auto scratch = buf("scratch", Memory::hbm, {2, 256, 64});
  auto tile = buf("tile", Memory::sbuf, {128, 64});
  tile->offset = 1024;
  tile->slots = 2;
  tile->slot_var = "i1";
  auto acc = buf("acc", Memory::psum, {128, 64});
  acc->offset = 0;
  auto col = buf("col", Memory::sbuf, {128, 1}, DType::float32);
  col->offset = 0;
  col->slots = 3;  // slots without a slot variable still round-trips

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Arg> floats = {
      {"a", 0.1},  {"b", 1e-30},       {"c", -0.0},   {"d", inf},
      {"e", -inf}, {"f", nan},         {"g", 5e-324}, {"h", 1.7976931348623157e308},
      {"i", 1e16}, {"j", 123456789.0}, {"k", -2.5},   {"l", 1.0 / 3.0},
      {"m", 0.0}};
  std::vector<Arg> misc = {
      {"i_min", std::numeric_limits<int64_t>::min()},
      {"i_max", std::numeric_limits<int64_t>::max()},
      {"zero", int64_t{0}},
      {"neg", int64_t{-7}},
      {"s", std::string("quote \" backslash \\ newline \n tab \t ctrl \x01 utf8 \xc3\xa9")},
      {"empty", std::string()},
      {"list", std::vector<int64_t>{1, -2, 3}},
      {"nolist", std::vector<int64_t>{}},
      {"scalar_view", view(scalar_out, {})}};

  std::vector<StmtPtr> inner = {
      // step 0 broadcast, a dropped dim, negative coefficients and program ids.
      Op::make(Opcode::dma_copy,
               {{"dst", Access::whole(tile)},
                {"src", view(scratch, {drop(v("i0")), sl(v("pid0", 128) - v("i1", 2) + 3, 128, 0),
                                       sl(0, 64)})}}),
      Op::make(Opcode::tensor_scalar, {{"dst", Access::whole(tile)},
                                       {"data", Access::whole(tile)},
                                       {"op0", std::string("multiply")},
                                       {"operand0", view(col, {sl(0, 128), sl(0, 64, 0)})},
                                       {"reverse0", int64_t{0}}}),
      Op::make(Opcode::tensor_copy,
               {{"dst", view(tile, {sl(-v("i1") + 127, 64, -1), sl(v("npid0"), 32, 2)})},
                {"src", view(x, {sl(v("i0", -64) + v("i1") - 1, 64, 3), drop(5)})}}),
      Op::make(Opcode::memset, floats),
      Op::make(Opcode::device_print, misc),
  };
  std::vector<StmtPtr> loop0 = {
      Alloc::make(acc),
      Alloc::make(tile),
      For::make("i1", 4, LoopKind::sequential, Block::make(inner)),
      Block::make({Op::make(Opcode::nc_matmul, {{"dst", Access::whole(acc)},
                                                {"stationary", view(tile, {sl(0, 128), sl(0, 64)})},
                                                {"moving", Access::whole(tile)},
                                                {"accumulate", int64_t{-1}}})}),
      // a For whose body is not a Block
      For::make("i2", 1, LoopKind::affine,
                Op::make(Opcode::nl_store, {{"dst", view(out, {sl(v("i2", 128), 128), sl(0, 64)})},
                                            {"src", Access::whole(acc)}})),
  };
  std::vector<StmtPtr> top = {
      Alloc::make(scratch),
      Alloc::make(col),
      For::make("i0", 2, LoopKind::affine, Block::make(loop0)),
      Block::make({}),
  };
#define X(e, name, level, engine, streams, signature) top.push_back(Op::make(Opcode::e, {}));
  NEURON_OPCODES(X)
#undef X
  return Kernel{"everything", inputs, {out, scalar_out}, Block::make(top), {}};
}

}  // namespace neuron::samples
