// One test per verifier/allocator rule: the rule name, the offending values and the user's line.
#include <doctest/doctest.h>

#include <limits>

#include "neuron/codegen/pipeline.hpp"
#include "passes/kernel_builder.hpp"

using namespace neuron;
using namespace neuron::tb;

// Runs `expr`, which must throw a UserError (any other exception fails the test), and checks
// its rule, a fragment of its message and the line of the span it reports.
#define CHECK_RULE(expr, rule_, fragment, line_)                                   \
  do {                                                                             \
    CHECK_THROWS_AS((void)(expr), neuron::UserError);                              \
    try {                                                                          \
      (void)(expr);                                                                \
    } catch (const neuron::UserError& e) {                                         \
      CHECK(e.rule() == (rule_));                                                  \
      CHECK_MESSAGE(e.message().find(fragment) != std::string::npos, e.message()); \
      CHECK(e.span().line == (line_));                                             \
    }                                                                              \
  } while (0)

namespace {

void v(const Kernel& k) {
  verify(k, "trn2");
}
StmtPtr copy(Access dst, Access src, Span sp = {}) {
  return op(Opcode::tensor_copy, {{"dst", std::move(dst)}, {"src", std::move(src)}}, std::move(sp));
}

}  // namespace

TEST_CASE("rule partition-size") {
  auto big = sbuf("big", {256, 4});
  Span sp = Span::current();
  REQUIRE(sp.line == __LINE__ - 1);  // spans name the line they were captured on
  CHECK_RULE(v(kernel({}, {}, {alloc(big, sp)})), "partition-size",
             "big float32[256, 4] has 256 partitions", sp.line);

  auto row = sbuf("row", {1, 4}), t = sbuf("t", {128, 4});
  Span sp2 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(row), alloc(t),
                op(Opcode::dma_copy,
                   {{"dst", whole(t)}, {"src", view(row, {ds(0, 200, 0), ds(0, 4)})}}, sp2)})),
      "partition-size", "spans 200 partitions", sp2.line);
}

TEST_CASE("rule tile-rank") {
  auto flat = sbuf("flat", {128});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {}, {alloc(flat, sp)})), "tile-rank", "flat float32[128] has 1 dimension",
             sp.line);
}

TEST_CASE("rule start-partition") {
  auto a = sbuf("a", {128, 8}), b = sbuf("b", {128, 8});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), alloc(b),
                       copy(view(b, {ds(0, 32), ds(0, 8)}), view(a, {ds(16, 32), ds(0, 8)}), sp)})),
             "start-partition", "covers 32 partitions of 'a' starting at partition 16", sp.line);
  Span sp2 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(a), alloc(b),
                copy(view(b, {ds(32, 48), ds(0, 8)}), view(a, {ds(0, 48), ds(0, 8)}), sp2)})),
      "start-partition", "must start at 0 or 64", sp2.line);
  // An affine start is aligned only when every coefficient keeps it aligned.
  Span sp3 = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), alloc(b),
                       affine_for("i0", 2,
                                  {copy(view(b, {ds(Affine::var("i0") * 32, 64), ds(0, 8)}),
                                        view(a, {ds(0, 64), ds(0, 8)}), sp3)})})),
             "start-partition", "starting at partition i0*32", sp3.line);
  // Legal starts: 32 partitions at 96, 64 at 64, and a DMA may start anywhere.
  CHECK_NOTHROW(v(kernel(
      {}, {},
      {alloc(a), alloc(b), copy(view(b, {ds(96, 32), ds(0, 8)}), view(a, {ds(64, 32), ds(0, 8)})),
       copy(view(b, {ds(64, 64), ds(0, 8)}), view(a, {ds(0, 64), ds(0, 8)})),
       op(Opcode::dma_copy,
          {{"dst", view(b, {ds(5, 3), ds(0, 8)})}, {"src", view(a, {ds(7, 3), ds(0, 8)})}})})));
}

TEST_CASE("rule matmul-shape") {
  auto s = sbuf("s", {128, 128}, DType::bfloat16), m = sbuf("m", {64, 256}, DType::bfloat16);
  auto d = psum("d", {128, 256});
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(s), alloc(m), alloc(d),
                op(Opcode::nc_matmul,
                   {{"dst", whole(d)}, {"stationary", whole(s)}, {"moving", whole(m)}}, sp)})),
      "matmul-shape", "stationary has K=128 partitions, moving K=64", sp.line);
  auto m2 = sbuf("m2", {128, 256}, DType::bfloat16);
  auto d2 = psum("d2", {128, 128});
  Span sp2 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(s), alloc(m2), alloc(d2),
                op(Opcode::nc_matmul,
                   {{"dst", whole(d2)}, {"stationary", whole(s)}, {"moving", whole(m2)}}, sp2)})),
      "matmul-shape", "dst has shape [128, 128] but the product is [128, 256]", sp2.line);
  // nl.matmul with transpose_x=0 takes x as [M, K].
  auto x = sbuf("x", {128, 64}, DType::bfloat16);
  Span sp3 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(x), alloc(m2), alloc(d),
                op(Opcode::nl_matmul,
                   {{"dst", whole(d)}, {"x", whole(x)}, {"y", whole(m2)}, {"transpose_x", i(0)}},
                   sp3)})),
      "matmul-shape", "K=64 partitions, moving K=128", sp3.line);
}

TEST_CASE("rule matmul-memory") {
  auto s = psum("s", {128, 128}), m = sbuf("m", {128, 256}), d = psum("d", {128, 256});
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(s), alloc(m), alloc(d),
                op(Opcode::nc_matmul,
                   {{"dst", whole(d)}, {"stationary", whole(s)}, {"moving", whole(m)}}, sp)})),
      "matmul-memory", "'stationary' is in psum (buffer 's'); it must be in SBUF", sp.line);
  auto s2 = sbuf("s2", {128, 128}), d2 = sbuf("d2", {128, 256});
  Span sp2 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(s2), alloc(m), alloc(d2),
                op(Opcode::nc_matmul,
                   {{"dst", whole(d2)}, {"stationary", whole(s2)}, {"moving", whole(m)}}, sp2)})),
      "matmul-memory", "'dst' is in sbuf (buffer 'd2'); it must be in PSUM", sp2.line);
}

TEST_CASE("rule psum-bank") {
  // A buffer may span banks (two here), not more than the whole PSUM; a matmul result that
  // crosses a bank boundary: tests/python/test_matmul_banks.py.
  CHECK_NOTHROW(v(kernel({}, {}, {alloc(psum("two_banks", {128, 1024}))})));
  auto p = psum("acc", {128, 8192});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {}, {alloc(p, sp)})), "psum-bank",
             "acc float32[128, 8192] needs 32768 bytes per partition but PSUM holds 16384",
             sp.line);
}

TEST_CASE("rule psum-dtype") {
  auto s = sbuf("s", {128, 128}, DType::bfloat16), m = sbuf("m", {128, 256}, DType::bfloat16);
  auto d = psum("d", {128, 256}, DType::bfloat16);
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(s), alloc(m), alloc(d),
                op(Opcode::nc_matmul,
                   {{"dst", whole(d)}, {"stationary", whole(s)}, {"moving", whole(m)}}, sp)})),
      "psum-dtype", "dst 'd' is bfloat16", sp.line);
}

TEST_CASE("rule engine-memory") {
  auto a = hbm("a", {128, 8});
  auto t = sbuf("t", {128, 8}), p = psum("p", {128, 8});
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({a}, {},
               {alloc(t),
                op(Opcode::tensor_tensor,
                   {{"dst", whole(t)}, {"data1", whole(a)}, {"data2", whole(t)}, {"op", s("add")}},
                   sp)})),
      "engine-memory", "'data1' is the shared_hbm buffer 'a'", sp.line);
  Span spu = Span::current();  // nl.unary is named by its function, as the user called it
  CHECK_RULE(
      v(kernel({a}, {},
               {alloc(t), op(Opcode::nl_unary,
                             {{"dst", whole(t)}, {"x", whole(a)}, {"func", s("exp")}}, spu)})),
      "engine-memory", "nl::exp argument 'x' is the shared_hbm buffer 'a'", spu.line);
  Span sp2 = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(t), alloc(p),
                       op(Opcode::nl_load, {{"dst", whole(t)}, {"src", whole(p)}}, sp2)})),
             "engine-memory", "'src' is in psum (buffer 'p'); it must be in HBM", sp2.line);
  Span sp3 = Span::current();
  CHECK_RULE(
      v(kernel({a}, {},
               {alloc(p), op(Opcode::dma_copy, {{"dst", whole(a)}, {"src", whole(p)}}, sp3)})),
      "engine-memory", "DMA cannot reach PSUM", sp3.line);
  Span sp4 = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(t), alloc(p),
                       op(Opcode::nl_store, {{"dst", whole(t)}, {"src", whole(p)}}, sp4)})),
             "engine-memory", "'dst' is in sbuf (buffer 't'); it must be in HBM", sp4.line);
}

TEST_CASE("rule out-of-bounds") {
  auto a = hbm("a", {256, 8});
  auto t = sbuf("t", {128, 8});
  Affine i0 = Affine::var("i0");
  Span sp = Span::current();
  CHECK_RULE(v(kernel({a}, {},
                      {affine_for("i0", 3,
                                  {alloc(t), op(Opcode::dma_copy,
                                                {{"dst", whole(t)},
                                                 {"src", view(a, {ds(i0 * 128, 128), ds(0, 8)})}},
                                                sp)})})),
             "out-of-bounds", "reads indices 0..383 of dim 0", sp.line);
  Span sp2 = Span::current();
  CHECK_RULE(v(kernel({}, {}, {alloc(t), copy(view(t, {ds(0, 128), ds(4, 4, 2)}), whole(t), sp2)})),
             "out-of-bounds", "reads indices 4..10 of dim 1", sp2.line);
  // Program ids are unbounded: only what the loops bound is checked.
  Affine pid = Affine::var("pid0");
  CHECK_NOTHROW(v(kernel(
      {a}, {},
      {alloc(t), op(Opcode::dma_copy,
                    {{"dst", whole(t)}, {"src", view(a, {ds(pid * 128, 128), ds(0, 8)})}})})));
  CHECK_NOTHROW(v(kernel(
      {a}, {},
      {affine_for(
          "i0", 2,
          {alloc(t), op(Opcode::dma_copy,
                        {{"dst", whole(t)}, {"src", view(a, {ds(i0 * 128, 128), ds(0, 8)})}})})})));
}

TEST_CASE("rule shape-mismatch") {
  auto a = sbuf("a", {128, 16}), b = sbuf("b", {128, 8}), c = sbuf("c", {128, 2});
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(a), alloc(b),
                op(Opcode::tensor_tensor,
                   {{"dst", whole(a)}, {"data1", whole(a)}, {"data2", whole(b)}, {"op", s("add")}},
                   sp)})),
      "shape-mismatch", "'dst' [128, 16] and 'data2' [128, 8]", sp.line);
  Span sp2 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(a), alloc(c),
                op(Opcode::activation,
                   {{"dst", whole(a)}, {"data", whole(a)}, {"func", s("exp")}, {"bias", whole(c)}},
                   sp2)})),
      "shape-mismatch", "'bias' has shape [128, 2]; it must be [128, 1]", sp2.line);
  Span sp3 = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), alloc(c),
                       op(Opcode::tensor_reduce,
                          {{"dst", whole(c)},
                           {"data", whole(a)},
                           {"op", s("add")},
                           {"axes", std::vector<int64_t>{1}}},
                          sp3)})),
             "shape-mismatch",
             "dst has shape [128, 2] but reducing [128, 16] over axes [1] gives [128, 1]",
             sp3.line);
  auto h = hbm("h", {64, 8});
  Span sp4 = Span::current();
  CHECK_RULE(
      v(kernel({h}, {},
               {alloc(a), op(Opcode::dma_copy, {{"dst", whole(a)}, {"src", whole(h)}}, sp4)})),
      "shape-mismatch", "has 2048 elements but src [64, 8] has 512", sp4.line);
  // dma_copy only needs equal element counts.
  auto h2 = hbm("h2", {2048});
  CHECK_NOTHROW(v(
      kernel({h2}, {}, {alloc(a), op(Opcode::dma_copy, {{"dst", whole(a)}, {"src", whole(h2)}})})));
  Span sp5 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(a), alloc(b),
                op(Opcode::nl_binary,
                   {{"dst", whole(a)}, {"x", whole(a)}, {"y", whole(b)}, {"op", s("add")}}, sp5)})),
      "shape-mismatch", "'dst' has shape [128, 16] but 'y' has shape [128, 8]", sp5.line);
}

TEST_CASE("rule reduce-axis") {
  auto a = sbuf("a", {128, 16}), c = sbuf("c", {1, 16});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), alloc(c),
                       op(Opcode::tensor_reduce,
                          {{"dst", whole(c)},
                           {"data", whole(a)},
                           {"op", s("add")},
                           {"axes", std::vector<int64_t>{0}}},
                          sp)})),
             "reduce-axis", "axis 0 is the partition dimension", sp.line);
  Span sp2 = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), alloc(c),
                       op(Opcode::nl_reduce,
                          {{"dst", whole(c)},
                           {"x", whole(a)},
                           {"op", s("mean")},
                           {"axes", std::vector<int64_t>{3}}},
                          sp2)})),
             "reduce-axis", "axis 3 is out of range for a view of shape [128, 16]", sp2.line);
}

TEST_CASE("rule dtype") {
  auto a = sbuf("a", {128, 16});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), op(Opcode::tensor_tensor,
                                    {{"dst", whole(a)},
                                     {"data1", whole(a)},
                                     {"data2", whole(a)},
                                     {"op", s("bitwise_and")}},
                                    sp)})),
             "dtype", "bitwise operator 'bitwise_and' needs integer tiles but 'dst' is float32",
             sp.line);
  auto m = sbuf("m", {128, 16}, DType::bool_);
  Span sp2 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(m), op(Opcode::iota,
                             {{"dst", whole(m)}, {"pattern", std::vector<int64_t>{1, 16}}}, sp2)})),
      "dtype", "dst 'm' is bool", sp2.line);
  auto s8 = sbuf("s8", {128, 128}, DType::int8), m8 = sbuf("m8", {128, 256}, DType::int8);
  auto d = psum("d", {128, 256});
  Span sp3 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(s8), alloc(m8), alloc(d),
                op(Opcode::nc_matmul,
                   {{"dst", whole(d)}, {"stationary", whole(s8)}, {"moving", whole(m8)}}, sp3)})),
      "dtype", "'stationary' is int8", sp3.line);
  auto n = sbuf("n", {128, 16}, DType::int32);
  Span sp4 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(n), op(Opcode::nl_unary,
                             {{"dst", whole(n)}, {"x", whole(n)}, {"func", s("exp")}}, sp4)})),
      "dtype", "'n' is int32", sp4.line);
  // Bitwise operators are fine on integer tiles.
  CHECK_NOTHROW(v(kernel({}, {},
                         {alloc(n), op(Opcode::tensor_tensor, {{"dst", whole(n)},
                                                               {"data1", whole(n)},
                                                               {"data2", whole(n)},
                                                               {"op", s("bitwise_xor")}})})));
}

TEST_CASE("rule unknown-arg") {
  auto a = sbuf("a", {128, 16});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a), op(Opcode::tensor_tensor,
                                    {{"dst", whole(a)},
                                     {"data1", whole(a)},
                                     {"data2", whole(a)},
                                     {"op", s("frobnicate")}},
                                    sp)})),
             "unknown-arg", "op=\"frobnicate\" is not an ALU operator", sp.line);
  Span sp2 = Span::current();
  CHECK_RULE(v(kernel({}, {}, {alloc(a), op(Opcode::tensor_copy, {{"dst", whole(a)}}, sp2)})),
             "unknown-arg", "tensor_copy is missing its required argument 'src'", sp2.line);
  Span sp3 = Span::current();
  CHECK_RULE(
      v(kernel({}, {},
               {alloc(a), op(Opcode::memset,
                             {{"dst", whole(a)}, {"value", 0.0}, {"colour", s("red")}}, sp3)})),
      "unknown-arg", "memset has no argument 'colour'", sp3.line);
  Span sp4 = Span::current();
  CHECK_RULE(v(kernel({}, {}, {alloc(a), op(Opcode::memset, {{"dst", 1.0}, {"value", 0.0}}, sp4)})),
             "unknown-arg", "argument 'dst' must be a view", sp4.line);
  Span sp5 = Span::current();
  CHECK_RULE(v(kernel({}, {},
                      {alloc(a),
                       op(Opcode::nl_unary,
                          {{"dst", whole(a)}, {"x", whole(a)}, {"func", s("frobnicate")}}, sp5)})),
             "unknown-arg", "func=\"frobnicate\" is not an activation function", sp5.line);
  // legalize guards its inputs too (it may be called without verify).
  Span sp6 = Span::current();
  CHECK_RULE(legalize(kernel(
                 {}, {},
                 {alloc(a), op(Opcode::nl_unary,
                               {{"dst", whole(a)}, {"x", whole(a)}, {"func", s("nope")}}, sp6)})),
             "unknown-arg", "func=\"nope\"", sp6.line);
}

TEST_CASE("rule free-dims") {
  auto a = sbuf("a", {128, 2, 2, 2, 2, 2}), b = sbuf("b", {128, 32});
  Span sp = Span::current();
  CHECK_RULE(v(kernel({}, {}, {alloc(a), alloc(b), copy(whole(b), whole(a), sp)})), "free-dims",
             "'src' has 5 free dimensions", sp.line);
}

TEST_CASE("rule buffer-scope") {
  auto t = sbuf("t", {128, 8}), o = sbuf("o", {128, 8});
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({}, {}, {alloc(o), affine_for("i0", 2, {alloc(t)}), copy(whole(o), whole(t), sp)})),
      "buffer-scope", "uses buffer 't' outside the block that allocates it", sp.line);
}

TEST_CASE("rule sbuf-capacity") {
  auto t0 = sbuf("t0", {128, 32768}), t1 = sbuf("t1", {128, 20000});
  Span sp = Span::current();
  // t0: 131072 B per partition; t1: 80000 B at 131072 -> 211072 fits; two slots of t0 do not,
  // so t0 falls back to one slot; t2 then overflows.
  auto t2 = sbuf("t2", {128, 1024});
  // Every buffer is used before and after t2's allocation, its value read then, so all are live
  // there (a buffer is placed at its first use, and dead ones leave holes).
  auto zero = [](BufferPtr b) { return op(Opcode::memset, {{"dst", whole(b)}, {"value", 0.0}}); };
  auto bump = [](BufferPtr b) {
    return op(Opcode::tensor_scalar, {{"dst", whole(b)}, {"data", whole(b)}, {"op0", s("add")},
                                      {"operand0", 1.0}});
  };
  Kernel k = kernel({}, {},
                    {alloc(t1), zero(t1),
                     affine_for("i0", 4, {alloc(t0), zero(t0), alloc(t2, sp), zero(t2),
                                          bump(t0)}),
                     bump(t1)});
  CHECK_RULE(compile(k), "sbuf-capacity",
             "SBUF needs 215168 bytes per partition but trn2 has 212984: t1 float32[128, 20000] "
             "(80000 B) x1 slot, "
             "t0 float32[128, 32768] (131072 B) x1 slot, t2 float32[128, 1024] (4096 B) x1 slot",
             sp.line);
}

TEST_CASE("rule psum-capacity") {
  std::vector<StmtPtr> body;
  std::vector<BufferPtr> p;
  auto zero = [](BufferPtr b) { return op(Opcode::memset, {{"dst", whole(b)}, {"value", 0.0}}); };
  for (int n = 0; n < 8; ++n) {  // each written (so placed) before p8 is allocated
    p.push_back(psum(fmt::format("p{}", n), {128, 512}));
    body.push_back(alloc(p.back()));
    body.push_back(zero(p.back()));
  }
  Span sp = Span::current();
  body.push_back(alloc(psum("p8", {128, 4}), sp));
  for (int n = 0; n < 8; ++n) body.push_back(zero(p[n]));  // all still live when p8 comes
  CHECK_RULE(
      allocate(kernel({}, {}, body), "trn2"), "psum-capacity",
      "PSUM needs 9 banks of 2048 bytes but trn2 has 8: p0 float32[128, 512] (2048 B) x1 slot",
      sp.line);
}

TEST_CASE("capacity: dead buffers leave holes, so an unrolled loop's tiles fit") {
  // Nine [128, 512] fp32 PSUM tiles (a bank each; trn2 has 8), one per unrolled iteration, each
  // dead after its iteration: the ninth reuses a bank instead of overflowing.
  std::vector<StmtPtr> body;
  std::vector<BufferPtr> tiles;
  for (int n = 0; n < 9; ++n) {
    tiles.push_back(psum(fmt::format("p{}", n), {128, 512}));
    body.push_back(alloc(tiles.back()));
    body.push_back(op(Opcode::memset, {{"dst", whole(tiles.back())}, {"value", 0.0}}));
  }
  Kernel out = allocate(kernel({}, {}, body), "trn2");
  std::vector<int64_t> offsets;
  for (auto& st : out.body->as<Block>()->stmts)
    if (auto a = st->as<Alloc>()) offsets.push_back(a->buffer->offset);
  REQUIRE(offsets.size() == 9);
  for (int n = 0; n < 8; ++n) CHECK(offsets[n] == n * 2048);  // the stack while it has room
  CHECK(offsets[8] == 0);                                      // then the first hole
}

TEST_CASE("capacity: tiles declared up front are placed at their first use") {
  // Sixteen [128, 512] fp32 PSUM tiles (trn2 has 8 banks) all declared first, as a list of
  // tiles is (nki-library's modular allocator), then each written and read in turn: each is
  // placed when first used, so they take turns in the banks instead of overflowing.
  std::vector<StmtPtr> body;
  std::vector<BufferPtr> tiles;
  for (int n = 0; n < 16; ++n) {
    tiles.push_back(psum(fmt::format("p{}", n), {128, 512}));
    body.push_back(alloc(tiles.back()));
  }
  for (int n = 0; n < 16; ++n)
    body.push_back(op(Opcode::memset, {{"dst", whole(tiles[static_cast<size_t>(n)])},
                                       {"value", 0.0}}));
  Kernel out = allocate(kernel({}, {}, body), "trn2");
  std::vector<int64_t> offsets;
  for (auto& st : out.body->as<Block>()->stmts)
    if (auto a = st->as<Alloc>()) offsets.push_back(a->buffer->offset);
  REQUIRE(offsets.size() == 16);
  for (int n = 0; n < 16; ++n) CHECK(offsets[static_cast<size_t>(n)] >= 0);
  CHECK(offsets[8] == 0);  // the ninth reuses the first's bank (p0 died after its memset)
  // The same tiles all written before any is read again are live together: 16 banks.
  for (int n = 0; n < 16; ++n)
    body.push_back(op(Opcode::memset, {{"dst", whole(tiles[static_cast<size_t>(n)])},
                                       {"value", 1.0}}));
  CHECK_THROWS_AS((void)allocate(kernel({}, {}, body), "trn2"), UserError);
}

TEST_CASE("an unknown target names the known ones") {
  auto a = sbuf("a", {128, 4});
  try {
    compile(kernel({}, {}, {alloc(a)}), CompileOptions{"trn9"});
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    CHECK(e.rule() == "target");
    CHECK(e.message().find("trn1, trn2, trn3") != std::string::npos);
  }
}

TEST_CASE("compile reports nl-level errors at the user's line, before legalize rewrites them") {
  auto a = sbuf("a", {128, 16}), b = sbuf("b", {64, 16});
  Span sp = Span::current();
  CHECK_RULE(
      compile(kernel(
          {}, {},
          {alloc(a), alloc(b),
           op(Opcode::nl_binary,
              {{"dst", whole(a)}, {"x", whole(a)}, {"y", whole(b)}, {"op", s("add")}}, sp)})),
      "shape-mismatch", "'y' has shape [64, 16]", sp.line);
}

TEST_CASE("rule shape-mismatch: an engine copy keeps partitions and elements per partition") {
  // NKI's tensor_copy: dst has src's partition count and elements per partition; the free
  // dims may be shaped differently. Only dma_copy may move elements across partitions.
  auto a = sbuf("a", {128, 4, 8}), b = sbuf("b", {128, 32}), c = sbuf("c", {128, 1});
  auto d = sbuf("d", {128, 30}), e = sbuf("e", {64, 64});
  Span sp = Span::current();
  CHECK_NOTHROW(v(kernel({}, {}, {alloc(a), alloc(b), copy(whole(b), whole(a))})));
  CHECK_RULE(v(kernel({}, {}, {alloc(a), alloc(d), copy(whole(d), whole(a), sp)})),
             "shape-mismatch",
             "'dst' [128, 30] and 'src' [128, 4, 8] need the same partition count and elements "
             "per partition",
             sp.line);
  CHECK_RULE(v(kernel({}, {}, {alloc(b), alloc(e), copy(whole(e), view(b, {ds(0, 64), ds(0, 32)}),
                                                       sp)})),
             "shape-mismatch", "need the same partition count", sp.line);
  CHECK_NOTHROW(v(kernel(
      {}, {}, {alloc(a), alloc(b), op(Opcode::dma_copy, {{"dst", whole(b)}, {"src", whole(a)}})})));
  // A column read through a dropped dim has the same elements as a [P, 1] tile.
  CHECK_NOTHROW(v(kernel(
      {}, {}, {alloc(b), alloc(c), copy(whole(c), view(b, {ds(0, 128), ds(5, 1, 1, false)}))})));
}

TEST_CASE("rule out-of-bounds: a zero-trip loop's body is not bounds-checked") {
  // Found by the fuzzer: a body under `affine_range(0)` indexing past a tensor's end was
  // rejected although it never runs. The same index outside the loop is still an error.
  auto a = hbm("a", {2, 4});
  auto t = sbuf("t", {1, 4});
  Affine i0 = Affine::var("i0");
  auto load_row = [&](Affine row, Span sp) {
    return op(Opcode::dma_copy, {{"dst", whole(t)}, {"src", view(a, {ds(row, 1), ds(0, 4)})}},
              sp);
  };
  CHECK_NOTHROW(v(kernel({a}, {}, {alloc(t), affine_for("i0", 0, {load_row(i0 + 5, {})})})));
  Span sp = Span::current();
  CHECK_RULE(v(kernel({a}, {}, {alloc(t), affine_for("i0", 1, {load_row(i0 + 5, sp)})})),
             "out-of-bounds", "reads indices 5..5 of dim 0", sp.line);
}

TEST_CASE("rule loop-scope") {
  auto a = hbm("a", {512, 8});
  auto t = sbuf("t", {128, 8});
  Affine i3 = Affine::var("i3");
  Span sp = Span::current();
  CHECK_RULE(
      v(kernel({a}, {},
               {affine_for("i0", 4, {alloc(t)}), alloc(t),
                op(Opcode::dma_copy,
                   {{"dst", whole(t)}, {"src", view(a, {ds(i3 * 128, 128), ds(0, 8)})}}, sp)})),
      "loop-scope", "with 'i3', which is not the variable of an enclosing loop", sp.line);
}

TEST_CASE("rule tensor-size: sizes near INT64_MAX are user errors, not overflows") {
  // Found by libFuzzer (fuzz/known_crashes/verify_bounds_overflow.ir): the bounds arithmetic
  // overflowed int64 for shapes and slice starts near INT64_MAX.
  const int64_t big = std::numeric_limits<int64_t>::max();
  auto a = hbm("a", {big, big}), t = sbuf("t", {4, 4});
  Span sp = Span::current();
  Kernel k = kernel({a}, {}, {alloc(t), op(Opcode::dma_copy, {{"dst", whole(t)}, {"src", view(a, {ds(big - 1, 4), ds(0, 4)})}}, sp)});
  CHECK_RULE(v(k), "tensor-size", "larger than the 281474976710656 bytes", 0);
  // A slice walking past INT64_MAX in a buffer of legal size reports the range, no overflow.
  auto b = hbm("b", {64, 4});
  Kernel k2 = kernel({b}, {}, {alloc(t), op(Opcode::dma_copy, {{"dst", whole(t)}, {"src", view(b, {ds(big - 1, 4), ds(0, 4)})}}, sp)});
  CHECK_RULE(v(k2), "out-of-bounds", "beyond 2^63", sp.line);
}
