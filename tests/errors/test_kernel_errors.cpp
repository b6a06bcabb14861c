// Bad kernels written with the C++ DSL, compiled end to end: the verifier's and allocator's
// errors must name the rule and values and point at the kernel line that broke the rule.
#include <doctest/doctest.h>

#include <string>

#include "neuron/neuron.hpp"

using namespace neuron;

namespace {

struct Caught {
  std::string rule, message, rendered;
  int line = 0;
};

// Traces and compiles a one-input kernel whose body is `body`; returns the UserError.
template <typename Body>
Caught compile_error(Body body, std::vector<int64_t> shape = {256, 512}) {
  try {
    auto k = trace("bad",
                   [&](nl::tensor a) {
                     auto out = nl::ndarray({128, 512}, nl::float32, nl::shared_hbm, "out");
                     body(a, out);
                     return out;
                   },
                   {TensorSpec{shape, DType::float32}});
    compile(k);
  } catch (const UserError& e) {
    return {e.rule(), e.message(), e.what(), e.span().line};
  } catch (const std::exception& e) {
    FAIL("expected a UserError, got: " << e.what());
  }
  FAIL("no error raised");
  return {};
}

}  // namespace

TEST_CASE("kernel errors: matmul moving free size over 512 names the values and the line") {
  int line = 0;
  Caught c = compile_error([&](nl::tensor a, nl::tensor out) {
    auto x = nl::load(a(nl::ds(0, 128), nl::ds(0, 128)));
    auto y = nl::ndarray({128, 1024}, nl::float32);
    auto acc = nl::ndarray({128, 512}, nl::float32, nl::psum);
    line = __LINE__ + 1;
    isa::nc_matmul(acc, x, y);
  });
  CHECK(c.line == line);
  CHECK(c.rule == "matmul-shape");
  CHECK(c.message.find("1024") != std::string::npos);
  // The rendered message shows this file, the offending source line and a caret under it.
  CHECK(c.rendered.find("test_kernel_errors.cpp:" + std::to_string(line)) != std::string::npos);
  CHECK(c.rendered.find("isa::nc_matmul(acc, x, y);") != std::string::npos);
  CHECK(c.rendered.find('^') != std::string::npos);
}

TEST_CASE("kernel errors: a tile over 128 partitions") {
  int line = 0;
  Caught c = compile_error([&](nl::tensor a, nl::tensor out) {
    line = __LINE__ + 1;
    auto t = nl::load(a(nl::ds(0, 256), nl::ds(0, 512)));
    nl::store(out, t(nl::ds(0, 128)));
  });
  CHECK(c.rule == "partition-size");
  CHECK(c.message.find("256") != std::string::npos);
  CHECK(c.line == line);
}

TEST_CASE("kernel errors: engines cannot compute on HBM") {
  int line = 0;
  Caught c = compile_error([&](nl::tensor a, nl::tensor out) {
    auto t = nl::ndarray({128, 512}, nl::float32);
    line = __LINE__ + 1;
    isa::tensor_copy(t, a(nl::ds(0, 128)));
    nl::store(out, t);
  });
  CHECK(c.rule == "engine-memory");
  CHECK(c.line == line);
}

TEST_CASE("kernel errors: a loop index that walks off the end of a tensor") {
  int line = 0;
  Caught c = compile_error([&](nl::tensor a, nl::tensor out) {
    for (auto i : nl::affine_range(3)) {
      line = __LINE__ + 1;
      auto t = nl::load(a(nl::ds(i * 128, 128)));
      nl::store(out, t);
    }
  });
  CHECK(c.rule == "out-of-bounds");
  CHECK(c.message.find("0..383") != std::string::npos);  // rows touched, past 256
  CHECK(c.line == line);
}

TEST_CASE("kernel errors: SBUF capacity names the buffers and sizes") {
  int line = 0;
  Caught c = compile_error([&](nl::tensor a, nl::tensor out) {
    auto big = nl::ndarray({128, 40000}, nl::float32, nl::sbuf, "big");
    line = __LINE__ + 1;
    auto big2 = nl::ndarray({128, 40000}, nl::float32, nl::sbuf, "big2");
    nl::store(out, nl::add(big(nl::all, nl::ds(0, 512)), big2(nl::all, nl::ds(0, 512))));
  });
  CHECK(c.rule == "sbuf-capacity");
  CHECK(c.message.find("big") != std::string::npos);
  CHECK(c.message.find("160000") != std::string::npos);
  CHECK(c.message.find("212984") != std::string::npos);
  CHECK(c.line == line);
}

TEST_CASE("kernel errors: more than 8 live PSUM banks") {
  Caught c = compile_error([&](nl::tensor a, nl::tensor out) {
    std::vector<nl::tensor> accs;
    for (int i = 0; i < 9; ++i) accs.push_back(nl::zeros({128, 512}, nl::float32, nl::psum));
    // Summed from the last written: all nine are live at once, in any order of the reads
    // (read in the order written, each could leave PSUM right after its write).
    auto sum = nl::copy(accs[8]);
    for (int i = 7; i >= 0; --i) sum = nl::add(sum, accs[i]);
    nl::store(out, sum);
  });
  CHECK(c.rule == "psum-capacity");
}
