// Tracing C++ kernels into the Kernel IR: node-by-node structure, names, loops, spans.
#include <doctest/doctest.h>

#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

namespace {

const Block& block_of(const StmtPtr& s) {
  auto b = s->as<Block>();
  REQUIRE(b != nullptr);
  return *b;
}

const Op& op_at(const Block& b, size_t i) {
  REQUIRE(i < b.stmts.size());
  auto op = b.stmts[i]->as<Op>();
  REQUIRE(op != nullptr);
  return *op;
}

const Buffer& alloc_at(const Block& b, size_t i) {
  REQUIRE(i < b.stmts.size());
  auto a = b.stmts[i]->as<Alloc>();
  REQUIRE(a != nullptr);
  return *a->buffer;
}

const For& for_at(const Block& b, size_t i) {
  REQUIRE(i < b.stmts.size());
  auto f = b.stmts[i]->as<For>();
  REQUIRE(f != nullptr);
  return *f;
}

DimSlice dim(Affine start, int64_t size, int64_t step = 1, bool keep = true) {
  return DimSlice{std::move(start), size, step, keep};
}

Affine var(const char* name, int64_t coeff = 1) {
  return Affine::var(name, coeff);
}

}  // namespace

TEST_CASE("trace: load, add, store into a returned shared_hbm output") {
  int line_load = 0, line_add = 0, line_store = 0, line_trace = 0;
  line_trace = __LINE__ + 1;
  Kernel k = trace(
      "add",
      [&](nl::tensor a, nl::tensor b) {
        nl::tensor out = nl::ndarray({128, 512}, nl::float32, nl::shared_hbm);
        line_load = __LINE__ + 1;
        nl::tensor x = nl::load(a);
        nl::tensor y = nl::load(b);
        line_add = __LINE__ + 1;
        nl::tensor z = x + y;
        line_store = __LINE__ + 1;
        nl::store(out, z);
        return out;
      },
      {TensorSpec{{128, 512}, DType::float32}, TensorSpec{{128, 512}, DType::float32, "bias"}});

  CHECK(k.name == "add");
  CHECK(k.span.line == line_trace);
  REQUIRE(k.inputs.size() == 2);
  CHECK(k.inputs[0]->name == "in0");
  CHECK(k.inputs[1]->name == "bias");
  CHECK(k.inputs[0]->memory == Memory::shared_hbm);
  REQUIRE(k.outputs.size() == 1);
  CHECK(k.outputs[0]->name == "out0");
  CHECK(k.outputs[0]->shape == std::vector<int64_t>{128, 512});

  const Block& body = block_of(k.body);
  // Alloc t0, load, Alloc t1, load, Alloc t2, binary, store.
  REQUIRE(body.stmts.size() == 7);
  const Buffer& t0 = alloc_at(body, 0);
  CHECK(t0.name == "t0");
  CHECK(t0.memory == Memory::sbuf);
  CHECK(t0.shape == std::vector<int64_t>{128, 512});
  CHECK(t0.span.line == line_load);
  const Op& load = op_at(body, 1);
  CHECK(load.code == Opcode::nl_load);
  CHECK(load.span.line == line_load);
  CHECK(load.args.size() == 2);
  CHECK(load.args[0].name == "dst");
  CHECK(load.access("dst")->buffer->name == "t0");
  CHECK(load.access("src")->buffer == k.inputs[0]);

  const Op& add = op_at(body, 5);
  CHECK(add.code == Opcode::nl_binary);
  CHECK(add.span.line == line_add);
  CHECK(add.get_string("op") == "add");
  CHECK(add.access("x")->buffer->name == "t0");
  CHECK(add.access("y")->buffer->name == "t1");
  CHECK(add.access("dst")->buffer->name == "t2");
  CHECK(add.access("dst")->buffer->dtype == DType::float32);

  const Op& store = op_at(body, 6);
  CHECK(store.code == Opcode::nl_store);
  CHECK(store.span.line == line_store);
  CHECK(store.access("dst")->buffer == k.outputs[0]);
  CHECK(store.access("src")->buffer->name == "t2");
}

TEST_CASE("trace: affine_range is rolled and traced once; static_range unrolls") {
  int rolled = 0, unrolled = 0, line_loop = 0;
  Kernel k = trace("loops",
                   [&](nl::tensor a) {
                     nl::tensor out = nl::ndarray({1024, 128}, nl::float32, nl::shared_hbm);
                     line_loop = __LINE__ + 1;
                     for (nl::index i : nl::affine_range(8)) {
                       ++rolled;
                       nl::tensor t = nl::load(a(nl::ds(i * 128, 128), nl::all));
                       nl::store(out(nl::ds(i * 128, 128), nl::all), t);
                     }
                     for (int64_t j : nl::static_range(3)) {
                       ++unrolled;
                       nl::tensor t = nl::load(a(nl::ds(j * 128, 128), nl::slice(0, 64, 2)));
                       (void)t;
                     }
                     return out;
                   },
                   {TensorSpec{{1024, 128}, DType::bfloat16}});

  CHECK(rolled == 1);
  CHECK(unrolled == 3);
  const Block& body = block_of(k.body);
  REQUIRE(body.stmts.size() == 1 + 3 * 2);
  const For& loop = for_at(body, 0);
  CHECK(loop.var == "i0");
  CHECK(loop.extent == 8);
  CHECK(loop.loop_kind == LoopKind::affine);
  CHECK(loop.span.line == line_loop);
  const Block& lb = block_of(loop.body);
  REQUIRE(lb.stmts.size() == 3);
  const Buffer& tile = alloc_at(lb, 0);
  CHECK(tile.shape == std::vector<int64_t>{128, 128});
  CHECK(tile.dtype == DType::bfloat16);
  const Op& load = op_at(lb, 1);
  const Access& src = *load.access("src");
  REQUIRE(src.dims.size() == 2);
  CHECK(src.dims[0] == dim(var("i0", 128), 128));
  CHECK(src.dims[1] == dim(0, 128));
  const Op& store = op_at(lb, 2);
  CHECK(store.access("dst")->dims[0] == dim(var("i0", 128), 128));

  // Unrolled copies use constant offsets and the strided slice.
  const Op& load2 = op_at(body, 2 + 2 * 2);
  const Access& src2 = *load2.access("src");
  CHECK(src2.dims[0] == dim(256, 128));
  CHECK(src2.dims[1] == dim(0, 32, 2));
  CHECK(load2.access("dst")->buffer->shape == std::vector<int64_t>{128, 32});
}

TEST_CASE("trace: nested loops number their variables in opening order; ranges with start/step") {
  Kernel k = trace("nest",
                   [&](nl::tensor a) {
                     nl::tensor out = nl::ndarray({512, 512}, nl::float32, nl::shared_hbm);
                     for (nl::index i : nl::sequential_range(4)) {
                       for (nl::index j : nl::affine_range(1, 5, 2)) {
                         nl::tensor t = nl::load(a(nl::ds(i * 128, 128), nl::ds(j * 64 + 8, 64)));
                         nl::store(out(nl::ds(i * 128, 128), nl::ds(j * 64, 64)), t);
                       }
                     }
                     for (nl::index m : nl::affine_range(2)) {
                       nl::tensor t = nl::load(a(nl::ds(m * 128, 128), nl::ds(0, 512)));
                       nl::store(out(nl::ds(m * 128, 128), nl::all), t);
                     }
                     return out;
                   },
                   {TensorSpec{{512, 1024}, DType::float32}});

  const Block& body = block_of(k.body);
  REQUIRE(body.stmts.size() == 2);
  const For& outer = for_at(body, 0);
  CHECK(outer.var == "i0");
  CHECK(outer.loop_kind == LoopKind::sequential);
  const For& inner = for_at(block_of(outer.body), 0);
  CHECK(inner.var == "i1");
  CHECK(inner.extent == 2);  // 1, 3
  const Op& load = op_at(block_of(inner.body), 1);
  // j = 1 + 2*i1, so j*64 + 8 = i1*128 + 72.
  CHECK(load.access("src")->dims[1].start == var("i1", 128) + 72);
  CHECK(load.access("src")->dims[0].start == var("i0", 128));
  const For& last = for_at(body, 1);
  CHECK(last.var == "i2");
}

TEST_CASE("trace: break inside affine_range closes the loop and keeps the IR well formed") {
  Kernel k = trace("brk",
                   [&](nl::tensor a) {
                     nl::tensor out = nl::ndarray({128, 64}, nl::float32, nl::shared_hbm);
                     for (nl::index i : nl::affine_range(4)) {
                       nl::tensor t = nl::load(a(nl::ds(i * 128, 128), nl::all));
                       nl::store(out, t);
                       break;
                     }
                     nl::tensor u = nl::load(a(nl::ds(0, 128), nl::all));
                     nl::store(out, u);
                     return out;
                   },
                   {TensorSpec{{512, 64}, DType::float32}});
  const Block& body = block_of(k.body);
  REQUIRE(body.stmts.size() == 4);
  const For& loop = for_at(body, 0);
  CHECK(block_of(loop.body).stmts.size() == 3);
  CHECK(alloc_at(body, 1).name == "t1");
  CHECK(op_at(body, 2).code == Opcode::nl_load);
  CHECK(op_at(body, 3).code == Opcode::nl_store);
}

TEST_CASE("trace: empty affine_range traces no body and emits no loop") {
  int count = 0;
  Kernel k = trace("empty",
                   [&](nl::tensor a) {
                     nl::tensor out = nl::ndarray({128, 64}, nl::float32, nl::shared_hbm);
                     for (nl::index i : nl::affine_range(3, 3)) {
                       (void)i;
                       ++count;
                     }
                     nl::store(out, nl::load(a));
                     return out;
                   },
                   {TensorSpec{{128, 64}, DType::float32}});
  CHECK(count == 0);
  CHECK(block_of(k.body).stmts.size() == 3);
}

TEST_CASE("trace: on-chip and HBM scalar subscripts follow NKI's rank rules") {
  Kernel k = trace("idx",
                   [&](nl::tensor a) {
                     nl::tensor out = nl::ndarray({4, 128, 64}, nl::float32, nl::shared_hbm);
                     nl::tensor t = nl::ndarray({128, 4, 64}, nl::float32);
                     CHECK(t(nl::all, 0, 10).shape() == std::vector<int64_t>{128, 1});
                     CHECK(t(0, 0, 10).shape() == std::vector<int64_t>{1, 1});
                     CHECK(t(nl::all, 2).shape() == std::vector<int64_t>{128, 64});
                     CHECK(t[5].shape() == std::vector<int64_t>{1, 4, 64});
                     CHECK(a[2].shape() == std::vector<int64_t>{128, 64});
                     CHECK(a(1, 2, 3).shape() == std::vector<int64_t>{1});
                     // A view of a view: indices compose.
                     nl::tensor v = a(1, nl::ds(8, 64));
                     CHECK(v.shape() == std::vector<int64_t>{64, 64});
                     nl::tensor w = v(nl::slice(4, 12, 2), nl::ds(1, 3));
                     CHECK(w.shape() == std::vector<int64_t>{4, 3});
                     const Access& acc = w.access();
                     CHECK(acc.dims[0] == dim(1, 1, 1, false));
                     CHECK(acc.dims[1] == dim(12, 4, 2));
                     CHECK(acc.dims[2] == dim(1, 3));
                     nl::tensor x = t(nl::all, 3, nl::all);
                     CHECK(x.access().dims[1] == dim(3, 1, 1, false));
                     nl::store(out, a);
                     return out;
                   },
                   {TensorSpec{{4, 128, 64}, DType::float32}});
  (void)k;
}

TEST_CASE("trace: broadcasting becomes step-0 views and scalars stay floats") {
  Kernel k = trace("bc",
                   [&](nl::tensor a, nl::tensor b) {
                     nl::tensor out = nl::ndarray({128, 512}, nl::bfloat16, nl::shared_hbm);
                     nl::tensor x = nl::load(a);         // [128,512] bf16
                     nl::tensor m = nl::max(x, 1);       // [128,1]
                     nl::tensor y = nl::subtract(x, m);  // m broadcast along free axis
                     nl::tensor r = nl::load(b);         // [1,512] fp32
                     nl::tensor z = y * r;               // r broadcast across partitions; promoted
                     nl::tensor s = 2.0f * z;            // scalar stays a float
                     nl::tensor q = 1.0 - s;             // non-commutative: memset tile
                     nl::tensor c = s > 0.5;             // comparison in the input dtype
                     nl::store(out, nl::where(c, q, 0.0));
                     return out;
                   },
                   {TensorSpec{{128, 512}, DType::bfloat16}, TensorSpec{{1, 512}, DType::float32}});

  const Block& body = block_of(k.body);
  std::vector<const Op*> ops;
  for (auto& s : body.stmts)
    if (auto op = s->as<Op>()) ops.push_back(op);
  REQUIRE(ops.size() == 11);
  // nl.max
  CHECK(ops[1]->code == Opcode::nl_reduce);
  CHECK(ops[1]->get_string("op") == "maximum");
  CHECK(ops[1]->get_ints("axes") == std::vector<int64_t>{1});
  CHECK(ops[1]->access("dst")->buffer->shape == std::vector<int64_t>{128, 1});
  // subtract: y operand is [128, 1] broadcast to [128, 512] with step 0.
  const Access& my = *ops[2]->access("y");
  CHECK(my.dims[0] == dim(0, 128));
  CHECK(my.dims[1] == dim(0, 512, 0));
  CHECK(ops[2]->access("dst")->buffer->dtype == DType::bfloat16);
  // multiply: r is [1,512] broadcast across partitions; bf16 * fp32 -> fp32.
  const Access& ry = *ops[4]->access("y");
  CHECK(ry.dims[0] == dim(0, 128, 0));
  CHECK(ry.dims[1] == dim(0, 512));
  CHECK(ops[4]->access("dst")->buffer->dtype == DType::float32);
  // 2.0f * z: swapped so the tile is x and the float is y.
  CHECK(ops[5]->get_string("op") == "multiply");
  CHECK(ops[5]->access("x")->buffer->name == ops[4]->access("dst")->buffer->name);
  REQUIRE(std::holds_alternative<double>(*ops[5]->find("y")));
  CHECK(std::get<double>(*ops[5]->find("y")) == 2.0);
  // 1.0 - s: the scalar becomes a memset tile.
  CHECK(ops[6]->code == Opcode::memset);
  CHECK(ops[6]->get_float("value", 0) == 1.0);
  CHECK(ops[7]->get_string("op") == "subtract");
  CHECK(ops[7]->access("x")->buffer == ops[6]->access("dst")->buffer);
  // s > 0.5
  CHECK(ops[8]->get_string("op") == "greater");
  CHECK(ops[8]->access("dst")->buffer->dtype == DType::float32);
  // where with a float else-branch
  CHECK(ops[9]->code == Opcode::nl_where);
  CHECK(std::get<double>(*ops[9]->find("y")) == 0.0);
}

TEST_CASE("trace: reductions keep or drop dims, mean of ints is fp32") {
  Kernel k =
      trace("red",
            [&](nl::tensor a) {
              nl::tensor out = nl::ndarray({128, 1}, nl::float32, nl::shared_hbm);
              nl::tensor t = nl::ndarray({128, 4, 64}, nl::int32);
              CHECK(nl::sum(t, 2).shape() == std::vector<int64_t>{128, 4});
              CHECK(nl::sum(t, 2, std::nullopt, true).shape() == std::vector<int64_t>{128, 4, 1});
              CHECK(nl::sum(t, {1, 2}).shape() == std::vector<int64_t>{128, 1});
              nl::tensor m = nl::mean(t, -1);
              CHECK(m.dtype() == DType::float32);
              nl::store(out, nl::min(nl::load(a), 1));
              return out;
            },
            {TensorSpec{{128, 64}, DType::float32}});
  const Block& body = block_of(k.body);
  const Op& r = op_at(body, 2);
  CHECK(r.code == Opcode::nl_reduce);
  CHECK(r.get_string("op") == "add");
  CHECK(r.access("dst")->buffer->shape == std::vector<int64_t>{128, 4, 1});
}

TEST_CASE("trace: matmul, transpose, unary functions and in-place accumulation") {
  Kernel k =
      trace("mm",
            [&](nl::tensor a, nl::tensor b) {
              nl::tensor out = nl::ndarray({128, 512}, nl::float32, nl::shared_hbm);
              nl::tensor acc = nl::zeros({128, 512}, nl::float32, nl::sbuf, "acc");
              for (nl::index kk : nl::affine_range(4)) {
                nl::tensor x = nl::load(a(nl::ds(kk * 128, 128), nl::all));  // [K=128, M=128]
                nl::tensor y = nl::load(b(nl::ds(kk * 128, 128), nl::all));  // [K=128, N=512]
                nl::tensor p = nl::matmul(x, y, true);
                acc += p;
              }
              nl::tensor e = nl::exp(acc);
              nl::tensor tt = nl::transpose(nl::copy(e(nl::all, nl::ds(0, 128)), nl::bfloat16));
              (void)tt;
              nl::store(out, e);
              return out;
            },
            {TensorSpec{{512, 128}, DType::bfloat16}, TensorSpec{{512, 512}, DType::bfloat16}});
  const Block& body = block_of(k.body);
  CHECK(alloc_at(body, 0).name == "acc");
  const Op& ms = op_at(body, 1);
  CHECK(ms.code == Opcode::memset);
  CHECK(ms.get_float("value", -1) == 0.0);
  const For& loop = for_at(body, 2);
  const Block& lb = block_of(loop.body);
  const Op& mm = op_at(lb, 5);
  CHECK(mm.code == Opcode::nl_matmul);
  CHECK(mm.get_int("transpose_x", -1) == 1);
  CHECK(mm.access("dst")->buffer->memory == Memory::psum);
  CHECK(mm.access("dst")->buffer->dtype == DType::float32);
  CHECK(mm.access("dst")->buffer->shape == std::vector<int64_t>{128, 512});
  const Op& upd = op_at(lb, 6);
  CHECK(upd.code == Opcode::nl_binary);
  CHECK(upd.access("dst")->buffer->name == "acc");
  CHECK(upd.access("x")->buffer->name == "acc");
  CHECK(upd.get_string("op") == "add");
  const Op& ex = op_at(body, 4);
  CHECK(ex.code == Opcode::nl_unary);
  CHECK(ex.get_string("func") == "exp");
  const Op& cp = op_at(body, 6);
  CHECK(cp.code == Opcode::nl_copy);
  CHECK(cp.access("dst")->buffer->dtype == DType::bfloat16);
  const Op& tr = op_at(body, 8);
  CHECK(tr.code == Opcode::nl_transpose);
  CHECK(tr.access("dst")->buffer->memory == Memory::psum);
  CHECK(tr.access("dst")->buffer->dtype == DType::bfloat16);
}

TEST_CASE("trace: program ids, void kernels and multiple outputs") {
  Kernel k = trace("spmd",
                   [&](nl::tensor a) {
                     nl::tensor o1 = nl::ndarray({256, 64}, nl::float32, nl::shared_hbm, "first");
                     nl::tensor o2 = nl::ndarray({256, 64}, nl::float32, nl::shared_hbm);
                     nl::index p = nl::program_id(0);
                     nl::tensor t = nl::load(a(nl::ds(p * 128, 128), nl::all));
                     nl::store(o1(nl::ds(p * 128, 128), nl::all), t);
                     nl::store(o2(nl::ds(nl::num_programs(0) - p - 1, 128), nl::all), t);
                   },
                   {TensorSpec{{256, 64}, DType::float32}});
  REQUIRE(k.outputs.size() == 2);
  CHECK(k.outputs[0]->name == "first");
  CHECK(k.outputs[1]->name == "out0");
  const Op& ld = op_at(block_of(k.body), 1);
  CHECK(ld.access("src")->dims[0].start == Affine::var("pid0", 128));
  const Op& st = op_at(block_of(k.body), 3);
  CHECK(st.access("dst")->dims[0].start == Affine::var("npid0") - Affine::var("pid0") - 1);

  Kernel k2 = trace("tuple",
                    [&](nl::tensor a) {
                      nl::tensor o1 = nl::ndarray({128, 64}, nl::float32, nl::shared_hbm);
                      nl::tensor o2 = nl::ndarray({128, 64}, nl::float32, nl::shared_hbm);
                      nl::tensor t = nl::load(a);
                      nl::store(o1, t);
                      nl::store(o2, t);
                      return std::make_tuple(o2, o1);
                    },
                    {TensorSpec{{128, 64}, DType::float32}});
  REQUIRE(k2.outputs.size() == 2);
  CHECK(k2.outputs[0]->name == "out1");
  CHECK(k2.outputs[1]->name == "out0");
}

TEST_CASE("trace: printed text of a traced kernel, and it parses back equal") {
  Kernel k = trace("scale",
                   [](nl::tensor a) {
                     nl::tensor out = nl::ndarray({512, 64}, nl::float32, nl::shared_hbm);
                     for (nl::index i : nl::affine_range(4)) {
                       nl::tensor t = nl::load(a(nl::ds(i * 128, 128), nl::all));
                       nl::tensor s = nl::sum(t, 1);
                       nl::store(out(nl::ds(i * 128, 128), nl::all), t * s);
                     }
                     return out;
                   },
                   {TensorSpec{{512, 64}, DType::bfloat16}});
  const char* expected =
      "kernel scale(in0: bfloat16[512, 64] shared_hbm) -> (out0: float32[512, 64] shared_hbm) {\n"
      "  for i0 in affine_range(4) {\n"
      "    alloc t0: bfloat16[128, 64] sbuf\n"
      "    nl.load(dst=t0[0:+128, 0:+64], src=in0[i0*128:+128, 0:+64])\n"
      "    alloc t1: bfloat16[128, 1] sbuf\n"
      "    nl.reduce(dst=t1[0:+128, 0:+1], x=t0[0:+128, 0:+64], op=\"add\", axes=[1])\n"
      "    alloc t2: bfloat16[128, 64] sbuf\n"
      "    nl.binary(dst=t2[0:+128, 0:+64], x=t0[0:+128, 0:+64], y=t1[0:+128, 0:+64:0], "
      "op=\"multiply\")\n"
      "    nl.store(dst=out0[i0*128:+128, 0:+64], src=t2[0:+128, 0:+64])\n"
      "  }\n"
      "}\n";
  std::string text = print(k);
  CHECK(text == expected);
  CHECK(equal(parse_kernel(text), k));
}

TEST_CASE("trace: isa instructions carry the documented keyword arguments") {
  int line_mm = 0;
  Kernel k =
      trace("isa",
            [&](nl::tensor a, nl::tensor b) {
              nl::tensor out = nl::ndarray({128, 512}, nl::float32, nl::shared_hbm);
              nl::tensor x = nl::ndarray({128, 128}, nl::bfloat16);
              nl::tensor y = nl::ndarray({128, 512}, nl::bfloat16);
              isa::dma_copy(x, a);
              isa::dma_copy(y, b);
              nl::tensor p = nl::ndarray({128, 512}, nl::float32, nl::psum);
              line_mm = __LINE__ + 1;
              isa::nc_matmul(p, x, y);
              isa::nc_matmul(p, x, y, true);
              isa::nc_matmul(p, x, y, int64_t{0});
              nl::tensor s = nl::ndarray({128, 512}, nl::float32);
              nl::tensor r = nl::ndarray({128, 1}, nl::float32);
              isa::activation(s, nl::exp, p, std::nullopt, 0.5, nl::add, r);
              isa::tensor_scalar(s, s, nl::subtract, r, true, nl::multiply, 2.0);
              isa::tensor_tensor(s, s, p, nl::maximum);
              isa::tensor_reduce(r, nl::max, s, -1, true);
              isa::memset(x, 0.0);
              nl::tensor idx = nl::ndarray({128, 512}, nl::int32);
              isa::iota(idx, {{1, 512}}, 0, -1);
              isa::affine_select(s, {{-1, 512}}, 1, s, -1e9, nl::greater_equal);
              isa::tensor_copy_predicated(s, p, idx);
              isa::nc_transpose(p(nl::ds(0, 128), nl::ds(0, 128)), x);
              isa::tensor_copy(s, p);
              nl::device_print("s=", s);
              isa::dma_copy(out, s);
              return out;
            },
            {TensorSpec{{128, 128}, DType::bfloat16}, TensorSpec{{128, 512}, DType::bfloat16}});
  std::vector<const Op*> ops;
  for (auto& s : block_of(k.body).stmts)
    if (auto op = s->as<Op>()) ops.push_back(op);
  REQUIRE(ops.size() == 17);
  CHECK(ops[4]->get_int("accumulate", -1) == 0);
  ops.erase(ops.begin() + 4);
  auto names = [](const Op* op) {
    std::vector<std::string> n;
    for (auto& a : op->args) n.push_back(a.name);
    return n;
  };
  using S = std::vector<std::string>;
  CHECK(names(ops[2]) == S{"dst", "stationary", "moving", "accumulate"});
  CHECK(ops[2]->get_int("accumulate", 0) == -1);
  CHECK(ops[2]->span.line == line_mm);
  CHECK(ops[3]->get_int("accumulate", 0) == 1);
  CHECK(names(ops[4]) == S{"dst", "data", "func", "scale", "reduce_op", "reduce_res"});
  CHECK(ops[4]->get_string("func") == "exp");
  CHECK(ops[4]->get_float("scale", 0) == 0.5);
  CHECK(ops[4]->get_string("reduce_op") == "add");
  CHECK(names(ops[5]) ==
        S{"dst", "data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1"});
  CHECK(ops[5]->access("operand0")->buffer->shape == std::vector<int64_t>{128, 1});
  CHECK(ops[5]->get_int("reverse0", 0) == 1);
  CHECK(ops[5]->get_string("op1") == "multiply");
  CHECK(ops[5]->get_float("operand1", 0) == 2.0);
  CHECK(names(ops[6]) == S{"dst", "data1", "data2", "op"});
  CHECK(names(ops[7]) == S{"dst", "data", "op", "axes", "negate"});
  CHECK(ops[7]->get_string("op") == "maximum");
  CHECK(ops[7]->get_ints("axes") == std::vector<int64_t>{1});
  CHECK(ops[7]->get_int("negate", 0) == 1);
  CHECK(names(ops[8]) == S{"dst", "value"});
  CHECK(names(ops[9]) == S{"dst", "pattern", "offset", "channel_multiplier"});
  CHECK(ops[9]->get_ints("pattern") == std::vector<int64_t>{1, 512});
  CHECK(ops[9]->get_int("channel_multiplier", 0) == -1);
  CHECK(names(ops[10]) ==
        S{"dst", "on_true", "pattern", "offset", "channel_multiplier", "cmp_op", "on_false"});
  CHECK(ops[10]->get_string("cmp_op") == "greater_equal");
  CHECK(ops[10]->get_float("on_false", 0) == -1e9);
  CHECK(names(ops[11]) == S{"dst", "src", "predicate"});
  CHECK(names(ops[12]) == S{"dst", "data"});
  CHECK(ops[12]->code == Opcode::nc_transpose);
  CHECK(names(ops[13]) == S{"dst", "src"});
  CHECK(names(ops[14]) == S{"src", "prefix"});
  CHECK(ops[14]->get_string("prefix") == "s=");
  CHECK(ops[15]->code == Opcode::dma_copy);
}

TEST_CASE("trace: user names are kept and made unique; in-place updates carry their line") {
  int line_update = 0;
  Kernel k = trace(
      "names",
      [&](nl::tensor a) {
        nl::tensor out = nl::ndarray({128, 64}, nl::float32, nl::shared_hbm, "result");
        nl::tensor acc = nl::zeros({128, 64}, nl::float32, nl::sbuf, "acc");
        nl::tensor acc2 = nl::zeros({128, 64}, nl::float32, nl::sbuf, "acc");
        nl::tensor t = nl::ndarray({128, 64}, nl::float32, nl::sbuf, "t1");
        nl::tensor u = nl::load(a);  // unnamed: t0
        nl::tensor v = nl::load(a);  // unnamed: t1 is taken by the user's tile
        line_update = __LINE__ + 1;
        acc += nl::max(u, 1);
        acc2 *= 3.0;
        (void)t;
        (void)v;
        nl::store(out, acc);
        return out;
      },
      {TensorSpec{{128, 64}, DType::float32, "x"}});
  CHECK(k.inputs[0]->name == "x");
  CHECK(k.outputs[0]->name == "result");
  const Block& body = block_of(k.body);
  CHECK(alloc_at(body, 0).name == "acc");
  CHECK(alloc_at(body, 2).name == "acc_1");
  CHECK(alloc_at(body, 4).name == "t1");
  CHECK(alloc_at(body, 5).name == "t0");
  CHECK(alloc_at(body, 7).name == "t1_1");
  const Op& upd = op_at(body, 11);
  CHECK(upd.code == Opcode::nl_binary);
  CHECK(upd.span.line == line_update);
  CHECK(upd.access("y")->dims[1] == dim(0, 64, 0));  // the [128,1] max broadcast over acc
  const Op& mul = op_at(body, 12);
  CHECK(mul.access("dst")->buffer->name == "acc_1");
  CHECK(mul.get_float("y", 0) == 3.0);
}
