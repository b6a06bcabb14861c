// The dynamic half of the Kernel IR: registers, runtime loops, indirect rows and gathers print
// and parse back losslessly, and the verifier names the rules they must follow.
#include <doctest/doctest.h>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

namespace {

Kernel dynamic_kernel() {
  return trace("dyn",
               [](nl::tensor x, nl::tensor idx) {
                 auto out = nl::ndarray({64, 16}, nl::float32, nl::shared_hbm);
                 auto rows = nl::load(idx);
                 auto acc = nl::load_rows(x, rows, nl::oob_mode::skip);
                 nl::index n = nl::register_alloc(2);
                 nl::register_load(n, rows(0, nl::ds(0, 1)));
                 for (nl::index i : nl::dynamic_range(1, n, 2))
                   acc += nl::load(x(nl::ds(i * 64, 64), nl::ds(0, 16)));
                 nl::while_loop(n, [&](nl::index r) {
                   acc += 1.0;
                   return nl::index(0);
                 });
                 auto g = nl::ndarray({64, 16}, nl::float32);
                 auto cols = nl::ndarray({64, 16}, nl::int32);
                 isa::iota(cols, {{1, 16}});
                 isa::nc_n_gather(g, acc, cols);
                 nl::store_rows(out, rows, acc);
                 return out;
               },
               {{{640, 16}, DType::float32}, {{64, 1}, DType::int32}});
}

}  // namespace

TEST_CASE("dynamic IR: registers, runtime loops, indirect rows round-trip through text") {
  Kernel k = dynamic_kernel();
  std::string text = print(k);
  INFO(text);
  CHECK(text.find("dynamic_range(1, r0, 2)") != std::string::npos);
  CHECK(text.find("while_nonzero(r") != std::string::npos);
  CHECK(text.find("src_rows=") != std::string::npos);
  CHECK(text.find("register_load") != std::string::npos);
  Kernel back = parse_kernel(text);
  CHECK(equal(back, k));
  CHECK(hash_value(back) == hash_value(k));
  CHECK(print(back) == text);
  // Different bounds or conditions are different loops.
  Kernel other = parse_kernel(
      [&] {
        std::string t = text;
        t.replace(t.find("dynamic_range(1, r0, 2)"), 23, "dynamic_range(1, r0, 3)");
        return t;
      }());
  CHECK(!equal(other, k));
}

TEST_CASE("dynamic IR: the engine program lists runtime loops and indirect DMAs") {
  Compiled c = compile(dynamic_kernel(), CompileOptions{});
  std::string listing = print(c.program);
  INFO(listing);
  CHECK(listing.find("dynamic_range(1, r0, 2)") != std::string::npos);
  CHECK(listing.find("while_nonzero(") != std::string::npos);
  CHECK(listing.find("oob_mode=1") != std::string::npos);
  CHECK(listing.find("src_rows=sbuf") != std::string::npos);
  CHECK(listing.find("none register_load") != std::string::npos);
}

namespace {

UserError trace_error(const std::function<void(nl::tensor, nl::tensor)>& body) {
  try {
    Kernel k = trace("bad",
                     [&](nl::tensor x, nl::tensor idx) {
                       auto out = nl::ndarray({64, 16}, nl::float32, nl::shared_hbm);
                       body(x, idx);
                       nl::store(out, nl::zeros({64, 16}, nl::float32));
                       return out;
                     },
                     {{{640, 16}, DType::float32}, {{64, 1}, DType::int32}});
    compile(k, CompileOptions{});
  } catch (const UserError& e) {
    return e;
  }
  FAIL("no UserError raised");
  return UserError("", "", {});
}

}  // namespace

TEST_CASE("dynamic IR: rules") {
  // Partitions of an on-chip tile cannot depend on a register.
  int line = __LINE__ + 4;
  UserError e = trace_error([](nl::tensor x, nl::tensor) {
    auto t = nl::load(x(nl::ds(0, 64), nl::ds(0, 16)));
    nl::index r = nl::register_alloc(3);
    nl::store(x(nl::ds(0, 1), nl::ds(0, 16)), t(nl::ds(r, 1), nl::ds(0, 16)));
  });
  CHECK(e.rule() == "dynamic-partition");
  CHECK(e.span().line == line);
  CHECK(std::string(e.what()).find("'r0'") != std::string::npos);

  // The index of indirect rows is an integer SBUF tile with one row per partition.
  e = trace_error([](nl::tensor x, nl::tensor) {
    auto f = nl::zeros({64, 1}, nl::float32);
    nl::load_rows(x, f);
  });
  CHECK(e.rule() == "indirect-dma");
  CHECK(std::string(e.what()).find("integer SBUF tile") != std::string::npos);

  // A register is a register.
  e = trace_error([](nl::tensor x, nl::tensor idx) {
    nl::register_load(nl::index(3), nl::load(idx)(0, nl::ds(0, 1)));
  });
  CHECK(e.rule() == "register");

  // nc_n_gather indices are integers.
  e = trace_error([](nl::tensor x, nl::tensor) {
    auto d = nl::load(x(nl::ds(0, 64), nl::ds(0, 16)));
    auto g = nl::ndarray({64, 16}, nl::float32);
    isa::nc_n_gather(g, d, d);
  });
  CHECK(e.rule() == "dtype");
}
