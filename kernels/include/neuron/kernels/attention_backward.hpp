// Flash attention backward from the forward's saved logsumexp: dq, dk, dv, with dk and dv
// summed over the query heads of each kv head (GQA). Same shapes, masks and limits as
// attention.hpp; never forms the L x S matrix (memory O(L + S)).
//
// Math (per query i and key j, s = scale * q_i . k_j, plus the bias b_ij when the forward had
// one): p = exp(s - lse_i), D_i = dout_i . out_i,
// dp = dout_i . v_j, ds = p * (dp - D_i); dv_j = sum_i p dout_i, dk_j = scale sum_i ds q_i,
// dq_i = scale sum_j ds k_j. Rows that see no key (lse -inf) get dq 0 and add nothing.
//
// Tiling and engine plan. One SPMD program per (batch, kv head): grid
// attention_backward_grid(). Every product keeps its contraction on partitions:
//  - Prologue: the Tensor engine transposes K, V and, for each query head of the group, Q and
//    dout and out into HBM scratch (K^T [E, S], V^T [Ev, S], Q^T, dout^T, out^T [G, E|Ev, L]);
//    D = rowsum(dout * out) [G, L] (fp32) is the diagonal of dout out^T, a Tensor-engine
//    product in dp's arithmetic (so dp - D cancels exactly where out_i = v_j).
//  - One pass over blocks of 128 keys: dk and dv accumulate in two PSUM tiles [128, E|Ev] over
//    every query head of the group and every tile of 128 queries: scores and dp ([queries,
//    keys], queries on partitions) are nc_matmuls of the transposed operands; the Scalar engine
//    recomputes p = exp(scale * s - lse) (bias column -lse), the Vector engine forms ds = p *
//    (dp - D) in fp32; p and ds (in q's dtype), queries on partitions, are directly the
//    stationary operands of dv += p^T dout and dk += ds^T q. The same pair adds ds k to its
//    query rows of dq: the fp32 ds transposed on the Tensor engine, the product into PSUM, then
//    added to dq's fp32 sum in HBM scratch (read, add, write). The Vector engine scales dk on
//    the way out.
//  - Epilogue: dq = scale * its sum, rounded to q's dtype, per query tile.
// Causal masks work as in the forward: diagonal tiles are masked in PSUM, tiles that
// no query sees are skipped. The regular tiles (no clamping at 0, L or S) are rolled loops with
// runtime trip counts, so the IR does not grow with L and S (key tile s0 = 128 i sees 127
// partly-seeing queries, then floor((L - 127 + off) / 128) - i full query tiles); the rest are
// unrolled.
// dq needs no second pass: the program owns every key of its kv head, so the dq rows of its
// query heads get all their terms from it, and their sum lives in scratch private to the
// program. (Until session 51 a second pass per query tile recomputed the scores, p and ds to
// sum dq in PSUM: fp32 [1, 8, 2048, 64] backward 243 -> 161 ms at 1 thread, Intel Xeon.) Head
// dims over 128 contract in chunks of 128 partitions (the scores over E, dp over Ev), adding up
// in PSUM.
//
// attention_math_backward is the backward of PyTorch's math path (its softmax's backward),
// for the calls where PyTorch takes that path: p = exp(s - m) / l from each row's maximum m
// and sum l, recomputed, and D_i = sum_j p_ij dp_ij, instead of exp(s - lse) and dout_i .
// out_i. Where the softmax saturates (one p near 1) ds = p (dp - D) is a small difference of
// large terms, and the flash forms lose its digits: 3.5x PyTorch's dq error on average, up to
// 23x, in fp32 for PyTorch's own test inputs (uniform in [-9, 9], E = 8); the math forms
// keep them (two sweeps before the pass: the online max and sum, as the forward's, then D;
// two more scores products and one dp product per tile). It reads neither out nor lse.
#pragma once
#include <tuple>

#include "neuron/kernels/attention.hpp"

namespace neuron::kernels {

namespace detail {

// Both backwards: the flash one from `out` and `lse` (both given), the math one (neither).
inline std::tuple<nl::tensor, nl::tensor, nl::tensor> attention_backward_impl(
    const nl::tensor& q, const nl::tensor& k, const nl::tensor& v,
    const std::optional<nl::tensor>& out, const nl::tensor& dout,
    const std::optional<nl::tensor>& lse, const std::optional<nl::tensor>& bias,
    const AttentionConfig& cfg, const char* kernel, Span span) {
  const bool math = !out;
  const AttentionDims d = check_attention(q, k, v, cfg, kernel, span);
  if (bias) check_bias(*bias, d, kernel, span);
  const std::vector<int64_t> os{d.B, d.Hq, d.L, d.Ev};
  if (dout.shape() != os || (out && out->shape() != os))
    args_error(span, kernel, "out {} and dout {} must have shape {}",
               out ? shape_str(out->shape()) : "(none)", shape_str(dout.shape()), shape_str(os));
  if (lse &&
      (lse->shape() != std::vector<int64_t>{d.B, d.Hq, d.L} || lse->dtype() != DType::float32))
    args_error(span, kernel, "lse is {} {}; it must be float32 [{}, {}, {}]",
               dtype_name(lse->dtype()), shape_str(lse->shape()), d.B, d.Hq, d.L);
  const DType dt = q.dtype();
  auto dq = nl::ndarray({d.B, d.Hq, d.L, d.E}, dt, nl::shared_hbm, "dq");
  auto dk = nl::ndarray({d.B, d.Hkv, d.S, d.E}, dt, nl::shared_hbm, "dk");
  auto dv = nl::ndarray({d.B, d.Hkv, d.S, d.Ev}, dt, nl::shared_hbm, "dv");
  const nl::index b = nl::program_id(0), hk = nl::program_id(1);
  const int64_t off = cfg.causal_offset;

  // ---- prologue: transposed operands and D in HBM scratch ----
  auto kT = nl::ndarray({d.E, d.S}, dt, nl::hbm, "kT");
  auto vT = nl::ndarray({d.Ev, d.S}, dt, nl::hbm, "vT");
  auto qT = nl::ndarray({d.G, d.E, d.L}, dt, nl::hbm, "qT");
  auto doT = nl::ndarray({d.G, d.Ev, d.L}, dt, nl::hbm, "doT");
  auto dsum = nl::ndarray({d.G, d.L}, nl::float32, nl::hbm, "D");
  // The math backward's -scale * m (or -m of the biased scores) and l per row.
  std::optional<nl::tensor> neg_m, lsum;
  if (math) {
    neg_m = nl::ndarray({d.G, d.L}, nl::float32, nl::hbm, "neg_m");
    lsum = nl::ndarray({d.G, d.L}, nl::float32, nl::hbm, "l");
  }
  // With a bias the scores are scaled and biased before the softmax, which then runs at
  // scale 1 (sc).
  // The math backward scales q and k by sqrt(scale) before their product, and the gradients
  // by it after, as PyTorch's math path (the scores' rounding: 1.14x its dk error in fp16
  // without); sf is that factor, 1 in the flash backward, and s_scale what multiplies the raw
  // products.
  const double sf = math ? std::sqrt(d.scale) : 1.0, s_scale = math ? 1.0 : d.scale,
               grad_scale = math ? sf : d.scale;
  const double sc = bias ? 1.0 : s_scale;
  auto scaled = [&](nl::tensor t) {  // a q or k tile as the products take it
    if (sf != 1.0) isa::tensor_scalar(t, t, nl::multiply, sf);
    return t;
  };
  std::optional<nl::tensor> oT;  // the flash backward's out^T per head [G, Ev, L]
  if (!math) oT = nl::ndarray({d.G, d.Ev, d.L}, dt, nl::hbm, "oT");
  auto chunk_loads = [&](const nl::tensor& src, int64_t e) {  // src [e, n] HBM view
    std::vector<nl::tensor> out;
    for (const Chunk& c : head_chunks(e)) out.push_back(nl::load(src(nl::ds(c.c0, c.cw), nl::all)));
    return out;
  };
  transpose_into(kT, k(b, hk, nl::all, nl::all), d.S, sf);
  transpose_into(vT, v(b, hk, nl::all, nl::all), d.S);
  for (nl::index g : nl::affine_range(d.G)) {
    const nl::index hq = hk * d.G + g;
    transpose_into(qT(g, nl::all, nl::all), q(b, hq, nl::all, nl::all), d.L, sf);
    transpose_into(doT(g, nl::all, nl::all), dout(b, hq, nl::all, nl::all), d.L);
  }
  // The math sweeps' walk: every query tile with the key blocks it sees in
  // increasing order, tile(q0, qr, blocks) (blocks(step): step(s0, sw, mask_rel)); `kind`
  // says how the unmasked key blocks loop.
  auto query_tiles = [&](LoopKind kind, const auto& tile) {
    if (!cfg.causal) {
      for_each_tile(d.L, kPartitions, [&](nl::index, nl::index q0, int64_t qr) {
        tile(q0, qr, [&](const auto& step) {
          for_each_tile(
              d.S, kKeyBlock,
              [&](nl::index, nl::index s0, int64_t sw) { step(s0, sw, std::nullopt); }, 0, kind);
        });
      });
    } else {
      for_each_causal_query_tile(d, off, kind, tile);
    }
  };
  // The scores of queries [q0, q0 + qr) of head hq (Q^T chunks qT) and keys [s0, s0 + sw):
  // the raw product in PSUM (masked there on a causal diagonal), or in SBUF biased (scale * s
  // + bias, then masked).
  std::optional<CausalMaskTiles> mask_tiles;
  if (cfg.causal && !bias) mask_tiles = causal_mask_tiles();
  auto scores = [&](const std::vector<nl::tensor>& qTc, const nl::index& hq, const nl::index& q0,
                    const nl::index& s0, int64_t sw, std::optional<int64_t> mask_rel) {
    const int64_t qr = qTc[0].shape()[1];
    auto s_ps = nl::ndarray({qr, sw}, nl::float32, nl::psum, "scores");
    matmul_chunks(s_ps, qTc, chunk_loads(kT(nl::all, nl::ds(s0, sw)), d.E));
    if (!bias) {
      if (mask_rel) mask_causal_in_place(s_ps, *mask_rel, *mask_tiles);
      return s_ps;
    }
    auto s = nl::ndarray({qr, sw}, nl::float32, nl::sbuf, "biased");
    biased_scores(s, s_ps, s_scale, *bias, b, hq, q0, s0);
    if (mask_rel) mask_causal_rel(s, *mask_rel);
    return s;
  };
  auto dp_block = [&](const std::vector<nl::tensor>& doTc, const nl::index& s0, int64_t sw) {
    auto dp_ps = nl::ndarray({doTc[0].shape()[1], sw}, nl::float32, nl::psum, "dp");
    matmul_chunks(dp_ps, doTc, chunk_loads(vT(nl::all, nl::ds(s0, sw)), d.Ev));
    return dp_ps;
  };
  for (nl::index g : nl::affine_range(d.G)) {
    const nl::index hq = hk * d.G + g;
    if (math) {
      // The math sweeps, per query row: the online maximum m and sum l of e = exp(sc s - sc
      // m), rescaled as the maximum grows (as the forward's; sequential: they carry across
      // key blocks), then D = sum_j p_j dp_j of the normalized p = e / l, as PyTorch's
      // softmax backward sums it (D = sum_j e_j dp_j / l gave up to 1.7x its dq error in
      // fp16).
      query_tiles(LoopKind::sequential, [&](const nl::index& q0, int64_t qr, const auto& blocks) {
        auto qTc = chunk_loads(qT(g, nl::all, nl::ds(q0, qr)), d.E);
        auto doTc = chunk_loads(doT(g, nl::all, nl::ds(q0, qr)), d.Ev);
        auto m = nl::full({qr, 1}, kNegInf, nl::float32, nl::sbuf, "m");
        auto l = nl::zeros({qr, 1}, nl::float32, nl::sbuf, "l");
        auto neg_sm = nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "neg_sm");
        blocks([&](const nl::index& s0, int64_t sw, std::optional<int64_t> mask_rel) {
          SoftmaxStep st = online_softmax_step(scores(qTc, hq, q0, s0, sw, mask_rel), m, l,
                                               nl::float32, "e", sc, bias.has_value(), neg_sm);
          isa::tensor_copy(m, st.m_new);
        });
        // A row whose keys are all hidden (l = 0): p = 0 / l_safe = 0 and D 0, not NaN.
        isa::tensor_scalar(l, l, nl::maximum, double(std::numeric_limits<float>::min()));
        auto di = nl::zeros({qr, 1}, nl::float32, nl::sbuf, "Di");
        blocks([&](const nl::index& s0, int64_t sw, std::optional<int64_t> mask_rel) {
          auto p = nl::ndarray({qr, sw}, nl::float32, nl::sbuf, "p");  // as probs() makes it
          isa::activation(p, nl::exp, scores(qTc, hq, q0, s0, sw, mask_rel), neg_sm, sc);
          isa::tensor_scalar(p, p, nl::divide, l);
          auto pdp = nl::ndarray({qr, sw}, nl::float32, nl::sbuf, "p_dp");
          isa::tensor_tensor(pdp, p, dp_block(doTc, s0, sw), nl::multiply);
          auto pdp_sum = nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "p_dp_sum");
          isa::tensor_reduce(pdp_sum, nl::add, pdp, 1);
          isa::tensor_tensor(di, di, pdp_sum, nl::add);
        });
        isa::dma_copy(dsum(g, nl::ds(q0, qr)), di);
        isa::dma_copy((*neg_m)(g, nl::ds(q0, qr)), neg_sm);
        isa::dma_copy((*lsum)(g, nl::ds(q0, qr)), l);
      });
      continue;
    }
    transpose_into((*oT)(g, nl::all, nl::all), (*out)(b, hq, nl::all, nl::all), d.L);
    // D_i = dout_i . out_i as the diagonal of dout out^T: the Tensor engine's product of the
    // same operands, in the same order, as dp's dout_i . v_j, so dp - D is exactly 0 where
    // out_i is v_j (a query that sees one key: p = 1 and ds must vanish, which a Vector-engine
    // row sum missed by an ulp, failing PyTorch's own accuracy at L = S = 1 in bf16).
    for_each_tile(d.L, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
      auto gram = nl::ndarray({rr, rr}, nl::float32, nl::psum, "dout_out");
      matmul_chunks(gram, chunk_loads(doT(g, nl::all, nl::ds(r0, rr)), d.Ev),
                    chunk_loads((*oT)(g, nl::all, nl::ds(r0, rr)), d.Ev));
      auto diag = nl::ndarray({rr, rr}, nl::float32, nl::sbuf, "diag");
      isa::tensor_copy(diag, gram);
      isa::affine_select(diag, {{-1, rr}}, 1, diag, 0.0, nl::equal);  // keeps column p of row p
      auto di = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "Di");
      isa::tensor_reduce(di, nl::add, diag, 1);
      isa::dma_copy(dsum(g, nl::ds(r0, rr)), di);
    });
  }

  // Per query tile of head g: Q^T, dout^T, -lse and D (fp32 columns).
  // Q^T and dout^T [E|Ev, qr] one tile per head-dim chunk.
  // The math backward's l column rides along (p = exp(...) / l).
  struct QueryTile {
    std::vector<nl::tensor> qT, doT;
    nl::tensor neg_lse, di;
    nl::index hq, q0;
    std::optional<nl::tensor> l;
  };
  auto load_query_tile = [&](const nl::index& g, const nl::index& q0, int64_t qr) {
    QueryTile t{chunk_loads(qT(g, nl::all, nl::ds(q0, qr)), d.E),
                chunk_loads(doT(g, nl::all, nl::ds(q0, qr)), d.Ev),
                nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "neg_lse"),
                nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "Di"),
                hk * d.G + g,
                q0,
                std::nullopt};
    if (math) {  // -sc * m and l from the math sweep
      isa::dma_copy(t.neg_lse, (*neg_m)(g, nl::ds(q0, qr)));
      t.l = nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "l");
      isa::dma_copy(*t.l, (*lsum)(g, nl::ds(q0, qr)));
    } else {
      isa::dma_copy(t.neg_lse, (*lse)(b, hk * d.G + g, nl::ds(q0, qr)));
      isa::tensor_scalar(t.neg_lse, t.neg_lse, nl::multiply, -1.0);
      if (bias)  // a row whose keys the bias all hides (lse -inf): p = exp(-inf + max) = 0
        isa::tensor_scalar(t.neg_lse, t.neg_lse, nl::minimum,
                           double(std::numeric_limits<float>::max()));
    }
    isa::dma_copy(t.di, dsum(g, nl::ds(q0, qr)));
    return t;
  };
  // p = exp(scale * s - lse) (math: exp(scale * s - scale * m) / l) and ds = p * (dp - D) for
  // a [qr, sw] tile: p and ds in pdt (the dv and dk products' operands), ds32 in fp32 (dq's).
  // mask_rel: a causal diagonal tile, rel = q0 + causal_offset - s0 (static; mask_causal_rel).
  struct Probs {
    nl::tensor p, ds, ds32;
  };
  auto probs = [&](const QueryTile& t, const nl::index& s0, int64_t sw,
                   std::optional<int64_t> mask_rel, DType pdt) {
    const int64_t qr = t.qT[0].shape()[1];
    nl::tensor s = scores(t.qT, t.hq, t.q0, s0, sw, mask_rel);
    // p in fp32 first: ds = p * (dp - D) from the unrounded p, as PyTorch's flash backward
    // (a ds from the 16-bit p cost dk up to 16% more error than PyTorch's at few keys); the
    // 16-bit copy of p is only dv's matmul operand.
    auto p32 = nl::ndarray({qr, sw}, nl::float32, nl::sbuf, "p");
    isa::activation(p32, nl::exp, s, t.neg_lse, sc);
    if (t.l) isa::tensor_scalar(p32, p32, nl::divide, *t.l);
    // Each narrow copy right after the value it copies: the native backend then runs ds's
    // subtract, multiply and copy as one loop over the tile (fused chains) instead of reading
    // ds back (an exp is no chain step, so p's copy stays a pass of its own).
    std::optional<nl::tensor> p;
    if (pdt != DType::float32) {
      p = nl::ndarray({qr, sw}, pdt, nl::sbuf, "p_low");
      isa::tensor_copy(*p, p32);
    }
    auto ds32 = nl::ndarray({qr, sw}, nl::float32, nl::sbuf, "ds");
    isa::tensor_scalar(ds32, dp_block(t.doT, s0, sw), nl::subtract, t.di);
    isa::tensor_tensor(ds32, ds32, p32, nl::multiply);
    if (pdt == DType::float32) return Probs{p32, ds32, ds32};
    auto ds = nl::ndarray({qr, sw}, pdt, nl::sbuf, "ds_low");
    isa::tensor_copy(ds, ds32);
    return Probs{*p, ds, ds32};
  };

  // dq accumulates per query head in fp32 HBM scratch, private to the program (it owns every
  // key of its kv head, so no other program adds to these rows): zero first, then each
  // (query tile, key tile) pair adds its product, and the epilogue scales and rounds it.
  auto dq_acc = nl::ndarray({d.G, d.L, d.E}, nl::float32, nl::hbm, "dq_acc");
  for (nl::index g : nl::affine_range(d.G)) store_zero_rows(dq_acc(g, nl::all, nl::all), d.L, d.E);

  // ---- one pass: dk, dv per block of 128 keys, dq added per pair ----
  // kind: non-causal; causal with a static s0 (unrolled); or causal regular, s0 = 128 i for a
  // loop index i of the rolled key tiles (see below).
  enum class KeyKind { plain, causal_static, causal_rolled };
  auto key_tile = [&](const nl::index& s0, int64_t sr, KeyKind kind) {
    auto dv_ps = nl::zeros({sr, d.Ev}, nl::float32, nl::psum, "dv_acc");
    auto dk_ps = nl::zeros({sr, d.E}, nl::float32, nl::psum, "dk_acc");
    // dq's moving operand, the block's keys in fp32 (a bf16 k is widened exactly).
    auto kc = scaled(nl::load(k(b, hk, nl::ds(s0, sr), nl::all), nl::float32));
    for (nl::index g : nl::affine_range(d.G)) {
      const nl::index hq = hk * d.G + g;
      auto pair = [&](const nl::index& q0, int64_t qr, std::optional<int64_t> mask_rel) {
        QueryTile t = load_query_tile(g, q0, qr);
        const Probs pr = probs(t, s0, sr, mask_rel, dt);
        isa::nc_matmul(dv_ps, pr.p, nl::load(dout(b, hq, nl::ds(q0, qr), nl::all)), true);
        isa::nc_matmul(dk_ps, pr.ds, scaled(nl::load(q(b, hq, nl::ds(q0, qr), nl::all))), true);
        // dq's rows += ds k, from the fp32 ds (a bf16 ds cost dq about 10% more error than
        // PyTorch's). The transpose, its copy and the matmul are consecutive: the native
        // backend runs the triple as one product reading ds's rows (transposed matmuls).
        auto dq_ps = nl::ndarray({qr, d.E}, nl::float32, nl::psum, "dq_part");
        isa::nc_matmul(dq_ps, transpose_to_sbuf(pr.ds32, "dsT"), kc, false);
        auto rows = dq_acc(g, nl::ds(q0, qr), nl::all);
        auto sum = nl::load(rows);
        isa::tensor_tensor(sum, sum, dq_ps, nl::add);
        nl::store(rows, sum);
      };
      if (kind == KeyKind::plain) {
        for_each_tile(d.L, kPartitions,
                      [&](nl::index, nl::index q0, int64_t qr) { pair(q0, qr, std::nullopt); });
      } else if (kind == KeyKind::causal_static) {
        // Queries r see this block when r + off >= s0; all of it when r + off >= s0 + sr - 1.
        const int64_t s0c = s0.constant;
        const int64_t lo = std::clamp<int64_t>(s0c - off, d.q_start, d.L);
        const int64_t mid = std::clamp<int64_t>(s0c + sr - 1 - off, lo, d.L);
        for_each_static_tile(lo, mid, kPartitions,
                             [&](int64_t q0, int64_t qr) { pair(q0, qr, q0 + off - s0c); });
        for_each_tile(
            d.L - mid, kPartitions,
            [&](nl::index, nl::index q0, int64_t qr) { pair(q0, qr, std::nullopt); }, mid);
      } else {
        // A regular tile of 128 keys (rolled_keys below): the 127 queries from s0 - off see
        // part of it (rel 0), the full tiles of 128 from s0 + 127 - off all of it (a runtime
        // count), then a tail of static size.
        const nl::index lo = s0 - off, mid = s0 + (kPartitions - 1 - off);
        pair(lo, kPartitions - 1, 0);
        const int64_t after = d.L - (kPartitions - 1 - off);  // queries from mid at s0 = 0
        const nl::index full = div_exact(nl::index(after / kPartitions * kPartitions) - s0,
                                         kPartitions);
        for (nl::index r : nl::dynamic_range(full))
          pair(mid + r * kPartitions, kPartitions, std::nullopt);
        if (after % kPartitions)
          pair(mid + (full * kPartitions), after % kPartitions, std::nullopt);
      }
    }
    auto dkt = nl::ndarray({sr, d.E}, dt, nl::sbuf, "dk_t");
    isa::tensor_scalar(dkt, dk_ps, nl::multiply, grad_scale);
    nl::store(dk(b, hk, nl::ds(s0, sr), nl::all), dkt);
    nl::store(dv(b, hk, nl::ds(s0, sr), nl::all), nl::copy(dv_ps, dt));
  };
  if (!cfg.causal) {
    for_each_tile(d.S, kPartitions,
                  [&](nl::index, nl::index s0, int64_t sr) { key_tile(s0, sr, KeyKind::plain); });
  } else {
    // Regular key tiles: 128 keys whose partly-seeing queries [s0 - off, s0 + 127 - off) lie
    // in [q_start, L): one rolled loop (their bodies differ only by s0), so the IR does not grow
    // with S. The others are unrolled.
    const int64_t first = std::max<int64_t>(0, -floor_div(-(d.q_start + off), kPartitions));
    const int64_t last = std::min<int64_t>(d.S / kPartitions,
                                           floor_div(d.L - (kPartitions - 1) + off, kPartitions) + 1);
    auto unrolled = [&](int64_t from, int64_t to) {
      for_each_static_tile(from, to, kPartitions, [&](int64_t s0, int64_t sr) {
        key_tile(s0, sr, KeyKind::causal_static);
      });
    };
    if (last - first >= 2) {
      unrolled(0, first * kPartitions);
      for (nl::index i : nl::affine_range(first, last))
        key_tile(i * kPartitions, kPartitions, KeyKind::causal_rolled);
      unrolled(last * kPartitions, d.S);
    } else {
      unrolled(0, d.S);
    }
  }

  // ---- epilogue: dq = grad_scale * its sum, in q's dtype (rows that saw no key: 0) ----
  for (nl::index g : nl::affine_range(d.G)) {
    const nl::index hq = hk * d.G + g;
    for_each_tile(d.L, kPartitions, [&](nl::index, nl::index q0, int64_t qr) {
      auto dqt = nl::ndarray({qr, d.E}, dt, nl::sbuf, "dq_t");
      isa::tensor_scalar(dqt, nl::load(dq_acc(g, nl::ds(q0, qr), nl::all)), nl::multiply,
                         grad_scale);
      nl::store(dq(b, hq, nl::ds(q0, qr), nl::all), dqt);
    });
  }
  return {dq, dk, dv};
}

}  // namespace detail

// Returns {dq [B, Hq, L, E], dk [B, Hkv, S, E], dv [B, Hkv, S, Ev]} in q's dtype, from the
// forward's inputs, its output `out`, the output gradient `dout` and its `lse` [B, Hq, L].
// Launch with attention_backward_grid(q, k).
// With the forward's bias (attention_forward's), p = exp(scale * s + bias - lse); the bias gets
// no gradient.
inline std::tuple<nl::tensor, nl::tensor, nl::tensor> attention_backward(
    const nl::tensor& q, const nl::tensor& k, const nl::tensor& v, const nl::tensor& out,
    const nl::tensor& dout, const nl::tensor& lse, const std::optional<nl::tensor>& bias,
    const AttentionConfig& cfg = {}, Span span = Span::current()) {
  return detail::attention_backward_impl(q, k, v, out, dout, lse, bias, cfg, "attention_backward",
                                         span);
}

inline std::tuple<nl::tensor, nl::tensor, nl::tensor> attention_backward(
    const nl::tensor& q, const nl::tensor& k, const nl::tensor& v, const nl::tensor& out,
    const nl::tensor& dout, const nl::tensor& lse, const AttentionConfig& cfg = {},
    Span span = Span::current()) {
  return attention_backward(q, k, v, out, dout, lse, std::nullopt, cfg, span);
}

// The backward of PyTorch's math path (above): dq, dk, dv from the forward's inputs and the
// output gradient only, p = exp(s - m) / l recomputed, D_i = sum_j p_ij dp_ij. For the calls
// PyTorch's CPU attention runs on its math path (head dims E != Ev, inputs not 4-D), whose
// gradients it matches where the softmax saturates. Launch with attention_backward_grid(q, k).
inline std::tuple<nl::tensor, nl::tensor, nl::tensor> attention_math_backward(
    const nl::tensor& q, const nl::tensor& k, const nl::tensor& v, const nl::tensor& dout,
    const std::optional<nl::tensor>& bias = std::nullopt, const AttentionConfig& cfg = {},
    Span span = Span::current()) {
  return detail::attention_backward_impl(q, k, v, std::nullopt, dout, std::nullopt, bias, cfg,
                                         "attention_math_backward", span);
}

}  // namespace neuron::kernels
