// The engine-program listing and the access-pattern helpers.
#include <doctest/doctest.h>

#include "neuron/codegen/program.hpp"

using namespace neuron;

namespace {

AccessPattern tile(int64_t offset, std::vector<AccessPattern::Dim> dims) {
  AccessPattern ap;
  ap.memory = Memory::sbuf;
  ap.offset = offset;
  ap.dims = std::move(dims);
  return ap;
}

}  // namespace

TEST_CASE("access pattern elements and shape") {
  AccessPattern ap = tile(0, {{1, 128}, {512, 4}, {1, 64}});
  CHECK(ap.elements() == 128 * 4 * 64);
  CHECK(ap.shape() == std::vector<int64_t>{128, 4, 64});
  CHECK(AccessPattern{}.elements() == 1);
  CHECK(AccessPattern{}.shape().empty());
}

TEST_CASE("engine names") {
  CHECK(engine_name(Engine::tensor) == "tensor");
  CHECK(engine_name(Engine::vector) == "vector");
  CHECK(engine_name(Engine::scalar) == "scalar");
  CHECK(engine_name(Engine::gpsimd) == "gpsimd");
  CHECK(engine_name(Engine::dma) == "dma");
  CHECK(engine_name(Engine::none) == "none");
}

TEST_CASE("a program lists tensors, loops and one instruction per line") {
  Program p;
  p.name = "scale";
  p.target = "trn2";
  p.sbuf_bytes = 4096;
  p.num_instrs = 3;
  p.tensors = {{"a", Memory::shared_hbm, {1024, 512}, DType::float32, TensorDecl::Role::input},
               {"out", Memory::shared_hbm, {1024, 512}, DType::bfloat16, TensorDecl::Role::output}};

  Instr load;
  load.op = Opcode::dma_copy;
  load.engine = Engine::dma;
  load.dst = tile(0, {{1, 128}, {1, 512}});
  load.dst.rotation = Rotation{"i0", 2, 2048};
  AccessPattern src;
  src.memory = Memory::shared_hbm;
  src.tensor = 0;
  src.offset = Affine::var("i0", 65536);
  src.dims = {{512, 128}, {1, 512}};
  load.src = {src};
  load.id = 0;

  Instr mul;
  mul.op = Opcode::tensor_scalar;
  mul.engine = Engine::vector;
  mul.dst = tile(2048, {{1, 128}, {1, 512}});
  mul.src = {tile(0, {{1, 128}, {1, 512}})};
  mul.src[0].partition = 0;
  mul.args.op0 = AluOp::multiply;
  mul.args.imm0 = 2.0;
  mul.id = 1;

  Instr store;
  store.op = Opcode::dma_copy;
  store.engine = Engine::dma;
  store.dst = src;
  store.dst.tensor = 1;
  store.dst.dtype = DType::bfloat16;
  store.src = {tile(2048, {{0, 128}, {1, 512}})};
  store.id = 2;

  ProgNode loop;
  loop.kind = ProgNode::Kind::loop;
  loop.var = "i0";
  loop.extent = 8;
  for (auto* in : {&load, &mul, &store}) {
    ProgNode n;
    n.instr = *in;
    loop.body.push_back(n);
  }
  p.body = {loop};

  const char* expected =
      "program scale target=trn2 instrs=3 sbuf_bytes=4096 psum_bytes=0\n"
      "  tensor #0 a: float32[1024, 512] shared_hbm input\n"
      "  tensor #1 out: bfloat16[1024, 512] shared_hbm output\n"
      "  for i0 in affine_range(8) {\n"
      "    [0] dma dma_copy dst=sbuf:float32{p=0:+128 off=0 [1x512] rot=i0%2*2048} "
      "src=a#0:float32{off=i0*65536 [512x128, 1x512]}\n"
      "    [1] vector tensor_scalar dst=sbuf:float32{p=0:+128 off=2048 [1x512]} "
      "data=sbuf:float32{p=0:+128 off=0 [1x512]} op0=multiply operand0=2.0\n"
      "    [2] dma dma_copy dst=out#1:bfloat16{off=i0*65536 [512x128, 1x512]} "
      "src=sbuf:float32{p=0:+128:0 off=2048 [1x512]}\n"
      "  }\n";
  CHECK(print(p) == expected);
}

TEST_CASE("instruction arguments follow the IR keyword names") {
  Program p;
  p.name = "k";
  p.target = "trn1";
  auto add = [&](Instr in) {
    ProgNode n;
    n.instr = std::move(in);
    p.body.push_back(n);
  };
  Instr act;
  act.op = Opcode::activation;
  act.engine = Engine::scalar;
  act.dst = tile(0, {{1, 4}, {1, 8}});
  act.src = {tile(64, {{1, 4}, {1, 8}}), tile(128, {{1, 4}, {1, 1}})};
  act.args.func = ActFunc::exp;
  act.args.bias_tile = true;
  act.args.scale = 0.5;
  act.has_reduce_res = true;
  act.reduce_res = tile(256, {{1, 4}, {1, 1}});
  act.args.reduce_op = AluOp::add;
  add(act);
  Instr red;
  red.op = Opcode::tensor_reduce;
  red.dst = tile(0, {{1, 4}, {1, 1}});
  red.src = {tile(64, {{1, 4}, {1, 8}})};
  red.args.reduce_op = AluOp::maximum;
  red.args.axes = {1};
  red.args.negate = true;
  red.id = 1;
  add(red);
  Instr sel;
  sel.op = Opcode::affine_select;
  sel.engine = Engine::gpsimd;
  sel.dst = tile(0, {{1, 4}, {1, 8}});
  sel.src = {tile(64, {{1, 4}, {1, 8}})};
  sel.args.pattern = {-1, 8};
  sel.args.channel_multiplier = 1;
  sel.args.cmp_op = AluOp::greater_equal;
  sel.args.imm0 = -1e30;
  sel.id = 2;
  add(sel);
  Instr mm;
  mm.op = Opcode::nc_matmul;
  mm.engine = Engine::tensor;
  mm.dst = tile(0, {{1, 4}, {1, 8}});
  mm.dst.memory = Memory::psum;
  mm.src = {tile(0, {{1, 16}, {1, 4}}), tile(16, {{1, 16}, {1, 8}})};
  mm.args.accumulate = 1;
  mm.id = 3;
  add(mm);

  std::string text = print(p);
  CHECK(text.find(
            "[0] scalar activation dst=sbuf:float32{p=0:+4 off=0 [1x8]} "
            "data=sbuf:float32{p=0:+4 off=64 [1x8]} bias=sbuf:float32{p=0:+4 off=128 [1x1]} "
            "reduce_res=sbuf:float32{p=0:+4 off=256 [1x1]} func=exp scale=0.5 reduce_op=add\n") !=
        std::string::npos);
  CHECK(text.find("[1] vector tensor_reduce dst=sbuf:float32{p=0:+4 off=0 [1x1]} "
                  "data=sbuf:float32{p=0:+4 off=64 [1x8]} op=maximum axes=[1] negate=1\n") !=
        std::string::npos);
  CHECK(text.find("[2] gpsimd affine_select dst=sbuf:float32{p=0:+4 off=0 [1x8]} "
                  "on_true=sbuf:float32{p=0:+4 off=64 [1x8]} pattern=[-1, 8] "
                  "channel_multiplier=1 cmp_op=greater_equal on_false=-1e+30\n") !=
        std::string::npos);
  CHECK(
      text.find(
          "[3] tensor nc_matmul dst=psum:float32{p=0:+4 off=0 [1x8]} "
          "stationary=sbuf:float32{p=0:+16 off=0 [1x4]} moving=sbuf:float32{p=0:+16 off=16 [1x8]} "
          "accumulate=1\n") != std::string::npos);
}
