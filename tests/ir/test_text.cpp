// The Kernel IR text form: exact printing, lossless round trip, spans, and parse errors.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>

#include "ir/samples.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"

using namespace neuron;
using namespace neuron::samples;

namespace {

void check_round_trip(const Kernel& k) {
  std::string text = print(k);
  Kernel back = parse_kernel(text);
  CHECK(equal(back, k));
  CHECK(hash_value(back) == hash_value(k));
  CHECK(print(back) == text);
}

const Op& op_at(const StmtPtr& block, size_t i) {
  auto b = block->as<Block>();
  REQUIRE(b);
  REQUIRE(i < b->stmts.size());
  auto o = b->stmts[i]->as<Op>();
  REQUIRE(o);
  return *o;
}

}  // namespace

TEST_CASE("the vector-add kernel prints as the documented text") {
  const char* expected =
      "kernel vector_add(a: float32[1024, 512] shared_hbm, b: float32[1024, 512] shared_hbm) -> "
      "(out: float32[1024, 512] shared_hbm) {\n"
      "  for i0 in affine_range(8) {\n"
      "    alloc t0: float32[128, 512] sbuf\n"
      "    nl.load(dst=t0[0:+128, 0:+512], src=a[i0*128:+128, 0:+512])\n"
      "    alloc t1: float32[128, 512] sbuf\n"
      "    nl.load(dst=t1[0:+128, 0:+512], src=b[i0*128:+128, 0:+512])\n"
      "    nl.binary(dst=t0[0:+128, 0:+512], x=t0[0:+128, 0:+512], y=t1[0:+128, 0:+512], "
      "op=\"add\")\n"
      "    nl.binary(dst=t1[0:+128, 0:+512], x=t0[0:+128, 0:+512], y=2.5, op=\"multiply\")\n"
      "    nl.store(dst=out[i0*128:+128, 0:+512], src=t1[0:+128, 0:+512])\n"
      "  }\n"
      "}\n";
  CHECK(print(vector_add()) == expected);
  check_round_trip(vector_add());
}

TEST_CASE("slices, allocations and values print in their documented forms") {
  auto t = buf("t", Memory::sbuf, {128, 64, 4}, DType::bfloat16);
  t->offset = 2048;
  t->slots = 2;
  t->slot_var = "i3";
  t->core = 1;
  Access a = view(t, {drop(v("i0", 2) + 1), sl(-v("i1") - v("pid0", 3) + 7, 64, 0), sl(0, 4, -2)});
  CHECK(print(a) == "t[i0*2 + 1, -i1 - pid0*3 + 7:+64:0, 0:+4:-2]");
  CHECK(print(Alloc::make(t)) ==
        "alloc t: bfloat16[128, 64, 4] sbuf core=1 offset=2048 slots=2 over i3\n");
  auto op = Op::make(Opcode::memset, {{"i", int64_t{3}},
                                      {"f", 3.0},
                                      {"g", 0.1},
                                      {"h", 1e-30},
                                      {"n", std::numeric_limits<double>::quiet_NaN()},
                                      {"m", -std::numeric_limits<double>::infinity()},
                                      {"z", -0.0},
                                      {"s", std::string("a\"b\\c\nd")},
                                      {"l", std::vector<int64_t>{1, 2}}});
  CHECK(print(op) ==
        "memset(i=3, f=3.0, g=0.1, h=1e-30, n=nan, m=-inf, z=-0.0, s=\"a\\\"b\\\\c\\nd\", l=[1, "
        "2])\n");
}

TEST_CASE("hand-written text parses into the expected nodes") {
  const char* text = R"(
    # a comment line
    kernel k(a: float32[1024, 512] shared_hbm) -> (out: int8[1024, 512] shared_hbm) {
      for i0 in sequential_range(8) {
        alloc t0: float32[128, 512] sbuf core=2 offset=64 slots=3 over i0
        nl.load(dst=t0[0:+128, 0:+512], src=a[i0*128 + 5:+128, 7])
        nl.binary(dst=t0[0:+128, 0:+512:0], x=t0[-i0 + 2:+128, 0:+512], y=2.5e3, op="multiply")
      }
    })";
  Kernel k = parse_kernel(text);
  CHECK(k.name == "k");
  REQUIRE(k.inputs.size() == 1);
  CHECK(k.outputs[0]->dtype == DType::int8);
  auto top = k.body->as<Block>();
  REQUIRE(top);
  auto loop = top->stmts.at(0)->as<For>();
  REQUIRE(loop);
  CHECK(loop->var == "i0");
  CHECK(loop->extent == 8);
  CHECK(loop->loop_kind == LoopKind::sequential);
  auto alloc = loop->body->as<Block>()->stmts.at(0)->as<Alloc>();
  REQUIRE(alloc);
  CHECK(alloc->buffer->shape == std::vector<int64_t>{128, 512});
  CHECK(alloc->buffer->core == 2);
  CHECK(alloc->buffer->offset == 64);
  CHECK(alloc->buffer->slots == 3);
  CHECK(alloc->buffer->slot_var == "i0");
  const Op& load = op_at(loop->body, 1);
  CHECK(load.code == Opcode::nl_load);
  CHECK(load.access("dst")->buffer == alloc->buffer);  // views share the declared buffer
  const Access* src = load.access("src");
  REQUIRE(src);
  CHECK(src->buffer == k.inputs[0]);
  CHECK(src->dims[0].start.coeff_of("i0") == 128);
  CHECK(src->dims[0].start.constant == 5);
  CHECK(src->dims[1].keep == false);
  CHECK(src->dims[1].start.constant == 7);
  CHECK(src->shape() == std::vector<int64_t>{128});
  const Op& bin = op_at(loop->body, 2);
  CHECK(bin.access("dst")->dims[1].step == 0);
  CHECK(bin.access("x")->dims[0].start.coeff_of("i0") == -1);
  CHECK(bin.access("x")->dims[0].start.constant == 2);
  CHECK(bin.get_float("y", 0) == 2500.0);
  CHECK(std::holds_alternative<double>(*bin.find("y")));
  CHECK(bin.get_string("op") == "multiply");
}

TEST_CASE("every statement, value, memory and dtype round-trips") {
  Kernel k = everything();
  check_round_trip(k);
  // Double bit patterns survive exactly (equality already requires it; check a few directly).
  Kernel back = parse_kernel(print(k));
  auto find_op = [](const Kernel& kk, Opcode code) -> const Op* {
    struct Finder {
      Opcode code;
      const Op* found = nullptr;
      void walk(const StmtPtr& s) {
        if (!s || found) return;
        if (auto b = s->as<Block>())
          for (auto& c : b->stmts) walk(c);
        if (auto f = s->as<For>()) walk(f->body);
        if (auto o = s->as<Op>(); o && o->code == code && !o->args.empty()) found = o;
      }
    } f{code};
    f.walk(kk.body);
    return f.found;
  };
  const Op* m = find_op(back, Opcode::memset);
  REQUIRE(m);
  CHECK(std::bit_cast<uint64_t>(m->get_float("a", 0)) == std::bit_cast<uint64_t>(0.1));
  CHECK(std::signbit(m->get_float("c", 0)));
  CHECK(m->get_float("c", 1) == 0.0);
  CHECK(std::isnan(m->get_float("f", 0)));
  CHECK(m->get_float("g", 0) == 5e-324);
  CHECK(m->get_float("j", 0) == 123456789.0);
  CHECK(std::holds_alternative<double>(*m->find("j")));
  const Op* p = find_op(back, Opcode::device_print);
  REQUIRE(p);
  CHECK(p->get_int("i_min", 0) == std::numeric_limits<int64_t>::min());
  CHECK(p->get_int("i_max", 0) == std::numeric_limits<int64_t>::max());
  CHECK(p->get_string("s") == "quote \" backslash \\ newline \n tab \t ctrl \x01 utf8 \xc3\xa9");
  CHECK(p->get_ints("list") == std::vector<int64_t>{1, -2, 3});
  CHECK(back.inputs.back()->name == "my buffer \"1\"");
  CHECK(back.outputs[1]->name == "inf");
}

TEST_CASE("spans print on request and parse back") {
  Kernel k = vector_add();
  k.span = Span{"kern.cpp", 3, 1};
  const_cast<Buffer&>(*k.inputs[0]).span = Span{"kern.cpp", 3, 20};
  // Rebuild the body with spans on every statement; the alloc's buffer gets its own span.
  auto loop = k.body->as<Block>()->stmts[0]->as<For>();
  std::vector<StmtPtr> stmts;
  int line = 10;
  for (auto& s : loop->body->as<Block>()->stmts) {
    if (auto a = s->as<Alloc>()) {
      const_cast<Buffer&>(*a->buffer).span = Span{"kern.cpp", line, 9};
      stmts.push_back(
          Alloc::make(a->buffer, Span{"kern.cpp", line, a->buffer->name == "t0" ? 9 : 5}));
    } else {
      auto o = s->as<Op>();
      stmts.push_back(Op::make(o->code, o->args, Span{"dir/kern \"x\".cpp", line, 5}));
    }
    ++line;
  }
  k.body =
      Block::make({For::make("i0", 8, LoopKind::affine, Block::make(stmts, Span{"kern.cpp", 9, 3}),
                             Span{"kern.cpp", 9, 3})},
                  Span{"kern.cpp", 4, 1});

  std::string plain = print(k), with = print(k, {true});
  CHECK(plain == print(vector_add()));  // canonical text never depends on spans
  CHECK(with.find("loc(\"kern.cpp\":9:3)") != std::string::npos);
  CHECK(with.find("buffer_loc(\"kern.cpp\":12:9)") != std::string::npos);  // t1's alloc differs
  CHECK(with.find("kernel vector_add(a: float32[1024, 512] shared_hbm loc(\"kern.cpp\":3:20)") ==
        0);

  Kernel back = parse_kernel(with);
  CHECK(print(back, {true}) == with);
  CHECK(equal(back, k));
  CHECK(back.span.line == 3);
  CHECK(back.inputs[0]->span.column == 20);
  auto bl = back.body->as<Block>()->stmts[0]->as<For>();
  CHECK(bl->span.line == 9);
  CHECK(bl->body->span.column == 3);
  auto b_stmts = bl->body->as<Block>()->stmts;
  CHECK(b_stmts[0]->span.column == 9);
  CHECK(b_stmts[0]->as<Alloc>()->buffer->span.column == 9);
  CHECK(b_stmts[2]->span.column == 5);
  CHECK(b_stmts[2]->as<Alloc>()->buffer->span.column == 9);
  CHECK(b_stmts[1]->span.file == "dir/kern \"x\".cpp");
  // The parser accepts text without spans: loops and blocks stay unknown, allocs and ops are
  // located in the IR text itself (so a parsed kernel's profile names its lines).
  Kernel bare = parse_kernel(plain, "kernel.ir");
  CHECK_FALSE(bare.body->as<Block>()->stmts[0]->span.known());
  auto inner = bare.body->as<Block>()->stmts[0]->as<For>()->body->as<Block>()->stmts;
  CHECK(inner[0]->span.file == "kernel.ir");
  CHECK(inner[0]->span.line == 3);
  CHECK(inner[1]->span.line == 4);
  CHECK(inner[1]->span.column == 5);
}

TEST_CASE("every memory and loop kind name parses") {
  const char* text =
      "kernel m(a: float32[2] hbm, b: float32[2] shared_hbm, c: float32[2] sbuf, d: float32[2] "
      "psum) -> () {\n"
      "  for i in affine_range(1) for j in sequential_range(1) {}\n"
      "}";
  Kernel k = parse_kernel(text);
  CHECK(k.inputs[0]->memory == Memory::hbm);
  CHECK(k.inputs[1]->memory == Memory::shared_hbm);
  CHECK(k.inputs[2]->memory == Memory::sbuf);
  CHECK(k.inputs[3]->memory == Memory::psum);
  auto f = k.body->as<Block>()->stmts[0]->as<For>();
  REQUIRE(f);
  CHECK(f->body->as<For>()->loop_kind == LoopKind::sequential);
  check_round_trip(k);
}

TEST_CASE("the IR after the compile pipeline round-trips") {
  // Legalized and allocated IR: ISA opcodes, offsets, rotating slots.
  Compiled c = compile(vector_add());
  std::string text = print(c.kernel);
  CHECK(text.find("alloc t0: float32[128, 512] sbuf offset=") != std::string::npos);
  CHECK(text.find("slots=3 over i0") != std::string::npos);
  Kernel back = parse_kernel(text);
  CHECK(equal(back, c.kernel));
  CHECK(print(back) == text);
  // The engine program listing has one line per instruction inside the rolled loop.
  std::string listing = print(c.program);
  CHECK(listing.find("for i0 in affine_range(8) {") != std::string::npos);
  size_t instr_lines = 0;
  for (size_t pos = 0; (pos = listing.find("\n    [", pos)) != std::string::npos; ++pos)
    ++instr_lines;
  CHECK(instr_lines == static_cast<size_t>(c.program.num_instrs));
}
