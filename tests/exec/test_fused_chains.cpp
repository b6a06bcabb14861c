// Fused chains (plan.hpp plan_chains, neuron_k_chain): consecutive element-wise instructions,
// each reading the one before, run natively as one loop over the elements. Which instructions
// form a chain, which destinations the loop need not write, and that the fused code computes
// the simulator's bits (and vectorizes), also for an output rewritten in place.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/codegen/plan.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32, bf16 = DType::bfloat16;
constexpr int64_t R = 64, C = 96;  // odd sizes: no lane or block multiple

AccessPattern tile(int64_t off, DType dt = f32, int64_t cols = C) {
  return sb(dt, off, R, {row(cols)});
}
AccessPattern column(int64_t off) {
  return sb(f32, off, R, {row(1)});
}
void number(Program& p) {
  int next = 0;
  for (ProgNode& n : p.body) n.instr.id = next++;
}

// The chains of the whole top level, as the lowering plans them: steps and stores.
std::vector<native::Chain> chains_of(const Program& p) {
  std::vector<native::RunLocal> ranges = native::run_local_ranges(p, p.body, 0, p.body.size());
  native::ForwardedRun run =
      native::forward_loads(p.body, 0, p.body.size(), ranges, [](const Affine&) { return false; });
  return native::plan_chains(run, ranges, [](const Affine&) { return false; });
}

// The steps of the test's chain, on x (bf16 rows), w (fp32 rows) and three columns:
//   a (bf16) = 3 * (c - t)       tensor_scalar, reversed op0, a column and an immediate
//   b        = w / a             tensor_tensor, the chain value as data2
//   d        = (b * s + h)^2     activation (square) with bias h and scale s columns
//   e (bf16) = d                 copy
//   out      = e                 the store
// The bf16 destinations round the chain value between steps, as the tiles do.
std::vector<ProgNode> chain_steps() {
  InstrArgs ts;
  ts.op0 = AluOp::subtract;
  ts.reverse0 = true;
  ts.operand0_tile = true;
  ts.op1 = AluOp::multiply;
  ts.imm1 = 3.0;
  InstrArgs tt;
  tt.op0 = AluOp::divide;
  InstrArgs act;
  act.func = ActFunc::square;
  act.bias_tile = act.scale_tile = true;
  return {instr(Opcode::tensor_scalar, tile(400, bf16), {tile(0), column(2000)}, ts),
          instr(Opcode::tensor_tensor, tile(600), {tile(1000), tile(400, bf16)}, tt),
          instr(Opcode::activation, tile(1400), {tile(600), column(2004), column(2008)}, act),
          instr(Opcode::tensor_copy, tile(1800, bf16), {tile(1400)}),
          dma(hbm2(2, bf16, R, C, C), tile(1800, bf16))};
}

Program chain_program(std::vector<ProgNode> extra = {}) {
  std::vector<ProgNode> body = {dma(tile(0), hbm2(0, bf16, R, C, C)),
                                dma(tile(1000), hbm2(1, f32, R, C, C)),
                                dma(sb(f32, 2000, R, {row(3)}), hbm2(3, f32, R, 3, 3))};
  for (ProgNode& s : chain_steps()) body.push_back(std::move(s));
  for (ProgNode& s : extra) body.push_back(std::move(s));
  Program p = program({decl("x", {R, C}, bf16, kIn), decl("w", {R, C}, f32, kIn),
                       decl("out", {R, C}, bf16, kOut), decl("cols", {R, 3}, f32, kIn)},
                      std::move(body));
  number(p);
  return p;
}

std::vector<Tensor> chain_inputs() {
  auto x = random_values(R * C, 7);
  auto w = random_values(R * C, 8);
  auto cols = random_values(R * 3, 9, 0.25f, 1.5f);
  return {Tensor::from_floats(x, {R, C}, bf16), Tensor::from_floats(w, {R, C}, f32),
          Tensor::empty({R, C}, bf16), Tensor::from_floats(cols, {R, 3}, f32)};
}
}  // namespace

TEST_CASE("plan_chains: element-wise steps reading the one before form one chain") {
  const auto chains = chains_of(chain_program());
  REQUIRE(chains.size() == 1);
  // Instructions 0-2 are the forwarded loads; the five steps follow.
  CHECK(chains[0].steps == std::vector<size_t>{3, 4, 5, 6, 7});
  // Every temporary is run-local and read only by the next step: only the store writes.
  CHECK(chains[0].store == std::vector<bool>{false, false, false, false, true});
  CHECK(chains[0].other_first == std::vector<bool>{false, true, false, false, false});
}

TEST_CASE("plan_chains: a destination read later is written; what breaks the order ends it") {
  InstrArgs sum;
  sum.op0 = AluOp::add;
  // b read again after the chain: b's step writes it.
  InstrArgs red;
  red.reduce_op = AluOp::add;
  red.axes = {1};
  auto chains =
      chains_of(chain_program({instr(Opcode::tensor_reduce, column(2100), {tile(600)}, red)}));
  REQUIRE(chains.size() == 1);
  CHECK(chains[0].store == std::vector<bool>{false, true, false, false, true});

  // A step writing its destination one element past a view an earlier step reads (w, at
  // 1200, written at 1204): one loop would write element e + 1 before the earlier step reads
  // it, so the chain ends before that step, and the results stay the simulator's bits.
  InstrArgs twice;
  twice.op0 = AluOp::multiply;
  twice.imm0 = 2.0;
  Program shifted = program(
      {decl("x", {R, C}, f32, kIn), decl("w", {R, C}, f32, kIn), decl("out", {R, C}, f32, kOut)},
      {dma(tile(0), hbm2(0, f32, R, C, C)), dma(tile(1200), hbm2(1, f32, R, C, C)),
       instr(Opcode::tensor_scalar, tile(400), {tile(0)}, twice),
       instr(Opcode::tensor_tensor, tile(800), {tile(400), tile(1200)}, sum),
       instr(Opcode::tensor_scalar, tile(1204), {tile(800)}, twice),
       dma(hbm2(2, f32, R, C, C), tile(1204))});
  number(shifted);
  chains = chains_of(shifted);
  REQUIRE(chains.size() == 2);
  CHECK(chains[0].steps == std::vector<size_t>{2, 3});
  CHECK(chains[1].steps == std::vector<size_t>{4, 5});
  run_both(shifted,
           {Tensor::from_floats(random_values(R * C, 3), {R, C}, f32),
            Tensor::from_floats(random_values(R * C, 4), {R, C}, f32), Tensor::empty({R, C}, f32)});
  // Not steps: an activation with reduce_res, integer tiles, a PSUM destination; an exp (a
  // transcendental activation: its own loop) ends the chain before it.
  InstrArgs ex1;
  ex1.func = ActFunc::exp;
  Program exp_step = program({decl("x", {R, C}, f32, kIn), decl("out", {R, C}, f32, kOut)},
                             {dma(tile(0), hbm2(0, f32, R, C, C)),
                              instr(Opcode::tensor_scalar, tile(400), {tile(0)}, twice),
                              instr(Opcode::activation, tile(800), {tile(400)}, ex1),
                              instr(Opcode::tensor_scalar, tile(1200), {tile(800)}, twice),
                              dma(hbm2(1, f32, R, C, C), tile(1200))});
  number(exp_step);
  chains = chains_of(exp_step);
  REQUIRE(chains.size() == 1);
  CHECK(chains[0].steps == std::vector<size_t>{3, 4});
  InstrArgs ex;
  ex.func = ActFunc::exp;
  ex.reduce_op = AluOp::add;
  ProgNode with_sum = instr(Opcode::activation, tile(400), {tile(0)}, ex);
  with_sum.instr.has_reduce_res = true;
  with_sum.instr.reduce_res = column(2000);
  Program none = program({decl("x", {R, C}, f32, kIn), decl("out", {R, C}, DType::int32, kOut)},
                         {dma(tile(0), hbm2(0, f32, R, C, C)), with_sum,
                          instr(Opcode::tensor_copy, tile(800, DType::int32), {tile(400)}),
                          instr(Opcode::tensor_copy, ps(f32, 0, R, {row(C)}), {tile(400)}),
                          dma(hbm2(1, DType::int32, R, C, C), tile(800, DType::int32))});
  number(none);
  CHECK(chains_of(none).empty());
}

TEST_CASE("fused chains compute the simulator's bits and vectorize") {
  const Program p = chain_program();
  auto inputs = chain_inputs();
  auto r = run_both(p, inputs);
  std::vector<double> ref(R * C);
  auto bf = [](double v) { return double(Tensor::from_floats({float(v)}, {1}, bf16).get(0)); };
  for (int64_t q = 0; q < R; ++q)
    for (int64_t c = 0; c < C; ++c) {
      const double t = inputs[0].get(q * C + c), w = inputs[1].get(q * C + c);
      const double c0 = inputs[3].get(q * 3), h = inputs[3].get(q * 3 + 1),
                   s = inputs[3].get(q * 3 + 2);
      const double a = bf(3 * (c0 - t));
      const double d = w / a * s + h;
      ref[q * C + c] = d * d;
    }
  check_reference(r, 0, ref, Tolerance{2e-2, 1e-2});

  // The lowering emits one chain call, which specializes into vector code with no calls left.
  native::JitOptions jo;
  CHECK(native::program_llvm_ir(p, jo, false).find("@neuron_k_chain(") != std::string::npos);
  const std::string ir = native::program_llvm_ir(p, jo, true);
  const size_t at = ir.find("define void @neuron_entry");
  REQUIRE(at != std::string::npos);
  const std::string entry = ir.substr(at, ir.find("\n}\n", at) - at);
  CHECK(entry.find("fdiv <") != std::string::npos);
  CHECK(entry.find("call float @_ZN6neuron8builtins") == std::string::npos);
  CHECK(entry.find("@neuron_k_chain(") == std::string::npos);
  // Turned off, the steps are separate kernel calls.
  jo.fused_chains = false;
  CHECK(native::program_llvm_ir(p, jo, false).find("@neuron_k_chain(") == std::string::npos);
}

TEST_CASE("a chain writing a large kernel output streams it, with the simulator's bits") {
  InstrArgs twice;
  twice.op0 = AluOp::multiply;
  twice.imm0 = 2.0;
  // 128 x 2048 fp32 (1 MiB) or bf16: rows of whole 64-byte blocks. 2040 columns: rows of 8160
  // (4080) bytes, which the kernel writes plainly (each_streamed needs whole aligned blocks;
  // the sizes are constants, so the specialized code has no streaming path left). A bf16
  // result is rounded once into its tile, then stored as it is (chain_store), NaN and inf too.
  for (DType odt : {f32, bf16})
    for (int64_t cols : {2048, 2040}) {
      CAPTURE(cols);
      CAPTURE(dtype_name(odt));
      const int64_t P = 128, bytes = P * cols * dtype_bytes(odt);
      auto t = [&](int64_t off, DType d) { return sb(d, off, P, {row(cols)}); };
      Program p = program({decl("x", {P, cols}, f32, kIn), decl("out", {P, cols}, odt, kOut)},
                          {dma(t(0, f32), hbm2(0, f32, P, cols, cols)),
                           instr(Opcode::tensor_scalar, t(cols * 4, odt), {t(0, f32)}, twice),
                           dma(hbm2(1, odt, P, cols, cols), t(cols * 4, odt))});
      number(p);
      native::JitOptions jo;
      jo.stream_store_bytes = bytes;
      CHECK((native::program_llvm_ir(p, jo, true).find("!nontemporal") != std::string::npos) ==
            (cols == 2048));
      jo.stream_store_bytes = bytes + 4;  // the output is smaller: plain stores
      CHECK(native::program_llvm_ir(p, jo, true).find("!nontemporal") == std::string::npos);
      auto x = random_values(P * cols, 11);
      x[5] = NAN;
      x[6] = -INFINITY;
      x[7] = 3e38f;  // 2x overflows to inf
      const Tensor want = Tensor::from_floats(
          [&] {
            std::vector<float> d(x);
            for (float& v : d) v *= 2;
            return d;
          }(),
          {P, cols}, odt);
      for (const std::string& min_bytes : {std::to_string(bytes), std::string("0")}) {
        CAPTURE(min_bytes);
        setenv("NEURON_STREAM_STORES_MIN_BYTES", min_bytes.c_str(), 1);
        auto r =
            run_both(p, {Tensor::from_floats(x, {P, cols}, f32), Tensor::empty({P, cols}, odt)});
        CHECK(std::memcmp(r.native[0].data(), want.data(), want.bytes()) == 0);
      }
      unsetenv("NEURON_STREAM_STORES_MIN_BYTES");
    }
}

TEST_CASE("a chain ending in a row reduction feeds it the reduction's lane order") {
  // prod = x * w (bf16 x fp32), then tensor_reduce over all free axes of prod into a column,
  // stored: the product's loop feeds the reduction, prod itself is never written. Rows of 37
  // elements in 3 groups: a partition's rows start off the 16-lane boundary, so the lanes must
  // carry from row to row as tensor_reduce's do (`on_chip`: the groups 40 apart in SBUF, three
  // runs a partition). One run a partition of up to 256 values: partitions reduce 8 at a time,
  // the last ones (61 = 7 x 8 + 5) one by one; a longer run (300) feeds its lanes as it goes.
  // `keep`: prod is stored too (a second output), so the loop writes it as it feeds the lanes.
  struct Case {
    AluOp op;
    bool negate;
    DType out;
    std::vector<Dim> free;
    bool keep;
    int64_t R = ::R;
    std::vector<Dim> on_chip = {};  // the SBUF tiles' free dims, when not `free`
  };
  const std::vector<Case> cases = {
      {AluOp::add, false, f32, {{37, 3}, row(37)}, false},
      {AluOp::add, false, f32, {{37, 3}, row(37)}, true},
      {AluOp::maximum, true, bf16, {{37, 3}, row(37)}, false},
      {AluOp::subtract, false, f32, {row(96)}, false},
      {AluOp::add, false, f32, {row(45)}, true, 61},
      {AluOp::add, false, f32, {{37, 3}, row(37)}, false, R, {{40, 3}, row(37)}},
      {AluOp::add, false, f32, {row(300)}, false}};
  for (const Case& k : cases) {
    CAPTURE(static_cast<int>(k.op));
    CAPTURE(k.R);
    const int64_t R = k.R;
    const std::vector<Dim>& chip = k.on_chip.empty() ? k.free : k.on_chip;
    int64_t F = 1;
    for (const Dim& d : k.free) F *= d.size;
    std::vector<Dim> hdims = {{F, R}};
    for (const Dim& d : k.free) hdims.push_back(d);
    InstrArgs mul;
    mul.op0 = AluOp::multiply;
    InstrArgs red;
    red.reduce_op = k.op;
    red.negate = k.negate;
    for (size_t a = 1; a <= k.free.size(); ++a) red.axes.push_back(static_cast<int>(a));
    std::vector<TensorDecl> decls = {decl("x", {R, F}, bf16, kIn), decl("w", {R, F}, f32, kIn),
                                     decl("out", {R, 1}, k.out, kOut)};
    std::vector<ProgNode> body = {
        dma(sb(bf16, 0, R, chip), hbm(0, bf16, 0, hdims)),
        dma(sb(f32, 4000, R, chip), hbm(1, f32, 0, hdims)),
        instr(Opcode::tensor_tensor, sb(f32, 8000, R, chip),
              {sb(bf16, 0, R, chip), sb(f32, 4000, R, chip)}, mul),
        instr(Opcode::tensor_reduce, sb(k.out, 12000, R, {row(1)}), {sb(f32, 8000, R, chip)}, red),
        dma(hbm2(2, k.out, R, 1, 1), sb(k.out, 12000, R, {row(1)}))};
    if (k.keep) {
      decls.push_back(decl("prod", {R, F}, f32, kOut));
      body.push_back(dma(hbm(3, f32, 0, hdims), sb(f32, 8000, R, chip)));
    }
    Program p = program(decls, body);
    number(p);
    const auto chains = chains_of(p);
    REQUIRE(chains.size() == 1);
    if (k.on_chip.empty()) {  // (gapped tiles: w's load joins the chain as a copy step)
      CHECK(chains[0].steps == std::vector<size_t>{2});
      CHECK(chains[0].store == std::vector<bool>{k.keep});
    }
    CHECK(chains[0].reduce == std::optional<size_t>{3});
    native::JitOptions jo;
    const std::string ir = native::program_llvm_ir(p, jo, false);
    CHECK(ir.find("@neuron_k_chain(") != std::string::npos);
    CHECK(ir.find("@neuron_k_tensor_reduce(") == std::string::npos);
    // Specialized: the product's loop and the lanes' update are vector code, no calls left.
    const std::string opt = native::program_llvm_ir(p, jo, true);
    const size_t at = opt.find("define void @neuron_entry");
    REQUIRE(at != std::string::npos);
    const std::string entry = opt.substr(at, opt.find("\n}\n", at) - at);
    CHECK(entry.find("fmul <") != std::string::npos);
    CHECK(entry.find(k.op == AluOp::maximum ? "select <"  // builtins.hpp max_f32, vectorized
                     : k.op == AluOp::add   ? "fadd <"
                                            : "fsub <") != std::string::npos);
    CHECK(entry.find("@neuron_k_chain(") == std::string::npos);
    CHECK(entry.find("call float @_ZN6neuron8builtins") == std::string::npos);

    auto x = random_values(R * F, 21);
    auto w = random_values(R * F, 22);
    std::vector<Tensor> tensors = {Tensor::from_floats(x, {R, F}, bf16),
                                   Tensor::from_floats(w, {R, F}, f32),
                                   Tensor::empty({R, 1}, k.out)};
    if (k.keep) tensors.push_back(Tensor::empty({R, F}, f32));
    auto r = run_both(p, tensors);
    const Tensor xb = Tensor::from_floats(x, {R, F}, bf16);
    std::vector<double> ref(R);
    for (int64_t q = 0; q < R; ++q) {
      double acc = k.op == AluOp::maximum ? -INFINITY : 0.0;
      for (int64_t e = 0; e < F; ++e) {
        const double v = double(xb.get(q * F + e)) * double(float(w[q * F + e]));
        acc = k.op == AluOp::maximum ? std::max(acc, v) : k.op == AluOp::add ? acc + v : acc - v;
      }
      ref[q] = k.negate ? -acc : acc;
    }
    check_reference(r, 0, ref, k.out == bf16 ? tolerance_for(bf16) : Tolerance{1e-5, 2e-4});
  }
}

TEST_CASE("an output read back and rewritten in place: one chain over its rows, simulator's bits") {
  InstrArgs twice;
  twice.op0 = AluOp::multiply;
  twice.imm0 = 2.0;
  // out = 2 x, then twice out = 2 out in place (a softmax's second pass: load the output's
  // rows, scale, store them back). [128, 640] fp32 tiles (320 KiB) run in partition blocks.
  constexpr int64_t P = 128, W = 640;
  auto big = [&](int64_t off) {  // with its allocation, as lowered programs have
    AccessPattern ap = sb(f32, off, P, {row(W)});
    ap.alloc = {P, off, off + 4 * W, static_cast<int>(off / (4 * W))};
    return ap;
  };
  const AccessPattern out_rows = hbm2(1, f32, P, W, W);
  const std::vector<TensorDecl> decls = {decl("x", {P, W}, f32, kIn),
                                         decl("out", {P, W}, f32, kOut)};
  const std::vector<ProgNode> rewrite = {dma(big(0), out_rows),
                                         instr(Opcode::tensor_scalar, big(4 * W), {big(0)}, twice),
                                         dma(out_rows, big(4 * W))};
  // Planned over the rewrite alone: the load goes, and the scale and the store are one chain
  // that reads and writes the same view of out.
  Program alone = program(decls, rewrite);
  number(alone);
  std::vector<native::RunLocal> ranges = native::run_local_ranges(alone, alone.body, 0, 3);
  const auto no = [](const Affine&) { return false; };
  const native::ForwardedRun run = native::forward_loads(alone.body, 0, 3, ranges, no);
  CHECK(run.dropped == std::vector<bool>{true, false, false});
  const auto chains = native::plan_chains(run, ranges, no);
  REQUIRE(chains.size() == 1);
  CHECK(chains[0].steps == std::vector<size_t>{1, 2});
  CHECK(*chains[0].source == out_rows);
  // The whole kernel, the rewrite in a loop (its own run), on both executors.
  Program p = program(decls, {dma(big(0), hbm2(0, f32, P, W, W)),
                              instr(Opcode::tensor_scalar, big(4 * W), {big(0)}, twice),
                              dma(out_rows, big(4 * W)), loop("i0", 2, rewrite)});
  std::vector<float> x = random_values(P * W, 11);
  BothResults r = run_both(p, {Tensor::from_floats(x, {P, W}, f32), Tensor::empty({P, W}, f32)});
  std::vector<double> ref(x.begin(), x.end());
  for (double& v : ref) v *= 8;
  check_reference(r, 0, ref, Tolerance{0, 0});
}

TEST_CASE("same_partition_map: on chip by partition start and step; in HBM one view, rows apart") {
  const AccessPattern rows = hbm2(0, f32, 4, 16, 32);
  CHECK(native::same_partition_map(rows, rows));
  CHECK_FALSE(native::same_partition_map(rows, hbm2(0, f32, 4, 16, 32, 16)));  // other columns
  CHECK_FALSE(native::same_partition_map(rows, hbm2(0, f32, 4, 16, 16)));      // other rows
  // Rows that overlap (stride 8, 16 columns) or one row repeated (stride 0): a block's write
  // reaches another block's rows.
  const AccessPattern overlapping = hbm(0, f32, 0, {{8, 4}, {1, 16}});
  CHECK_FALSE(native::same_partition_map(overlapping, overlapping));
  const AccessPattern repeated = hbm(0, f32, 0, {{0, 4}, {1, 16}});
  CHECK_FALSE(native::same_partition_map(repeated, repeated));
  CHECK(native::same_partition_map(tile(0), tile(64)));  // other bytes, same partitions
  CHECK_FALSE(native::same_partition_map(tile(0), rows));
}

TEST_CASE("a slice of a wide tile at a loop's column, scaled into another tile: simulator's bits") {
  // The source's offset moves with the loop, so the lowering cannot prove it apart from the
  // destination and the kernel checks at run time; the two tiles' byte ranges interleave
  // (partition rows one pitch apart) but their columns do not, so it takes the plain loop.
  constexpr int64_t P = 4, W = 64;
  InstrArgs twice;
  twice.op0 = AluOp::multiply;
  twice.imm0 = 2.0;
  AccessPattern slice = sb(f32, 0, P, {row(16)});
  slice.offset = Affine::var("i0", 64) + Affine(0);
  Program p =
      program({decl("x", {P, W}, f32, kIn), decl("out", {P, W}, f32, kOut)},
              {dma(sb(f32, 0, P, {row(W)}), hbm2(0, f32, P, W, W)),
               loop("i0", 4,
                    {instr(Opcode::tensor_scalar, sb(f32, 512, P, {row(16)}), {slice}, twice),
                     dma(hbm(1, f32, Affine::var("i0", 16), {{W, P}, {1, 16}}),
                         sb(f32, 512, P, {row(16)}))})});
  std::vector<float> x = random_values(P * W, 12);
  BothResults r = run_both(p, {Tensor::from_floats(x, {P, W}, f32), Tensor::empty({P, W}, f32)});
  std::vector<double> ref(x.begin(), x.end());
  for (double& v : ref) v *= 2;
  check_reference(r, 0, ref, Tolerance{0, 0});
}
