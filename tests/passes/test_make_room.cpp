// tile_versions and early_psum_reads, and compile()'s use of them for a kernel that does not fit
// SBUF or PSUM as written: live ranges computed by hand from the statement order.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "passes/kernel_builder.hpp"

using namespace neuron;
using namespace neuron::tb;

namespace {

struct AllocsNamed : IRVisitor {
  std::string name;
  int count = 0;
  void visit_Alloc(const Alloc& a) override { count += a.buffer->name == name; }
};

int allocs_named(const Kernel& k, const std::string& name) {
  AllocsNamed v;
  v.name = name;
  v.visit(k.body);
  return v.count;
}

StmtPtr dma(Access dst, Access src, int64_t oob_mode = 0) {
  return op(Opcode::dma_copy, {{"dst", std::move(dst)}, {"src", std::move(src)},
                               {"oob_mode", oob_mode}});
}

const Op& op_at(const Kernel& k, size_t i) {
  return *k.body->as<Block>()->stmts.at(i)->as<Op>();
}

// a = in0 -> out0; b = in1 -> out1; a = <reload> -> out2. a and b take 120000 bytes per
// partition each: both at once exceed trn2's 212984.
struct Reload {
  BufferPtr a = sbuf("a", {128, 30000}), b = sbuf("b", {128, 30000});
  std::vector<BufferPtr> in, out;
  Reload() {
    for (int n = 0; n < 3; ++n) {
      in.push_back(hbm(fmt::format("in{}", n), {128, 30000}));
      out.push_back(hbm(fmt::format("out{}", n), {128, 30000}));
    }
  }
  Kernel with(StmtPtr reload) const {
    return kernel(in, out,
                  {alloc(a), alloc(b), dma(whole(a), whole(in[0])), dma(whole(out[0]), whole(a)),
                   dma(whole(b), whole(in[1])), dma(whole(out[1]), whole(b)), std::move(reload),
                   dma(whole(out[2]), whole(a))});
  }
};

}  // namespace

TEST_CASE("tile_versions: a whole overwrite starts a new buffer, so a reload leaves a hole") {
  Reload r;
  Kernel k = r.with(dma(whole(r.a), whole(r.in[2])));
  CHECK_THROWS_AS(allocate(k, "trn2"), UserError);  // a lives from its load to out2
  Kernel v = tile_versions(k);
  CHECK(allocs_named(v, "a") == 2);
  // The version's Alloc comes right before the reload, which and whose reader use it.
  const auto& stmts = v.body->as<Block>()->stmts;
  REQUIRE(stmts.size() == 9);
  auto second = stmts[6]->as<Alloc>();
  REQUIRE(second);
  CHECK(second->buffer != r.a);
  CHECK(op_at(v, 2).access("dst")->buffer == r.a);
  CHECK(op_at(v, 3).access("src")->buffer == r.a);
  CHECK(op_at(v, 7).access("dst")->buffer == second->buffer);
  CHECK(op_at(v, 8).access("src")->buffer == second->buffer);
  CHECK_NOTHROW(allocate(v, "trn2"));
  CHECK_NOTHROW(compile(k));
}

TEST_CASE("tile_versions: only a whole, unconditional overwrite that does not read the tile") {
  Reload r;
  auto half = view(r.a, {ds(0, 64), ds(0, 30000)});
  const std::vector<std::pair<const char*, StmtPtr>> kept = {
      {"a partial overwrite", dma(half, view(r.in[2], {ds(0, 64), ds(0, 30000)}))},
      {"an update that reads the tile",
       op(Opcode::tensor_scalar, {{"dst", whole(r.a)}, {"data", whole(r.a)},
                                  {"op0", s("add")}, {"operand0", 1.0}})},
      {"an overwrite in a loop", seq_for("i", 1, {dma(whole(r.a), whole(r.in[2]))})},
  };
  for (auto& [what, reload] : kept) {
    CAPTURE(what);
    Kernel k = r.with(reload);
    CHECK(allocs_named(tile_versions(k), "a") == 1);
    CHECK_THROWS_AS(compile(k), UserError);  // so it does not fit
  }
  // Rows a DMA skips (oob_mode=skip) keep their values, unless asked to count as undefined:
  // compile's last resort, which then fits the kernel.
  Kernel skip = r.with(dma(whole(r.a), whole(r.in[2]), 1));
  CHECK(allocs_named(tile_versions(skip), "a") == 1);
  CHECK(allocs_named(tile_versions(skip, SkippedRows::undefined), "a") == 2);
  CHECK_NOTHROW(compile(skip));
}

TEST_CASE("early_psum_reads: each PSUM tile drains right after it is complete") {
  // Nine one-bank PSUM tiles filled in one loop and drained in the next need 9 of 8 banks;
  // drained as each is complete, one bank at a time.
  std::vector<BufferPtr> p, t;
  auto out = hbm("out", {128, 9 * 512});
  std::vector<StmtPtr> body;
  for (int n = 0; n < 9; ++n) {
    p.push_back(psum(fmt::format("p{}", n), {128, 512}));
    t.push_back(sbuf(fmt::format("t{}", n), {128, 512}));
    body.push_back(alloc(p.back()));
    body.push_back(alloc(t.back()));
  }
  for (int n = 0; n < 9; ++n)
    body.push_back(op(Opcode::memset, {{"dst", whole(p[n])}, {"value", 1.0 * n}}));
  // t0 is written between p0's fill and its drain: that drain may not pass the write.
  body.push_back(op(Opcode::memset, {{"dst", whole(t[0])}, {"value", -1.0}}));
  for (int n = 0; n < 9; ++n)
    body.push_back(op(Opcode::tensor_tensor, {{"dst", whole(t[n])}, {"data1", whole(p[n])},
                                              {"data2", whole(t[n])}, {"op", s("add")}}));
  for (int n = 0; n < 9; ++n)
    body.push_back(dma(view(out, {ds(0, 128), ds(n * 512, 512)}), whole(t[n])));
  Kernel k = kernel({}, {out}, body);
  CHECK_THROWS_AS(allocate(k, "trn2"), UserError);

  Kernel e = early_psum_reads(k);
  const auto& stmts = e.body->as<Block>()->stmts;
  REQUIRE(stmts.size() == k.body->as<Block>()->stmts.size());
  auto position = [&](Opcode code, const BufferPtr& dst) {
    for (size_t i = 0; i < stmts.size(); ++i)
      if (auto o = stmts[i]->as<Op>(); o && o->code == code && o->access("dst")->buffer == dst)
        return i;
    FAIL("not found");
    return size_t{0};
  };
  for (int n = 1; n < 9; ++n)  // right after its fill
    CHECK(position(Opcode::tensor_tensor, t[n]) == position(Opcode::memset, p[n]) + 1);
  CHECK(position(Opcode::tensor_tensor, t[0]) == position(Opcode::memset, t[0]) + 1);
  for (int n = 0; n < 9; ++n)  // the stores stay after their drains, in their order
    CHECK(position(Opcode::dma_copy, out) > position(Opcode::tensor_tensor, t[n]));
  CHECK_NOTHROW(allocate(e, "trn2"));
  CHECK_NOTHROW(compile(k));
}

TEST_CASE("compile: a kernel that fits keeps its statements as written") {
  auto small_a = sbuf("a", {128, 100}), small_b = sbuf("b", {128, 100});
  auto in = hbm("in", {128, 100}), out = hbm("out", {128, 100});
  Kernel k = kernel({in}, {out},
                    {alloc(small_a), alloc(small_b), dma(whole(small_a), whole(in)),
                     dma(whole(small_b), whole(small_a)), dma(whole(small_a), whole(in)),
                     dma(whole(out), whole(small_a))});
  Compiled c = compile(k);
  CHECK(allocs_named(c.kernel, "a") == 1);  // no versions: the reload reuses a's bytes
}
