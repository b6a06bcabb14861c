// DSL dtype rules: NKI's promotion table, comparison results, operand order of scalar operators.
#include <doctest/doctest.h>

#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

TEST_CASE("dsl dtypes: promotion follows NKI's table") {
  using D = DType;
  CHECK(nl::promote(D::int32, D::float16) == D::float16);
  CHECK(nl::promote(D::uint16, D::bfloat16) == D::bfloat16);
  CHECK(nl::promote(D::float32, D::bfloat16) == D::float32);
  CHECK(nl::promote(D::float8_e4m3, D::float16) == D::float16);
  CHECK(nl::promote(D::float8_e4m3, D::bfloat16) == D::bfloat16);
  CHECK(nl::promote(D::float16, D::bfloat16) == D::float32);
  CHECK(nl::promote(D::float8_e4m3, D::float8_e5m2) == D::bfloat16);
  CHECK(nl::promote(D::int16, D::int32) == D::int32);
  CHECK(nl::promote(D::uint8, D::uint16) == D::uint16);
  CHECK(nl::promote(D::uint16, D::int32) == D::int32);
  CHECK(nl::promote(D::int8, D::uint8) == D::int16);
  CHECK(nl::promote(D::int8, D::uint16) == D::int32);
  CHECK(nl::promote(D::int32, D::uint32) == D::float32);
  CHECK(nl::promote(D::bool_, D::int8) == D::int8);
  CHECK(nl::promote(D::bfloat16, D::bfloat16) == D::bfloat16);
}

TEST_CASE("dsl dtypes: scalar operands keep the tile dtype; mirrored comparisons; where") {
  Kernel k = trace("dt",
                   [](nl::tensor a) {
                     nl::tensor out = nl::ndarray({128, 64}, nl::bfloat16, nl::shared_hbm);
                     nl::tensor x = nl::load(a);  // bf16
                     nl::tensor h = x * 0.5;      // stays bf16
                     nl::tensor c = 2.0 < h;      // becomes h > 2.0
                     nl::tensor m = nl::less(h, 1.0, nl::uint8);
                     nl::tensor w = nl::where(m, 3.0, h);
                     nl::tensor n = -w;
                     nl::store(out, n);
                     CHECK(h.dtype() == DType::bfloat16);
                     CHECK(c.dtype() == DType::bfloat16);
                     CHECK(m.dtype() == DType::uint8);
                     CHECK(w.dtype() == DType::bfloat16);
                     return out;
                   },
                   {TensorSpec{{128, 64}, DType::bfloat16}});
  std::vector<const Op*> ops;
  for (auto& s : k.body->as<Block>()->stmts)
    if (auto op = s->as<Op>()) ops.push_back(op);
  REQUIRE(ops.size() == 7);
  CHECK(ops[2]->get_string("op") == "greater");
  CHECK(ops[2]->access("x")->buffer->name == "t1");
  CHECK(ops[2]->get_float("y", 0) == 2.0);
  CHECK(ops[4]->code == Opcode::nl_where);
  CHECK(ops[4]->get_float("x", 0) == 3.0);
  CHECK(ops[4]->access("y")->buffer->name == "t1");
  CHECK(ops[5]->code == Opcode::nl_unary);
  CHECK(ops[5]->get_string("func") == "negative");
}
