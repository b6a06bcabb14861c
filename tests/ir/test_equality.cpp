// Structural equality and hashing of the Kernel IR: field sensitivity and span blindness.
#include <doctest/doctest.h>

#include <functional>

#include "ir/samples.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"

using namespace neuron;
using namespace neuron::samples;

namespace {

// A small kernel whose every interesting field can be varied by one knob.
struct Knobs {
  std::vector<int64_t> shape = {128, 64};
  DType dtype = DType::float32;
  int64_t coeff = 128;
  double imm = 2.5;
  int64_t flag = 1;
  std::string op = "multiply";
  std::vector<int64_t> axes = {1};
  LoopKind kind = LoopKind::affine;
  int64_t extent = 4;
  std::string var = "i0";
  int64_t offset = 512;
  int64_t slots = 2;
  std::string slot_var = "i0";
  int core = -1;
  Memory memory = Memory::sbuf;
  std::string tile_name = "t";
  int64_t step = 1;
  bool keep = true;
  std::string arg_name = "y";
  bool int_imm = false;  // the immediate as an int instead of a float
  Opcode code = Opcode::nl_binary;
  std::string kernel_name = "k";
  int spans = 0;  // different spans everywhere
};

Kernel build(const Knobs& n) {
  Span sp = n.spans ? Span{"other.cpp", 100 + n.spans, 7} : Span{};
  auto in = buf("in", Memory::shared_hbm, {512, 64});
  auto out = buf("out", Memory::shared_hbm, {512, 64});
  const_cast<Buffer&>(*in).span = sp;
  auto t = buf(n.tile_name, n.memory, n.shape, n.dtype);
  t->offset = n.offset;
  t->slots = n.slots;
  t->slot_var = n.slot_var;
  t->core = n.core;
  t->span = sp;
  Access src = view(in, {sl(Affine::var(n.var, n.coeff), 128), sl(0, 64, n.step)});
  src.dims[1].keep = n.keep;
  Arg imm{n.arg_name, n.imm};
  if (n.int_imm) imm.value = static_cast<int64_t>(n.imm);
  auto body = Block::make(
      {Alloc::make(t, sp), Op::make(Opcode::nl_load, {{"dst", Access::whole(t)}, {"src", src}}, sp),
       Op::make(n.code,
                {{"dst", Access::whole(t)},
                 {"x", Access::whole(t)},
                 imm,
                 {"op", n.op},
                 {"axes", n.axes},
                 {"flag", n.flag}},
                sp),
       Op::make(Opcode::nl_store,
                {{"dst", view(out, {sl(Affine::var(n.var, 128), 128), sl(0, 64)})},
                 {"src", Access::whole(t)}},
                sp)},
      sp);
  return Kernel{n.kernel_name,
                {in},
                {out},
                Block::make({For::make(n.var, n.extent, n.kind, body, sp)}, sp),
                sp};
}

}  // namespace

TEST_CASE("kernels built twice are equal and hash equal") {
  Kernel a = build({}), b = build({});
  CHECK(equal(a, b));
  CHECK(hash_value(a) == hash_value(b));
  CHECK(equal(a.body, b.body));
  CHECK(hash_value(a.body) == hash_value(b.body));
  CHECK(equal(everything(), everything()));
  CHECK(hash_value(everything()) == hash_value(everything()));
  CHECK(equal(vector_add(), vector_add()));
}

TEST_CASE("spans never take part in equality or hashing") {
  Knobs n;
  n.spans = 1;
  Kernel a = build({}), b = build(n);
  n.spans = 2;
  Kernel c = build(n);
  CHECK(equal(a, b));
  CHECK(equal(b, c));
  CHECK(hash_value(a) == hash_value(b));
  CHECK(hash_value(b) == hash_value(c));
}

TEST_CASE("a difference in any one field makes kernels unequal") {
  struct Case {
    const char* what;
    std::function<void(Knobs&)> change;
  };
  std::vector<Case> cases = {
      {"shape",
       [](Knobs& n) {
         n.shape = {128, 32};
       }},
      {"dtype", [](Knobs& n) { n.dtype = DType::bfloat16; }},
      {"affine coefficient", [](Knobs& n) { n.coeff = 64; }},
      {"affine sign", [](Knobs& n) { n.coeff = -128; }},
      {"float arg value", [](Knobs& n) { n.imm = 2.5000000000000004; }},
      {"float zero sign", [](Knobs& n) { n.imm = -0.0; }},
      {"int arg value", [](Knobs& n) { n.flag = 0; }},
      {"int vs float arg",
       [](Knobs& n) {
         n.int_imm = true;
         n.imm = 2;
       }},
      {"string arg", [](Knobs& n) { n.op = "add"; }},
      {"int list arg",
       [](Knobs& n) {
         n.axes = {1, 2};
       }},
      {"arg name", [](Knobs& n) { n.arg_name = "z"; }},
      {"opcode", [](Knobs& n) { n.code = Opcode::nl_where; }},
      {"loop kind", [](Knobs& n) { n.kind = LoopKind::sequential; }},
      {"loop extent", [](Knobs& n) { n.extent = 5; }},
      {"loop variable", [](Knobs& n) { n.var = "i1"; }},
      {"buffer offset", [](Knobs& n) { n.offset = 1024; }},
      {"buffer slots", [](Knobs& n) { n.slots = 1; }},
      {"buffer slot var", [](Knobs& n) { n.slot_var = ""; }},
      {"buffer core", [](Knobs& n) { n.core = 1; }},
      {"buffer memory", [](Knobs& n) { n.memory = Memory::psum; }},
      {"buffer name", [](Knobs& n) { n.tile_name = "u"; }},
      {"slice step", [](Knobs& n) { n.step = 0; }},
      {"slice keep", [](Knobs& n) { n.keep = false; }},
      {"kernel name", [](Knobs& n) { n.kernel_name = "k2"; }},
  };
  Kernel base = build({});
  for (auto& c : cases) {
    CAPTURE(c.what);
    Knobs n;
    c.change(n);
    Kernel other = build(n);
    CHECK_FALSE(equal(base, other));
    CHECK_FALSE(equal(other, base));
    CHECK_FALSE((equal(base.body, other.body) && base.name == other.name));
    // Not guaranteed by hashing in general, but these all differ and a collision here would
    // mean a field is left out of the hash.
    CHECK(hash_value(base) != hash_value(other));
    // Equal-when-equal is the contract; the text form must also tell them apart.
    CHECK(print(base) != print(other));
  }
}

TEST_CASE("statement shape differences are unequal") {
  auto t = buf("t", Memory::sbuf, {4, 4});
  auto op = Op::make(Opcode::memset, {{"dst", Access::whole(t)}, {"value", 0.0}});
  auto a = Block::make({Alloc::make(t), op});
  auto b = Block::make({Alloc::make(t)});
  auto c = Block::make({Alloc::make(t), Block::make({op})});
  CHECK_FALSE(equal(a, b));
  CHECK_FALSE(equal(a, c));
  CHECK_FALSE(equal(a, StmtPtr{}));
  CHECK(equal(StmtPtr{}, StmtPtr{}));
  CHECK(equal(a, Block::make({Alloc::make(t), op})));
  // NaN immediates compare equal to each other (the text form keeps no payload).
  double nan = std::numeric_limits<double>::quiet_NaN();
  auto n1 = Op::make(Opcode::memset, {{"value", nan}});
  auto n2 = Op::make(Opcode::memset, {{"value", -nan}});
  CHECK(equal(n1, n2));
  CHECK(hash_value(n1) == hash_value(n2));
  // Value kinds never compare across: 2 (int) is not 2.0 (float), nor [2].
  auto i2 = Op::make(Opcode::memset, {{"value", int64_t{2}}});
  auto f2 = Op::make(Opcode::memset, {{"value", 2.0}});
  auto l2 = Op::make(Opcode::memset, {{"value", std::vector<int64_t>{2}}});
  CHECK_FALSE(equal(i2, f2));
  CHECK_FALSE(equal(i2, l2));
  CHECK(hash_value(i2) != hash_value(f2));
  // Views compare their buffers by value, not by pointer.
  auto t2 = buf("t", Memory::sbuf, {4, 4});
  CHECK(equal(Access::whole(t), Access::whole(t2)));
  t2->offset = 0;
  CHECK_FALSE(equal(Access::whole(t), Access::whole(t2)));
}
