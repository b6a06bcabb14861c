// fresh_psum: PSUM tiles targeted by accumulate=auto matmuls are cleared before their first
// use, so storage reused across loop iterations starts a new accumulation.
#include <doctest/doctest.h>

#include "kernel_builder.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"

using namespace neuron;
using namespace neuron::tb;

TEST_CASE("fresh_psum inserts a memset before the first use of an auto-accumulated tile") {
  auto a = sbuf("a", {128, 128}), b = sbuf("b", {128, 512});
  auto acc = psum("acc", {128, 512}), other = psum("other", {128, 512});
  auto matmul = [&](BufferPtr dst, int64_t accumulate) {
    return op(Opcode::nc_matmul, {{"dst", whole(dst)},
                                  {"stationary", whole(a)},
                                  {"moving", whole(b)},
                                  {"accumulate", accumulate}});
  };
  Kernel before = kernel({}, {},
                         {alloc(a), alloc(b),
                          affine_for("i0", 4,
                                     {alloc(acc), alloc(other),
                                      seq_for("i1", 2, {matmul(acc, -1)}), matmul(other, 1)})});
  Kernel expected = kernel(
      {}, {},
      {alloc(a), alloc(b),
       affine_for("i0", 4,
                  {alloc(acc), alloc(other),
                   op(Opcode::memset, {{"dst", whole(acc)}, {"value", 0.0}}),
                   seq_for("i1", 2, {matmul(acc, -1)}), matmul(other, 1)})});
  Kernel after = fresh_psum(before);
  INFO(print(after));
  CHECK(equal(after, expected));
}

TEST_CASE("fresh_psum leaves kernels without auto-accumulating matmuls unchanged") {
  auto a = sbuf("a", {128, 128}), b = sbuf("b", {128, 512}), acc = psum("acc", {128, 512});
  Kernel k = kernel({}, {},
                    {alloc(a), alloc(b), alloc(acc),
                     op(Opcode::nc_matmul, {{"dst", whole(acc)},
                                            {"stationary", whole(a)},
                                            {"moving", whole(b)},
                                            {"accumulate", int64_t{0}}})});
  Kernel after = fresh_psum(k);
  CHECK(after.body == k.body);  // the same node: nothing changed
}

TEST_CASE("fresh tiles declared up front are placed one after another, each at its clear") {
  // Sixteen [128, 512] fp32 PSUM tiles (trn2 has 8 banks) declared first, then each the target
  // of an accumulate=auto matmul and read out in turn: the clears come at each tile's first use,
  // so allocate sees one tile live at a time and they fit.
  auto a = sbuf("a", {128, 128}), b = sbuf("b", {128, 512}), out = sbuf("out", {128, 512});
  std::vector<StmtPtr> body{alloc(a), alloc(b), alloc(out)};
  std::vector<BufferPtr> tiles;
  for (int n = 0; n < 16; ++n) {
    tiles.push_back(psum(fmt::format("p{}", n), {128, 512}));
    body.push_back(alloc(tiles.back()));
  }
  for (auto& t : tiles) {
    body.push_back(op(Opcode::nc_matmul, {{"dst", whole(t)},
                                          {"stationary", whole(a)},
                                          {"moving", whole(b)},
                                          {"accumulate", int64_t{-1}}}));
    body.push_back(op(Opcode::tensor_copy, {{"dst", whole(out)}, {"src", whole(t)}}));
  }
  Kernel cleared = fresh_psum(kernel({}, {}, body));
  const auto& stmts = cleared.body->as<Block>()->stmts;
  REQUIRE(stmts.size() == body.size() + 16);
  CHECK(stmts[19]->as<Op>()->code == Opcode::memset);  // right before p0's matmul
  CHECK(stmts[20]->as<Op>()->code == Opcode::nc_matmul);
  CHECK_NOTHROW((void)allocate(cleared, "trn2"));
}
