// lower: access patterns, engines, typed arguments and tensors, computed by hand.
#include <doctest/doctest.h>

#include "neuron/codegen/pipeline.hpp"
#include "passes/kernel_builder.hpp"

using namespace neuron;
using namespace neuron::tb;

using Dims = std::vector<AccessPattern::Dim>;

TEST_CASE("lower: a tiled exp kernel keeps its loop and rotates its tile") {
  auto a = hbm("a", {256, 64}), o = hbm("o", {256, 64});
  auto t = sbuf("t", {128, 64});
  Affine i0 = Affine::var("i0");
  Access rows_a = view(a, {ds(i0 * 128, 128), ds(0, 64)});
  Access rows_o = view(o, {ds(i0 * 128, 128), ds(0, 64)});
  Kernel k = kernel(
      {a}, {o},
      {affine_for("i0", 2,
                  {alloc(t), op(Opcode::nl_load, {{"dst", whole(t)}, {"src", rows_a}}),
                   op(Opcode::nl_unary, {{"dst", whole(t)}, {"x", whole(t)}, {"func", s("exp")}}),
                   op(Opcode::nl_store, {{"dst", rows_o}, {"src", whole(t)}})})},
      "exp_kernel");
  Compiled c = compile(k);
  const Program& p = c.program;
  CHECK(p.name == "exp_kernel");
  CHECK(p.target == "trn2");
  REQUIRE(p.tensors.size() == 2);
  CHECK(p.tensors[0].name == "a");
  CHECK(p.tensors[0].role == TensorDecl::Role::input);
  CHECK(p.tensors[1].name == "o");
  CHECK(p.tensors[1].role == TensorDecl::Role::output);
  CHECK(p.num_instrs == 3);
  CHECK(p.sbuf_bytes == 2 * 256);  // two slots of 64 fp32
  CHECK(p.psum_bytes == 0);

  REQUIRE(p.body.size() == 1);
  const ProgNode& loop = p.body[0];
  CHECK(loop.kind == ProgNode::Kind::loop);
  CHECK(loop.var == "i0");
  CHECK(loop.extent == 2);
  CHECK(loop.loop_kind == LoopKind::affine);
  REQUIRE(loop.body.size() == 3);

  const Instr& load = loop.body[0].instr;
  CHECK(load.op == Opcode::dma_copy);
  CHECK(load.engine == Engine::dma);
  CHECK(load.id == 0);
  REQUIRE(load.src.size() == 1);
  CHECK(load.src[0].memory == Memory::shared_hbm);
  CHECK(load.src[0].tensor == 0);
  CHECK(load.src[0].offset == i0 * (128 * 64));
  CHECK(load.src[0].dims == Dims{{64, 128}, {1, 64}});
  CHECK(load.dst.memory == Memory::sbuf);
  CHECK(load.dst.partition == Affine(0));
  CHECK(load.dst.offset == Affine(0));
  CHECK(load.dst.dims == Dims{{1, 128}, {1, 64}});
  CHECK(load.dst.rotation == Rotation{"i0", 2, 256});

  const Instr& act = loop.body[1].instr;
  CHECK(act.op == Opcode::activation);
  CHECK(act.engine == Engine::scalar);
  CHECK(act.id == 1);
  CHECK(act.args.func == ActFunc::exp);
  CHECK(act.args.scale == 1.0);
  CHECK_FALSE(act.args.bias_tile);
  CHECK(act.src.size() == 1);

  const Instr& store = loop.body[2].instr;
  CHECK(store.id == 2);
  CHECK(store.dst.tensor == 1);
  CHECK(store.dst.offset == i0 * 8192);
}

TEST_CASE("lower: sliced on-chip views fold starts and dropped dims into the offset") {
  auto pad = sbuf("pad", {128, 16});                    // 64 B at offset 0
  auto s3 = sbuf("s3", {128, 4, 32}, DType::bfloat16);  // at offset 64
  auto d = sbuf("d", {32, 8}, DType::bfloat16);
  // s3[32:64, 2, 8:24:2]: partitions 32..63, dim 1 dropped at index 2, every other element.
  Access v = view(s3, {ds(32, 32), ds(2, 1, 1, false), ds(8, 8, 2)});
  Kernel k = kernel(
      {}, {},
      {alloc(pad), alloc(s3), alloc(d), op(Opcode::tensor_copy, {{"dst", whole(d)}, {"src", v}})});
  Program p = lower(allocate(k, "trn2"), "trn2");
  REQUIRE(p.body.size() == 1);
  const Instr& in = p.body[0].instr;
  CHECK(in.engine == Engine::vector);
  REQUIRE(in.src.size() == 1);
  const AccessPattern& ap = in.src[0];
  CHECK(ap.partition == Affine(32));
  // 64 (buffer) + 2 * 32 elements * 2 B (dropped dim) + 8 * 2 B (start of the last dim).
  CHECK(ap.offset == Affine(64 + 128 + 16));
  CHECK(ap.dims == Dims{{1, 32}, {2, 8}});
  CHECK(ap.dtype == DType::bfloat16);
  CHECK(ap.rotation == Rotation{});
  // d sits after s3: 64 + 4*32*2 = 320, already 64-aligned.
  CHECK(in.dst.offset == Affine(320));
  CHECK(p.sbuf_bytes == 320 + 16);
}

TEST_CASE("lower: typed arguments and source operand order") {
  auto x = sbuf("x", {128, 16}), c = sbuf("c", {128, 1}), o = sbuf("o", {128, 16});
  auto pr = psum("pr", {128, 16});
  // A private HBM buffer allocated in the body becomes a scratch tensor.
  auto scratch = buf("scratch", Memory::hbm, {128, 16});
  Kernel k = kernel({}, {},
                    {alloc(x), alloc(c), alloc(o), alloc(pr), alloc(scratch),
                     op(Opcode::tensor_scalar, {{"dst", whole(o)},
                                                {"data", whole(x)},
                                                {"op0", s("subtract")},
                                                {"operand0", whole(c)},
                                                {"reverse0", i(1)},
                                                {"op1", s("multiply")},
                                                {"operand1", 0.5}}),
                     op(Opcode::tensor_reduce, {{"dst", whole(c)},
                                                {"data", whole(x)},
                                                {"op", s("maximum")},
                                                {"axes", std::vector<int64_t>{1}},
                                                {"negate", i(1)}}),
                     op(Opcode::activation, {{"dst", whole(o)},
                                             {"data", whole(pr)},
                                             {"func", s("gelu")},
                                             {"bias", whole(c)},
                                             {"scale", 2.0},
                                             {"reduce_op", s("add")},
                                             {"reduce_res", whole(c)}}),
                     op(Opcode::dma_copy, {{"dst", whole(scratch)}, {"src", whole(o)}}),
                     op(Opcode::iota, {{"dst", whole(o)},
                                       {"pattern", std::vector<int64_t>{1, 16}},
                                       {"offset", i(3)},
                                       {"channel_multiplier", i(16)}})});
  Program p = lower(allocate(k, "trn2"), "trn2");
  REQUIRE(p.tensors.size() == 1);
  CHECK(p.tensors[0].role == TensorDecl::Role::scratch);
  CHECK(p.tensors[0].memory == Memory::hbm);
  REQUIRE(p.body.size() == 5);

  const Instr& ts = p.body[0].instr;
  CHECK(ts.args.op0 == AluOp::subtract);
  CHECK(ts.args.reverse0);
  CHECK(ts.args.operand0_tile);
  CHECK(ts.args.op1 == AluOp::multiply);
  CHECK_FALSE(ts.args.operand1_tile);
  CHECK(ts.args.imm1 == 0.5);
  REQUIRE(ts.src.size() == 2);
  CHECK(ts.src[0].offset == Affine(0));   // x
  CHECK(ts.src[1].offset == Affine(64));  // c
  CHECK(ts.src[1].dims == Dims{{1, 128}, {1, 1}});

  const Instr& tr = p.body[1].instr;
  CHECK(tr.args.reduce_op == AluOp::maximum);
  CHECK(tr.args.axes == std::vector<int>{1});
  CHECK(tr.args.negate);

  const Instr& act = p.body[2].instr;
  CHECK(act.engine == Engine::scalar);
  CHECK(act.args.func == ActFunc::gelu);
  CHECK(act.args.bias_tile);
  CHECK_FALSE(act.args.scale_tile);
  CHECK(act.args.scale == 2.0);
  CHECK(act.args.reduce_op == AluOp::add);
  CHECK(act.has_reduce_res);
  REQUIRE(act.src.size() == 2);
  CHECK(act.src[0].memory == Memory::psum);
  CHECK(act.src[0].offset == Affine(0));  // first PSUM bank

  const Instr& dma = p.body[3].instr;
  CHECK(dma.engine == Engine::dma);
  CHECK(dma.dst.tensor == 0);
  CHECK(dma.dst.dims == Dims{{16, 128}, {1, 16}});

  const Instr& io = p.body[4].instr;
  CHECK(io.engine == Engine::gpsimd);
  CHECK(io.args.pattern == std::vector<int64_t>{1, 16});
  CHECK(io.args.offset == 3);
  CHECK(io.args.channel_multiplier == 16);
  CHECK(io.id == 4);
}

TEST_CASE("lower: an nl helper that skipped legalize is an internal error") {
  auto a = sbuf("a", {128, 4});
  Kernel k =
      kernel({}, {}, {alloc(a), op(Opcode::nl_copy, {{"dst", whole(a)}, {"src", whole(a)}})});
  CHECK_THROWS_AS(lower(allocate(k, "trn2"), "trn2"), InternalError);
}

TEST_CASE("compile: pass reports in pipeline order, unchanged passes marked") {
  auto a = sbuf("a", {128, 4});
  Kernel k = kernel({}, {}, {alloc(a), op(Opcode::memset, {{"dst", whole(a)}, {"value", 1.0}})});
  Compiled c = compile(k);
  REQUIRE(c.passes.size() == 6);
  CHECK(c.passes[0].name == "verify");
  CHECK_FALSE(c.passes[0].changed);
  CHECK(c.passes[1].name == "legalize");
  CHECK_FALSE(c.passes[1].changed);  // already ISA-only
  CHECK(c.passes[2].name == "fresh_psum");
  CHECK_FALSE(c.passes[2].changed);  // no auto-accumulating matmul
  CHECK(c.passes[3].name == "verify_isa");
  CHECK(c.passes[4].name == "allocate");
  CHECK(c.passes[4].changed);
  CHECK(c.passes[5].name == "lower");
  CHECK(c.program.num_instrs == 1);
  CHECK_THROWS_AS(compile(k, CompileOptions{"trn9"}), UserError);
}
