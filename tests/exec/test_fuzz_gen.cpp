// The differential fuzzer's kernel generator (tests/fuzz/kernel_gen.hpp): reproducible from a
// seed, valid, covering every ISA instruction, and round-tripping through the IR text form that
// the NumPy reference (tests/fuzz/reference.py) reads. The comparison itself runs in the `fuzz`
// ctest label (tests/fuzz/run_fuzz.py).
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "fuzz/kernel_gen.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/runtime/run.hpp"

using namespace neuron;

namespace {

void collect_opcodes(const StmtPtr& s, std::set<std::string>& out) {
  if (auto b = s->as<Block>())
    for (auto& c : b->stmts) collect_opcodes(c, out);
  else if (auto f = s->as<For>())
    collect_opcodes(f->body, out);
  else if (auto o = s->as<Op>())
    out.insert(std::string(opcode_name(o->code)));
}

}  // namespace

TEST_CASE("fuzz generator: a seed reproduces the same kernel, other seeds differ") {
  const std::string a = print(fuzz::KernelGen(42).generate().kernel);
  const std::string b = print(fuzz::KernelGen(42).generate().kernel);
  const std::string c = print(fuzz::KernelGen(43).generate().kernel);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("fuzz generator: kernels compile, round-trip as text and cover every ISA instruction") {
  std::set<std::string> seen;
  int compiled = 0;
  const int n = 150;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    fuzz::Generated g = fuzz::KernelGen(seed).generate();
    CAPTURE(seed);
    const std::string text = print(g.kernel);
    CHECK(equal(parse_kernel(text), g.kernel));
    try {
      Compiled c = compile(g.kernel);
      ++compiled;
      CHECK(equal(parse_kernel(print(c.kernel)), c.kernel));
      collect_opcodes(c.kernel.body, seen);
    } catch (const UserError& e) {
      MESSAGE("seed ", seed, " rejected: ", e.what());
    }
  }
  // A few kernels may exceed an on-chip capacity; almost all must be valid.
  CHECK(compiled >= n * 95 / 100);
  for (const char* op : {"nc_matmul", "nc_transpose", "activation", "tensor_tensor", "tensor_scalar",
                         "tensor_reduce", "tensor_copy", "tensor_copy_predicated", "memset", "iota",
                         "affine_select", "dma_copy"}) {
    CAPTURE(op);
    CHECK(seen.count(op) == 1);
  }
}

TEST_CASE("fuzz generator: generated kernels run on the simulator without errors") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    fuzz::Generated g = fuzz::KernelGen(seed).generate();
    CAPTURE(seed);
    std::vector<Tensor> inputs;
    for (auto& b : g.kernel.inputs) inputs.push_back(Tensor::empty(b->shape, b->dtype));
    try {
      Compiled c = compile(g.kernel);
      CHECK_NOTHROW(simulate(c, inputs, g.grid));
    } catch (const UserError&) {
      // rejected at compile time: counted by the test above
    }
  }
}
