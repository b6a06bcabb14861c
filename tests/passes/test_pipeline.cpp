// The whole pipeline: a kernel using every nl helper legalizes into verified ISA instructions in
// the order worked out by hand, and dump_ir prints each pass.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "neuron/codegen/pipeline.hpp"
#include "passes/kernel_builder.hpp"

using namespace neuron;
using namespace neuron::tb;

namespace {

void flatten(const std::vector<ProgNode>& nodes, std::vector<const Instr*>& out) {
  for (auto& n : nodes) {
    if (n.kind == ProgNode::Kind::instr)
      out.push_back(&n.instr);
    else
      flatten(n.body, out);
  }
}

}  // namespace

TEST_CASE("compile: every nl helper legalizes into verified ISA instructions") {
  auto a = hbm("a", {128, 64}), b = hbm("b", {1, 64});
  auto o = hbm("o", {128, 64}), ot = hbm("ot", {64, 128});
  auto ta = sbuf("ta", {128, 64}), tb = sbuf("tb", {1, 64}), t1 = sbuf("t1", {128, 64});
  auto r = sbuf("r", {128, 1}), t2 = sbuf("t2", {128, 64}), t3 = sbuf("t3", {128, 64});
  auto t4 = sbuf("t4", {128, 64}), p = psum("p", {64, 128});
  Access b_rows = view(tb, {ds(0, 128, 0), ds(0, 64)});  // tb broadcast over partitions
  Access r_cols = view(r, {ds(0, 128), ds(0, 64, 0)});   // r broadcast along the free dim
  Kernel k =
      kernel({a, b}, {o, ot},
             {alloc(ta), alloc(tb), alloc(t1), alloc(r), alloc(t2), alloc(t3), alloc(t4), alloc(p),
              op(Opcode::nl_load, {{"dst", whole(ta)}, {"src", whole(a)}}),
              op(Opcode::nl_load, {{"dst", whole(tb)}, {"src", whole(b)}}),
              op(Opcode::nl_binary,
                 {{"dst", whole(t1)}, {"x", whole(ta)}, {"y", b_rows}, {"op", s("add")}}),
              op(Opcode::nl_reduce, {{"dst", whole(r)},
                                     {"x", whole(t1)},
                                     {"op", s("mean")},
                                     {"axes", std::vector<int64_t>{1}}}),
              op(Opcode::nl_binary,
                 {{"dst", whole(t2)}, {"x", whole(t1)}, {"y", r_cols}, {"op", s("subtract")}}),
              op(Opcode::nl_where,
                 {{"dst", whole(t3)}, {"cond", whole(t2)}, {"x", 1.0}, {"y", whole(t1)}}),
              op(Opcode::nl_unary, {{"dst", whole(t4)}, {"x", whole(t3)}, {"func", s("exp")}}),
              op(Opcode::nl_transpose, {{"dst", whole(p)}, {"src", whole(t4)}}),
              op(Opcode::nl_store, {{"dst", whole(ot)}, {"src", whole(p)}}),
              op(Opcode::nl_store, {{"dst", whole(o)}, {"src", whole(t4)}})});
  CompileOptions opts;
  opts.target = "trn1";
  Compiled c = compile(k, opts);
  std::vector<const Instr*> instrs;
  flatten(c.program.body, instrs);
  std::vector<Opcode> want = {
      Opcode::dma_copy,      Opcode::dma_copy,       // loads
      Opcode::dma_copy,      Opcode::tensor_tensor,  // row broadcast add
      Opcode::tensor_reduce, Opcode::tensor_scalar,  // mean
      Opcode::tensor_scalar,                         // minus column
      Opcode::tensor_copy,   Opcode::memset,        Opcode::tensor_copy_predicated,  // where
      Opcode::activation,    Opcode::nc_transpose,  // exp, transpose
      Opcode::tensor_copy,   Opcode::dma_copy,      // store from PSUM
      Opcode::dma_copy};                            // store
  REQUIRE(instrs.size() == want.size());
  for (size_t n = 0; n < want.size(); ++n) {
    CAPTURE(n);
    CHECK(instrs[n]->op == want[n]);
    CHECK(instrs[n]->id == static_cast<int>(n));
  }
  CHECK(c.program.target == "trn1");
  CHECK(c.program.num_instrs == 15);
  // The mean multiplies by 1/64 after summing 64 columns.
  CHECK(instrs[5]->args.op0 == AluOp::multiply);
  CHECK(instrs[5]->args.imm0 == doctest::Approx(1.0 / 64));
  // x - r: r is the [P,1] operand, not reversed.
  CHECK(instrs[6]->args.op0 == AluOp::subtract);
  CHECK(instrs[6]->args.operand0_tile);
  CHECK_FALSE(instrs[6]->args.reverse0);
  REQUIRE(instrs[6]->src.size() == 2);
  CHECK(instrs[6]->src[1].dims == std::vector<AccessPattern::Dim>{{1, 128}, {1, 1}});
  // The where's x=1.0 is set in a temp that the predicated copy reads.
  CHECK(instrs[8]->args.imm0 == 1.0);
  CHECK(instrs[9]->src[0].offset == instrs[8]->dst.offset);
  // Every pass ran, in order.
  REQUIRE(c.passes.size() == 6);
  CHECK(c.passes[1].changed);
}

TEST_CASE("compile: dump_ir prints each pass, 'unchanged' for passes that changed nothing") {
  auto a = sbuf("a", {128, 4});
  Kernel k = kernel({}, {}, {alloc(a), op(Opcode::memset, {{"dst", whole(a)}, {"value", 1.0}})});
  CompileOptions opts;
  opts.dump_ir = true;
  // Capture stderr in a temporary file for the duration of the compile.
  std::FILE* tmp = std::tmpfile();
  REQUIRE(tmp != nullptr);
  std::fflush(stderr);
  int saved = dup(fileno(stderr));
  dup2(fileno(tmp), fileno(stderr));
  compile(k, opts);
  std::fflush(stderr);
  dup2(saved, fileno(stderr));
  close(saved);
  std::rewind(tmp);
  std::string text;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, tmp)) > 0;) text.append(chunk, n);
  std::fclose(tmp);
  INFO(text);
  auto at = [&](const char* s) { return text.find(s); };
  REQUIRE(at("=== after verify (") != std::string::npos);
  CHECK(at("=== after verify (") < at("=== after legalize ("));
  CHECK(at("=== after legalize (") < at("=== after fresh_psum ("));
  CHECK(at("=== after fresh_psum (") < at("=== after verify_isa ("));
  CHECK(at("=== after verify_isa (") < at("=== after allocate ("));
  CHECK(at("=== after allocate (") < at("=== after lower ("));
  // verify, legalize (already ISA), fresh_psum (no auto matmul) and verify_isa print
  // "unchanged"; allocate prints the IR.
  size_t unchanged = 0;
  for (size_t p = 0; (p = text.find("\nunchanged\n", p)) != std::string::npos; ++p) ++unchanged;
  CHECK(unchanged == 4);
  CHECK(at("offset=0") != std::string::npos);
}
