// legalize: each nl helper expands to the ISA sequence written out by hand here.
#include <doctest/doctest.h>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"
#include "passes/kernel_builder.hpp"

using namespace neuron;
using namespace neuron::tb;

namespace {

void check_same(const Kernel& got, const Kernel& want) {
  INFO("got:\n" << print(got) << "\nwant:\n" << print(want));
  CHECK(equal(got, want));
}

Access column_bcast(BufferPtr b, int64_t p, int64_t f) {
  return view(std::move(b), {ds(0, p), ds(0, f, 0)});
}

}  // namespace

TEST_CASE("legalize: load/store become dma_copy and ISA ops pass through untouched") {
  auto a = hbm("a", {128, 64}), o = hbm("o", {128, 64});
  auto t = sbuf("t", {128, 64});
  Kernel k =
      kernel({a}, {o},
             {alloc(t), op(Opcode::nl_load, {{"dst", whole(t)}, {"src", whole(a)}}),
              op(Opcode::activation,
                 {{"dst", whole(t)}, {"data", whole(t)}, {"func", s("exp")}, {"scale", 1.0}}),
              op(Opcode::nl_store, {{"dst", whole(o)}, {"src", whole(t)}})});
  Kernel want =
      kernel({a}, {o},
             {alloc(t), op(Opcode::dma_copy, {{"dst", whole(t)}, {"src", whole(a)}}),
              op(Opcode::activation,
                 {{"dst", whole(t)}, {"data", whole(t)}, {"func", s("exp")}, {"scale", 1.0}}),
              op(Opcode::dma_copy, {{"dst", whole(o)}, {"src", whole(t)}})});
  Kernel got = legalize(k);
  check_same(got, want);
  // The activation statement is the very same node: ISA ops are not rebuilt.
  CHECK(got.body->as<Block>()->stmts[2] == k.body->as<Block>()->stmts[2]);

  // A kernel that is already ISA-only comes back with the same body pointer ("unchanged").
  Kernel again = legalize(got);
  CHECK(again.body == got.body);
}

TEST_CASE("legalize: storing a PSUM tile stages it through SBUF") {
  auto o = hbm("o", {128, 32});
  auto p = psum("p", {128, 32});
  Kernel k =
      kernel({}, {o}, {alloc(p), op(Opcode::nl_store, {{"dst", whole(o)}, {"src", whole(p)}})});
  auto st = sbuf("p_t0", {128, 32});
  Kernel want =
      kernel({}, {o},
             {alloc(p), alloc(st), op(Opcode::tensor_copy, {{"dst", whole(st)}, {"src", whole(p)}}),
              op(Opcode::dma_copy, {{"dst", whole(o)}, {"src", whole(st)}})});
  check_same(legalize(k), want);
}

TEST_CASE("legalize: nl.matmul with and without transpose_x") {
  auto x = sbuf("x", {64, 128}, DType::bfloat16);  // [K=64, M=128] when transpose_x=1
  auto y = sbuf("y", {64, 256}, DType::bfloat16);  // [K, N]
  auto d = psum("d", {128, 256});
  Kernel k =
      kernel({}, {},
             {alloc(x), alloc(y), alloc(d),
              op(Opcode::nl_matmul,
                 {{"dst", whole(d)}, {"x", whole(x)}, {"y", whole(y)}, {"transpose_x", i(1)}})});
  Kernel want = kernel({}, {},
                       {alloc(x), alloc(y), alloc(d),
                        op(Opcode::nc_matmul, {{"dst", whole(d)},
                                               {"stationary", whole(x)},
                                               {"moving", whole(y)},
                                               {"accumulate", i(0)}})});
  check_same(legalize(k), want);

  // transpose_x=0: x2 is [M=32, K=64]; it goes through PSUM [K, M] (fp32), then an SBUF copy
  // in x2's dtype becomes the stationary operand.
  auto x2 = sbuf("x2", {32, 64}, DType::bfloat16);
  auto d2 = psum("d2", {32, 256});
  Kernel k2 =
      kernel({}, {},
             {alloc(x2), alloc(y), alloc(d2),
              op(Opcode::nl_matmul,
                 {{"dst", whole(d2)}, {"x", whole(x2)}, {"y", whole(y)}, {"transpose_x", i(0)}})});
  auto tp = psum("d2_t0", {64, 32}), ts = sbuf("d2_t1", {64, 32}, DType::bfloat16);
  Kernel want2 =
      kernel({}, {},
             {alloc(x2), alloc(y), alloc(d2), alloc(tp),
              op(Opcode::nc_transpose, {{"dst", whole(tp)}, {"data", whole(x2)}}), alloc(ts),
              op(Opcode::tensor_copy, {{"dst", whole(ts)}, {"src", whole(tp)}}),
              op(Opcode::nc_matmul, {{"dst", whole(d2)},
                                     {"stationary", whole(ts)},
                                     {"moving", whole(y)},
                                     {"accumulate", i(0)}})});
  check_same(legalize(k2), want2);
  verify(legalize(k2), "trn2");
}

TEST_CASE("legalize: nl.binary picks tensor_tensor, tensor_scalar or a broadcast DMA") {
  auto a = sbuf("a", {128, 16}), b = sbuf("b", {128, 16}), c = sbuf("c", {128, 1});
  auto r = sbuf("r", {1, 16}), o = sbuf("o", {128, 16});
  auto mk = [&](Value x, Value y, const char* alu) {
    return kernel({}, {},
                  {alloc(a), alloc(b), alloc(c), alloc(r), alloc(o),
                   op(Opcode::nl_binary, {{"dst", whole(o)}, {"x", x}, {"y", y}, {"op", s(alu)}})});
  };
  auto want = [&](std::vector<StmtPtr> tail) {
    std::vector<StmtPtr> body{alloc(a), alloc(b), alloc(c), alloc(r), alloc(o)};
    for (auto& s : tail) body.push_back(s);
    return kernel({}, {}, body);
  };

  SUBCASE("two full tiles: tensor_tensor") {
    check_same(
        legalize(mk(whole(a), whole(b), "add")),
        want(
            {op(Opcode::tensor_tensor,
                {{"dst", whole(o)}, {"data1", whole(a)}, {"data2", whole(b)}, {"op", s("add")}})}));
  }
  SUBCASE("float on the left: tensor_scalar with reverse0=1") {
    check_same(legalize(mk(2.5, whole(a), "subtract")),
               want({op(Opcode::tensor_scalar, {{"dst", whole(o)},
                                                {"data", whole(a)},
                                                {"op0", s("subtract")},
                                                {"operand0", 2.5},
                                                {"reverse0", i(1)}})}));
  }
  SUBCASE("float on the right: reverse0=0") {
    check_same(legalize(mk(whole(a), 3.0, "multiply")),
               want({op(Opcode::tensor_scalar, {{"dst", whole(o)},
                                                {"data", whole(a)},
                                                {"op0", s("multiply")},
                                                {"operand0", 3.0},
                                                {"reverse0", i(0)}})}));
  }
  SUBCASE("a column broadcast along the free dim becomes a [P,1] operand") {
    Access col1 = view(c, {ds(0, 128), ds(0, 1)});
    check_same(legalize(mk(whole(a), column_bcast(c, 128, 16), "divide")),
               want({op(Opcode::tensor_scalar, {{"dst", whole(o)},
                                                {"data", whole(a)},
                                                {"op0", s("divide")},
                                                {"operand0", col1},
                                                {"reverse0", i(0)}})}));
    check_same(legalize(mk(column_bcast(c, 128, 16), whole(a), "divide")),
               want({op(Opcode::tensor_scalar, {{"dst", whole(o)},
                                                {"data", whole(a)},
                                                {"op0", s("divide")},
                                                {"operand0", col1},
                                                {"reverse0", i(1)}})}));
  }
  SUBCASE("a partition broadcast is materialised by DMA first") {
    Access rb = view(r, {ds(0, 128, 0), ds(0, 16)});
    auto t = sbuf("o_t0", {128, 16});
    check_same(legalize(mk(whole(a), rb, "maximum")),
               want({alloc(t), op(Opcode::dma_copy, {{"dst", whole(t)}, {"src", rb}}),
                     op(Opcode::tensor_tensor, {{"dst", whole(o)},
                                                {"data1", whole(a)},
                                                {"data2", whole(t)},
                                                {"op", s("maximum")}})}));
  }
}

TEST_CASE("legalize: unary, transpose, copy") {
  auto a = sbuf("a", {128, 32}), o = sbuf("o", {128, 32}), p = psum("p", {32, 128});
  auto r = sbuf("r", {1, 32});
  Kernel k = kernel(
      {}, {},
      {alloc(a), alloc(o), alloc(p), alloc(r),
       op(Opcode::nl_unary, {{"dst", whole(o)}, {"x", whole(a)}, {"func", s("tanh")}}),
       op(Opcode::nl_transpose, {{"dst", whole(p)}, {"src", whole(a)}}),
       op(Opcode::nl_copy, {{"dst", whole(o)}, {"src", whole(a)}}),
       op(Opcode::nl_copy, {{"dst", whole(o)}, {"src", view(r, {ds(0, 128, 0), ds(0, 32)})}})});
  Kernel want = kernel(
      {}, {},
      {alloc(a), alloc(o), alloc(p), alloc(r),
       op(Opcode::activation,
          {{"dst", whole(o)}, {"data", whole(a)}, {"func", s("tanh")}, {"scale", 1.0}}),
       op(Opcode::nc_transpose, {{"dst", whole(p)}, {"data", whole(a)}}),
       op(Opcode::tensor_copy, {{"dst", whole(o)}, {"src", whole(a)}}),
       op(Opcode::dma_copy, {{"dst", whole(o)}, {"src", view(r, {ds(0, 128, 0), ds(0, 32)})}})});
  check_same(legalize(k), want);
}

TEST_CASE("legalize: nl.reduce, mean scales by 1/n") {
  auto x = sbuf("x", {128, 8, 4}), o = sbuf("o", {128, 1});
  Kernel k = kernel({}, {},
                    {alloc(x), alloc(o),
                     op(Opcode::nl_reduce, {{"dst", whole(o)},
                                            {"x", whole(x)},
                                            {"op", s("mean")},
                                            {"axes", std::vector<int64_t>{1, 2}}})});
  Kernel want = kernel({}, {},
                       {alloc(x), alloc(o),
                        op(Opcode::tensor_reduce, {{"dst", whole(o)},
                                                   {"data", whole(x)},
                                                   {"op", s("add")},
                                                   {"axes", std::vector<int64_t>{1, 2}},
                                                   {"negate", i(0)}}),
                        op(Opcode::tensor_scalar, {{"dst", whole(o)},
                                                   {"data", whole(o)},
                                                   {"op0", s("multiply")},
                                                   {"operand0", 1.0 / 32.0},
                                                   {"reverse0", i(0)}})});
  check_same(legalize(k), want);
}

TEST_CASE("legalize: nl.where writes y, then copies x where cond holds; temp names stay unique") {
  auto c = sbuf("c", {128, 16}), y = sbuf("y", {128, 16}), o = sbuf("o", {128, 16});
  auto taken = sbuf("o_t0", {128, 1});  // the first temp name is already used by the kernel
  Span here = Span::current();
  Kernel k =
      kernel({}, {},
             {alloc(c), alloc(y), alloc(o), alloc(taken),
              op(Opcode::nl_where,
                 {{"dst", whole(o)}, {"cond", whole(c)}, {"x", -1.5}, {"y", whole(y)}}, here)});
  auto t = sbuf("o_t1", {128, 16});
  Kernel want = kernel({}, {},
                       {alloc(c), alloc(y), alloc(o), alloc(taken),
                        op(Opcode::tensor_copy, {{"dst", whole(o)}, {"src", whole(y)}}), alloc(t),
                        op(Opcode::memset, {{"dst", whole(t)}, {"value", -1.5}}),
                        op(Opcode::tensor_copy_predicated,
                           {{"dst", whole(o)}, {"src", whole(t)}, {"predicate", whole(c)}})});
  Kernel got = legalize(k);
  check_same(got, want);
  // Every statement legalize produced carries the span of the nl.where.
  auto& stmts = got.body->as<Block>()->stmts;
  for (size_t n = 4; n < stmts.size(); ++n) CHECK(stmts[n]->span.line == here.line);
}

TEST_CASE("legalize: nl ops inside loops are expanded in place") {
  auto a = hbm("a", {512, 64});
  auto t = sbuf("t", {128, 64});
  Access src = view(a, {ds(Affine::var("i0") * 128, 128), ds(0, 64)});
  Kernel k = kernel(
      {a}, {},
      {affine_for("i0", 4, {alloc(t), op(Opcode::nl_load, {{"dst", whole(t)}, {"src", src}})})});
  Kernel want = kernel(
      {a}, {},
      {affine_for("i0", 4, {alloc(t), op(Opcode::dma_copy, {{"dst", whole(t)}, {"src", src}})})});
  check_same(legalize(k), want);
}

TEST_CASE("legalize: two PSUM operands of nl.binary: one is copied to SBUF first") {
  auto p = psum("p", {128, 64}), q = psum("q", {128, 64}), o = sbuf("o", {128, 64});
  Kernel k = kernel({}, {},
                    {alloc(p), alloc(q), alloc(o),
                     op(Opcode::nl_binary,
                        {{"dst", whole(o)}, {"x", whole(p)}, {"y", whole(q)}, {"op", s("add")}})});
  auto t = sbuf("o_t0", {128, 64});
  Kernel want =
      kernel({}, {},
             {alloc(p), alloc(q), alloc(o), alloc(t),
              op(Opcode::tensor_copy, {{"dst", whole(t)}, {"src", whole(q)}}),
              op(Opcode::tensor_tensor,
                 {{"dst", whole(o)}, {"data1", whole(p)}, {"data2", whole(t)}, {"op", s("add")}})});
  Kernel got = legalize(k);
  check_same(got, want);
  CHECK_NOTHROW(verify(got, "trn2"));
}
