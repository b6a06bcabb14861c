// Kernels traced by the C++ DSL go through the whole pipeline (front end and passes agree).
#include <doctest/doctest.h>

#include <map>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

namespace {

void count(const std::vector<ProgNode>& nodes, std::map<Opcode, int>& out) {
  for (auto& n : nodes) {
    if (n.kind == ProgNode::Kind::instr)
      ++out[n.instr.op];
    else
      count(n.body, out);
  }
}

}  // namespace

TEST_CASE("traced matmul + exp + transpose kernel compiles") {
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
  Compiled c = compile(k);
  std::map<Opcode, int> n;
  count(c.program.body, n);
  CHECK(n[Opcode::nc_matmul] == 1);
  CHECK(n[Opcode::nc_transpose] == 1);
  CHECK(n[Opcode::dma_copy] == 3);  // two loads in the loop, one store
  CHECK(n[Opcode::activation] == 1);
  // The PSUM product [128, 512] fp32 (one bank) is allocated in the affine loop: two slots.
  CHECK(c.program.psum_bytes == 2 * 2048);
}

TEST_CASE("traced row softmax with broadcasting compiles") {
  Kernel k = trace("softmax",
                   [&](nl::tensor a) {
                     nl::tensor out = nl::ndarray({256, 64}, nl::float32, nl::shared_hbm);
                     for (nl::index i : nl::affine_range(2)) {
                       nl::tensor x = nl::load(a(nl::ds(i * 128, 128), nl::all));
                       nl::tensor m = nl::max(x, 1, std::nullopt, true);
                       nl::tensor e = nl::exp(x - m);
                       nl::tensor s = nl::sum(e, 1, std::nullopt, true);
                       nl::store(out(nl::ds(i * 128, 128), nl::all), e / s);
                     }
                     return out;
                   },
                   {TensorSpec{{256, 64}, DType::float32}});
  Compiled c = compile(k);
  std::map<Opcode, int> n;
  count(c.program.body, n);
  CHECK(n[Opcode::tensor_reduce] == 2);
  CHECK(n[Opcode::tensor_scalar] == 2);  // x - m and e / s with [P,1] operands
  CHECK(n[Opcode::activation] == 1);
}
