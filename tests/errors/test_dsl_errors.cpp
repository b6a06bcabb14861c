// DSL trace-time errors: each names its rule and points at the user's line.
#include <doctest/doctest.h>

#include "neuron/ir/printer.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

namespace {

// Runs `body` inside a one-input kernel and returns the UserError it raises.
template <typename Body>
UserError trace_error(Body body, std::vector<int64_t> shape = {128, 512}) {
  try {
    trace("bad",
          [&](nl::tensor a) {
            nl::tensor out = nl::ndarray({128, 512}, nl::float32, nl::shared_hbm);
            body(a, out);
            return out;
          },
          {TensorSpec{shape, DType::float32}});
  } catch (const UserError& e) {
    return e;
  }
  FAIL("no UserError raised");
  return UserError("", "", {});
}

}  // namespace

TEST_CASE("dsl errors: DSL calls outside a trace") {
  int line = __LINE__ + 2;
  try {
    nl::ndarray({128, 128}, nl::float32);
    FAIL("expected an error");
  } catch (const UserError& e) {
    CHECK(e.rule() == "no-trace");
    CHECK(e.span().line == line);
  }
  CHECK_THROWS_AS(nl::program_id(0), UserError);
}

TEST_CASE("dsl errors: indexing") {
  int line = 0;
  UserError e = trace_error([&](nl::tensor a, nl::tensor) {
    line = __LINE__ + 1;
    (void)a(nl::all, 512);
  });
  CHECK(e.rule() == "index");
  CHECK(e.span().line == line);
  CHECK(e.message().find("size 512") != std::string::npos);

  e = trace_error([&](nl::tensor a, nl::tensor) { (void)a(0, 0, 0); });
  CHECK(e.rule() == "index");
  CHECK(e.message().find("3 subscripts") != std::string::npos);

  // An empty slice is a view (NKI's shard of a core that owns no rows); an instruction on it
  // is the error.
  e = trace_error([&](nl::tensor a, nl::tensor) { (void)nl::load(a(nl::ds(0, 0))); });
  CHECK(e.rule() == "shape");
  e = trace_error([&](nl::tensor a, nl::tensor) { (void)a(nl::ds(0, -1)); });
  CHECK(e.rule() == "index");
  e = trace_error([&](nl::tensor a, nl::tensor) { (void)a(nl::ds(100, 64)); });
  CHECK(e.rule() == "index");
  e = trace_error([&](nl::tensor a, nl::tensor) { (void)a(nl::all, nl::slice(0, 600)); });
  CHECK(e.rule() == "index");
  line = 0;
  e = trace_error([&](nl::tensor a, nl::tensor) {
    line = __LINE__ + 1;
    (void)a[-1];
  });
  CHECK(e.rule() == "index");
  CHECK(e.span().line == line);
}

TEST_CASE("dsl errors: broadcasting, matmul ranks, reduction axes") {
  int line = 0;
  UserError e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::load(a);
    nl::tensor y = nl::ndarray({128, 3}, nl::float32);
    line = __LINE__ + 1;
    (void)(x + y);
  });
  CHECK(e.rule() == "broadcast");
  CHECK(e.span().line == line);

  e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::load(a);
    nl::tensor y = nl::ndarray({128, 512, 1}, nl::float32);
    line = __LINE__ + 1;
    (void)nl::maximum(x, y);
  });
  CHECK(e.rule() == "broadcast");
  CHECK(e.span().line == line);

  e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::ndarray({128, 4, 4}, nl::float32);
    line = __LINE__ + 1;
    (void)nl::matmul(x, nl::load(a));
  });
  CHECK(e.rule() == "matmul-rank");
  CHECK(e.span().line == line);

  e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::ndarray({128, 64}, nl::float32);
    (void)nl::matmul(x, nl::load(a));  // K = 64 vs 128 rows
  });
  CHECK(e.rule() == "matmul-shape");

  e = trace_error([&](nl::tensor a, nl::tensor) {
    line = __LINE__ + 1;
    (void)nl::sum(nl::load(a), 0);
  });
  CHECK(e.rule() == "reduce-axis");
  CHECK(e.span().line == line);

  e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::load(a);
    isa::tensor_reduce(x, nl::add, x, {0, 1});
  });
  CHECK(e.rule() == "reduce-axis");
}

TEST_CASE("dsl errors: allocation, outputs, nesting") {
  int line = 0;
  UserError e = trace_error([&](nl::tensor, nl::tensor) {
    line = __LINE__ + 1;
    (void)nl::zeros({128, 64}, nl::float32, nl::hbm);
  });
  CHECK(e.rule() == "hbm-init");
  CHECK(e.span().line == line);

  e = trace_error([&](nl::tensor, nl::tensor) { (void)nl::ndarray({128, 0}, nl::float32); });
  CHECK(e.rule() == "shape");

  e = trace_error([&](nl::tensor, nl::tensor) {
    trace("inner", [](nl::tensor x) { return x; }, {TensorSpec{{1, 1}, DType::float32}});
  });
  CHECK(e.rule() == "nested-trace");

  // The failed traces above left no state behind: tracing works again.
  CHECK_NOTHROW(trace("ok",
                      [](nl::tensor a) {
                        nl::tensor o = nl::ndarray({128, 4}, nl::float32, nl::shared_hbm);
                        nl::store(o, nl::load(a));
                        return o;
                      },
                      {TensorSpec{{128, 4}, DType::float32}}));

  try {
    trace("sbuf-out", [](nl::tensor a) { return nl::load(a); },
          {TensorSpec{{128, 4}, DType::float32}});
    FAIL("expected an error");
  } catch (const UserError& e2) {
    CHECK(e2.rule() == "kernel-output");
  }
  {  // not an error: a shared_hbm tensor the kernel does not return is its scratch, as in NKI
    Kernel k = trace("unreturned",
                     [](nl::tensor a) {
                       nl::tensor o = nl::ndarray({128, 4}, nl::float32, nl::shared_hbm);
                       nl::tensor p =
                           nl::ndarray({128, 4}, nl::float32, nl::shared_hbm, "forgotten");
                       nl::store(p, nl::load(a));
                       nl::store(o, nl::load(p));
                       return o;
                     },
                     {TensorSpec{{128, 4}, DType::float32}});
    CHECK(k.outputs.size() == 1);
    CHECK(print(k).find("alloc forgotten: float32[128, 4] hbm") != std::string::npos);
  }
  try {
    trace("arity", [](nl::tensor a, nl::tensor b) { return a; },
          {TensorSpec{{128, 4}, DType::float32}});
    FAIL("expected an error");
  } catch (const UserError& e2) {
    CHECK(e2.rule() == "call-signature");
  }
}

TEST_CASE("dsl errors: ISA operator arguments") {
  UserError e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::load(a);
    isa::tensor_scalar(x, x, nl::exp, 1.0);
  });
  CHECK(e.rule() == "alu-op");
  e = trace_error([&](nl::tensor a, nl::tensor) {
    nl::tensor x = nl::load(a);
    (void)nl::add(1.0, 2.0);
  });
  CHECK(e.rule() == "operand");
}

TEST_CASE("dsl errors: ranges") {
  CHECK_THROWS_AS(nl::static_range(0, 4, 0), UserError);
  UserError e = trace_error([&](nl::tensor, nl::tensor) {
    for (nl::index i : nl::affine_range(0, 8, 0)) (void)i;
  });
  CHECK(e.rule() == "range");
  e = trace_error([&](nl::tensor, nl::tensor) { (void)nl::program_id(4); });
  CHECK(e.rule() == "program-axis");
}
