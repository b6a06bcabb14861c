// Consecutive nc_matmuls over one moving tile (InstrArgs::same_moving, set by lower): which ones
// are marked, and that the native kernel's reuse of its packed copy of the moving tile computes
// the simulator's bits and the reference's values, also when the tile is rewritten in between.
#include <doctest/doctest.h>

#include <random>

#include "exec/differential.hpp"
#include "neuron/neuron.hpp"

using namespace neuron;
using namespace neuron::testing;

namespace {

constexpr int64_t P = 128, N = 512;

// out[128 j + m, n] = a[:, 128 j + m] . moving[:, n]: three products over b, then the moving tile
// is rewritten with b2 and a fourth product reads it.
nl::tensor four_products(nl::tensor a, nl::tensor b, nl::tensor b2) {
  auto out = nl::ndarray({4 * P, N}, nl::float32, nl::shared_hbm, "out");
  std::vector<nl::tensor> st, acc;
  for (int64_t j = 0; j < 4; ++j) {
    st.push_back(nl::load(a(nl::ds(0, P), nl::ds(j * P, P))));
    acc.push_back(nl::ndarray({P, N}, nl::float32, nl::psum, "acc"));
  }
  auto mv = nl::load(b);
  isa::nc_matmul(acc[0], st[0], mv, false);
  isa::nc_matmul(acc[1], st[1], mv, false);
  isa::nc_matmul(acc[2], st[2], mv, false);
  isa::dma_copy(mv, b2);
  isa::nc_matmul(acc[3], st[3], mv, false);
  for (int64_t j = 0; j < 4; ++j) nl::store(out(nl::ds(j * P, P), nl::ds(0, N)), nl::copy(acc[j]));
  return out;
}

void matmul_flags(const std::vector<ProgNode>& body, std::vector<bool>& flags) {
  for (const ProgNode& n : body) {
    if (n.kind == ProgNode::Kind::loop)
      matmul_flags(n.body, flags);
    else if (n.instr.op == Opcode::nc_matmul)
      flags.push_back(n.instr.args.same_moving);
  }
}

Tensor random_tensor(std::vector<int64_t> shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, u(rng));
  return t;
}

void check_four_products(DType dt) {
  auto k = trace("four_products", four_products, {{{P, 4 * P}, dt}, {{P, N}, dt}, {{P, N}, dt}});
  Compiled c = compile(k, default_compile_options());
  std::vector<bool> flags;
  matmul_flags(c.program.body, flags);
  CHECK(flags == std::vector<bool>{false, true, true, false});

  Tensor a = random_tensor({P, 4 * P}, dt, 1), b = random_tensor({P, N}, dt, 2),
         b2 = random_tensor({P, N}, dt, 3);
  std::vector<double> ref(static_cast<size_t>(4 * P * N));
  for (int64_t j = 0; j < 4; ++j) {
    const Tensor& mv = j < 3 ? b : b2;
    for (int64_t m = 0; m < P; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t kk = 0; kk < P; ++kk)
          s += double(a.get(kk * 4 * P + j * P + m)) * double(mv.get(kk * N + n));
        ref[static_cast<size_t>((j * P + m) * N + n)] = s;
      }
  }
  check_reference(run_both(c, {a, b, b2}), 0, ref);
}

}  // namespace

TEST_CASE("consecutive matmuls over one moving tile share it; a write in between ends that") {
  SUBCASE("bf16") {
    check_four_products(DType::bfloat16);
  }
  SUBCASE("fp32") {
    check_four_products(DType::float32);
  }
}
