// allocate: offsets, rotating slots, scoping and capacity, checked against hand-computed values.
#include <doctest/doctest.h>

#include <map>

#include <fmt/format.h>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "passes/kernel_builder.hpp"

using namespace neuron;
using namespace neuron::tb;

namespace {

// Every allocated buffer by name, and every buffer an op refers to.
struct Collect : IRVisitor {
  std::map<std::string, BufferPtr> allocs;
  std::vector<BufferPtr> used;
  void visit_Alloc(const Alloc& a) override { allocs[a.buffer->name] = a.buffer; }
  void visit_Op(const Op& o) override {
    for (auto& arg : o.args)
      if (auto v = std::get_if<Access>(&arg.value)) used.push_back(v->buffer);
  }
};

Collect collect(const Kernel& k) {
  Collect c;
  c.visit(k.body);
  return c;
}

StmtPtr touch(BufferPtr b) {
  return op(Opcode::memset, {{"dst", whole(std::move(b))}, {"value", 0.0}});
}

}  // namespace

TEST_CASE("allocate: SBUF offsets are 64-byte aligned and stack-scoped") {
  auto a = sbuf("a", {128, 100});                  // 400 B per partition
  auto b = sbuf("b", {128, 10}, DType::bfloat16);  // 20 B
  auto c = sbuf("c", {64, 256});                   // 1024 B
  auto d = sbuf("d", {128, 8});                    // 32 B
  Kernel k = kernel({}, {},
                    {alloc(a), alloc(b), touch(a), touch(b), seq_for("i0", 3, {alloc(c), touch(c)}),
                     seq_for("i1", 3, {alloc(d), touch(d)})});
  Kernel out = allocate(k, "trn2");
  auto c_ = collect(out);
  CHECK(c_.allocs["a"]->offset == 0);
  CHECK(c_.allocs["b"]->offset == 448);  // align64(400)
  // b ends at 468; c starts at align64(468) = 512; after its loop ends d reuses the space.
  CHECK(c_.allocs["c"]->offset == 512);
  CHECK(c_.allocs["d"]->offset == 512);
  for (auto name : {"a", "b"}) {
    CHECK(c_.allocs[name]->slots == 1);
    CHECK(c_.allocs[name]->slot_var.empty());
  }
  // A tile allocated in a sequential loop is fresh every iteration too: it rotates.
  CHECK(c_.allocs["c"]->slots == 3);
  CHECK(c_.allocs["c"]->slot_var == "i0");
  // Every op now refers to the allocated buffers, not the originals.
  for (auto& u : c_.used) CHECK(u == c_.allocs[u->name]);
  // The input kernel's buffers are untouched (buffers are shared and immutable).
  CHECK(a->offset == -1);
}

TEST_CASE("allocate: SBUF buffers directly in a loop body rotate over three slots") {
  auto outer = sbuf("outer", {128, 16});  // 64 B
  auto t = sbuf("t", {128, 256});         // 1024 B per slot
  auto u = sbuf("u", {128, 4});           // nested one block deeper: no rotation
  auto one = sbuf("one", {128, 4});       // loop of extent 1: nothing to overlap
  Kernel k = kernel({}, {},
                    {alloc(outer), touch(outer),
                     affine_for("i0", 4, {alloc(t), touch(t), block({alloc(u), touch(u)})}),
                     affine_for("i1", 1, {alloc(one), touch(one)})});
  auto c = collect(allocate(k, "trn2"));
  CHECK(c.allocs["t"]->offset == 64);
  CHECK(c.allocs["t"]->slots == 3);
  CHECK(c.allocs["t"]->slot_var == "i0");
  CHECK(c.allocs["u"]->offset == 64 + 3 * 1024);
  CHECK(c.allocs["u"]->slots == 1);
  CHECK(c.allocs["one"]->slots == 1);
  CHECK(c.allocs["one"]->offset == 64);
}

TEST_CASE("allocate: PSUM tiles share banks; slots are whole banks apart") {
  auto p0 = psum("p0", {128, 512});  // one full bank
  auto p1 = psum("p1", {128, 100});  // 400 B: the start of bank 1
  auto p2 = psum("p2", {128, 128});  // in an affine loop: 2 slots of 512 B, a bank apart
  auto p3 = psum("p3", {128, 8});
  Kernel k = kernel({}, {},
                    {alloc(p0), alloc(p1), touch(p0), touch(p1),
                     affine_for("i0", 8, {alloc(p2), touch(p2), block({alloc(p3), touch(p3)})})});
  auto c = collect(allocate(k, "trn2"));
  CHECK(c.allocs["p0"]->offset == 0);
  CHECK(c.allocs["p1"]->offset == 2048);
  CHECK(c.allocs["p2"]->offset == 2048 + 448);  // align64(2048 + 400), in bank 1 beside p1
  CHECK(c.allocs["p2"]->slots == 2);
  CHECK(c.allocs["p3"]->offset == 2048 + 448 + 2048 + 512);  // after p2's second slot (bank 2)
}

TEST_CASE("allocate: small PSUM tiles pack into one bank, none straddles a bank") {
  // Nine [128, 128] fp32 tiles (512 B each) all live at once: 4 per 2 KiB bank, 3 banks in all
  // (bank by bank they would need 9 of trn1's 8).
  std::vector<StmtPtr> body;
  std::vector<BufferPtr> tiles;
  for (int n = 0; n < 9; ++n) {
    tiles.push_back(psum(fmt::format("q{}", n), {128, 128}));
    body.push_back(alloc(tiles.back()));
  }
  for (auto& t : tiles) body.push_back(touch(t));
  for (auto& t : tiles) body.push_back(touch(t));  // (each used twice: all live together)
  auto c = collect(allocate(kernel({}, {}, body), "trn1"));
  for (int n = 0; n < 9; ++n) CHECK(c.allocs[fmt::format("q{}", n)]->offset == n * 512);
  // A 1600 B tile then a 512 B one: the second would cross into bank 1, so it starts there.
  auto a = psum("a", {128, 400}), b = psum("b", {128, 128}), d = psum("d", {128, 100});
  auto c2 = collect(allocate(kernel({}, {}, {alloc(a), alloc(b), alloc(d), touch(a), touch(b),
                                             touch(d)}),
                             "trn1"));
  CHECK(c2.allocs["a"]->offset == 0);
  CHECK(c2.allocs["b"]->offset == 2048);
  CHECK(c2.allocs["d"]->offset == 2048 + 512);
}

TEST_CASE("allocate: rotation falls back to fewer slots when three do not fit") {
  auto big = sbuf("big", {128, 40000});  // 160000 B: two slots exceed trn2's 212984
  Kernel k = kernel({}, {}, {affine_for("i0", 4, {alloc(big), touch(big)})});
  auto c = collect(allocate(k, "trn2"));
  CHECK(c.allocs["big"]->slots == 1);
  CHECK(c.allocs["big"]->offset == 0);
  auto mid = sbuf("mid", {128, 25000});  // 100000 B: two slots fit, three do not
  auto cm = collect(allocate(kernel({}, {}, {affine_for("i0", 4, {alloc(mid), touch(mid)})}),
                             "trn2"));
  CHECK(cm.allocs["mid"]->slots == 2);
}

TEST_CASE("allocate: an earlier rotating buffer gives up slots to a later one that does not fit") {
  // a: 32 KiB per slot, rotating in i0; b: 128 KiB, rotating in i1 inside it. Three slots of a
  // (96 KiB) leave no room for even one b on trn2 (208 KiB): a drops to two slots, b gets one.
  auto a = sbuf("a", {128, 8192});
  auto b = sbuf("b", {128, 32768});
  Kernel k = kernel({}, {}, {affine_for("i0", 4, {alloc(a), touch(a),
                                                  affine_for("i1", 4, {alloc(b), touch(b),
                                                                       touch(a)})})});
  auto c = collect(allocate(k, "trn2"));
  CHECK(c.allocs["a"]->slots == 2);
  CHECK(c.allocs["b"]->slots == 1);
  CHECK(c.allocs["b"]->offset == 2 * 32768);
}

TEST_CASE("allocate: a small buffer short of slots takes them from a larger rotating one") {
  // big: 64 KiB rotating in i0; small: 32 KiB rotating in i1. On trn1 (176 KiB) two slots of big
  // leave room for one small; big gives up a slot so that small gets two (pipelining the small
  // tile is cheaper than the large one).
  auto big = sbuf("big", {128, 16384});
  auto small = sbuf("small", {128, 8192});
  Kernel k = kernel({}, {}, {affine_for("i0", 4, {alloc(big), touch(big),
                                                  affine_for("i1", 2, {alloc(small), touch(small),
                                                                       touch(big)})})});
  auto c = collect(allocate(k, "trn1"));
  CHECK(c.allocs["big"]->slots == 1);
  CHECK(c.allocs["small"]->slots == 2);
}

TEST_CASE("allocate: capacity depends on the target") {
  auto t = sbuf("t", {128, 50000});  // 200000 B: fits trn2 (212984), not trn1 (180224)
  Kernel k = kernel({}, {}, {alloc(t), touch(t)});
  CHECK_NOTHROW(allocate(k, "trn2"));
  CHECK_THROWS_AS(allocate(k, "trn1"), UserError);
}

TEST_CASE("allocate: a tile used in one unrolled iteration lives only there") {
  // Nine full-bank PSUM tiles declared up front (as the legacy layer declares the blocks of
  // `nl.ndarray((9, nl.par_dim(128), 512), buffer=nl.psum)`), each used in one one-trip loop
  // (an unrolled iteration): each moves into its iteration, so they share bank 0 instead of
  // needing 9 of 8 banks. A tile used by two iterations stays where it was declared.
  std::vector<StmtPtr> body;
  std::vector<BufferPtr> tiles;
  for (int n = 0; n < 9; ++n) {
    tiles.push_back(psum(fmt::format("b{}", n), {128, 512}));
    body.push_back(alloc(tiles.back()));
  }
  auto shared = sbuf("shared", {128, 16});
  body.push_back(alloc(shared));
  for (int n = 0; n < 9; ++n)
    body.push_back(seq_for(fmt::format("i{}", n), 1, {touch(tiles[n]), touch(shared)}));
  Kernel out = allocate(kernel({}, {}, body), "trn2");
  auto c = collect(out);
  for (int n = 0; n < 9; ++n) CHECK(c.allocs[fmt::format("b{}", n)]->offset == 0);
  const auto& top = out.body->as<Block>()->stmts;
  REQUIRE(top.size() == 10);  // `shared` and the nine loops
  CHECK(top[0]->as<Alloc>()->buffer->name == "shared");
  auto first = top[1]->as<For>()->body->as<Block>();
  REQUIRE(first);
  CHECK(first->stmts[0]->as<Alloc>()->buffer->name == "b0");
  // A loop that repeats keeps its operands outside: a tile allocated in its body would be a
  // fresh tile each iteration.
  auto r = psum("r", {128, 512});
  Kernel rep = allocate(kernel({}, {}, {alloc(r), affine_for("k", 4, {touch(r)})}), "trn2");
  CHECK(rep.body->as<Block>()->stmts[0]->as<Alloc>());
}
