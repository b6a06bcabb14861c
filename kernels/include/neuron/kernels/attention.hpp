// Flash attention forward: out = softmax(q @ k^T * scale + mask) @ v and its logsumexp, with
// an online softmax (fp32 statistics), causal or not, GQA, any lengths, L != S, E != Ev. Memory
// is O(L + S): the L x S score matrix is never formed, only 128 x 512 tiles of it.
//
// Shapes: q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev], E, Ev <= 512, Hq a multiple
// of Hkv (query head h reads kv head h / (Hq / Hkv)). out [B, Hq, L, Ev] in q's dtype, lse
// [B, Hq, L] fp32 (natural log). Causal: key j is visible to query i when j <= i + offset
// (offset 0 is PyTorch's is_causal; S - L aligns the diagonal bottom-right as flash-attn
// does). A query that sees no key gets out 0 and lse -inf, never NaN.
//
// Tiling and engine plan. One SPMD program per (batch, kv head, query head in the group):
// grid attention_grid(). Each program first transposes its K on the Tensor engine into K^T
// [E, S] (E on partitions, the contraction layout; a head dim over 128 is cut in chunks of 128
// partitions whose products add up in PSUM) and gathers V's rows 128 per tile; both stay
// in SBUF for the whole program when they fit cfg.resident_kv_bytes (64 KiB per partition:
// S up to 16k in bf16 at E = Ev = 128), else K^T goes to an HBM scratch and the main loop
// loads [E, 512] blocks of it and V's rows per step. Then per tile of 128 queries (Q^T [E, 128]
// transposed once):
//  - for each block of 512 keys, sequential because the statistics carry:
//    scores [128, 512] = nc_matmul(Q^T, K^T block) in one PSUM bank (Tensor engine);
//    on diagonal blocks of a causal mask, a predicated copy (Vector engine) writes -inf into
//    that PSUM tile where j > i + offset (mask_causal_in_place); the Vector engine takes the
//    row max and the new running max m; the Scalar engine computes p = exp(scale * s - scale *
//    m) with its row sum in one activation, and the rescale factor alpha = exp(scale * (m_old
//    - m)); p goes to the input dtype, is transposed 128 columns at a time on the Tensor engine
//    and multiplied with the V rows (accumulating [128, Ev] in PSUM); the Vector engine does
//    l = l * alpha + rowsum and acc = acc * alpha + p @ v.
//  - the Vector engine writes out = acc / l, the Scalar engine lse = scale * m + log(l).
// Non-causal query tiles go two at a time through one rolled loop, phase by phase, so one
// tile's softmax overlaps the other's matmuls. Causal ones go one at a time: blocks left of the
// diagonal run unmasked, the keys on it are masked (only the last 128 columns, which hold
// every one some row cannot see), blocks right of it are skipped. Tile t of each group of four
// sees 512 (j + u_t) unmasked keys in group j, so the groups are one rolled loop whose inner
// loop has a runtime trip count, and the IR stays the same size whatever L is; tiles whose keys
// would need clamping at 0 or S are unrolled. Rows before the first visible key (negative
// offsets) are written directly as 0 / -inf.
//
// With an additive bias (PyTorch's attn_mask, or the padding mask of a key count rounded up,
// neuron.ops), each score tile becomes scale * s + bias on the Vector engine (the bias block
// loaded per tile, a row broadcast over the partitions when the bias has one row) and the
// softmax runs at scale 1 on it; the running max is kept finite so blocks whose keys are all
// hidden for a row add nothing instead of NaN, and a row with no visible key gets out 0.
#pragma once
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

struct AttentionConfig {
  bool causal = false;
  std::optional<double> scale;  // default 1 / sqrt(E)
  int64_t causal_offset = 0;    // key j visible to query i when j <= i + causal_offset
  // SBUF bytes per partition the forward may spend keeping K^T and V on chip for the whole
  // program (loaded once, reused by every query tile); beyond it they stream from HBM per key
  // block. 0 always streams.
  int64_t resident_kv_bytes = 64 * 1024;
};

// Grids: the forward runs one program per (batch, kv head, query head of the group), the
// backward one per (batch, kv head).
inline std::vector<int64_t> attention_grid(const std::vector<int64_t>& q_shape,
                                           const std::vector<int64_t>& k_shape) {
  return {q_shape.at(0), k_shape.at(1), q_shape.at(1) / k_shape.at(1)};
}
inline std::vector<int64_t> attention_backward_grid(const std::vector<int64_t>& q_shape,
                                                    const std::vector<int64_t>& k_shape) {
  return {q_shape.at(0), k_shape.at(1)};
}

inline constexpr int64_t kKeyBlock = 512;  // keys per score tile: one PSUM bank of fp32
// Head dims up to one PSUM bank of fp32 ([128, Ev] accumulators, and the moving operand of a
// matmul has at most 512 columns); contractions over more than 128 go chunk by chunk.
inline constexpr int64_t kMaxHeadDim = kPsumColumns;

namespace detail {

struct AttentionDims {
  int64_t B, Hq, Hkv, G, L, S, E, Ev;
  double scale;
  // Queries before q_start see no key (causal with a negative offset).
  int64_t q_start;
};

inline AttentionDims check_attention(const nl::tensor& q, const nl::tensor& k, const nl::tensor& v,
                                     const AttentionConfig& cfg, const char* kernel,
                                     const Span& span) {
  for (auto [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    require_rank(*t, 4, kernel, name, span);
    require_float(*t, kernel, name, span);
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    args_error(span, kernel, "q, k and v must have one dtype, got {}, {} and {}",
               dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  const auto qs = q.shape(), ks = k.shape(), vs = v.shape();
  AttentionDims d{qs[0], qs[1], ks[1], 1, qs[2], ks[2], qs[3], vs[3], 0, 0};
  if (ks[0] != d.B || vs[0] != d.B || vs[1] != d.Hkv || vs[2] != d.S || ks[3] != d.E)
    args_error(span, kernel,
               "shapes do not match: q {} (B, Hq, L, E), k {} (B, Hkv, S, E), v {} (B, Hkv, S, "
               "Ev)",
               shape_str(qs), shape_str(ks), shape_str(vs));
  if (d.Hq % d.Hkv != 0)
    args_error(span, kernel, "the {} query heads must be a multiple of the {} key/value heads",
               d.Hq, d.Hkv);
  if (d.E > kMaxHeadDim || d.Ev > kMaxHeadDim)
    args_error(span, kernel, "head dims E={} and Ev={} must be at most {}", d.E, d.Ev, kMaxHeadDim);
  d.G = d.Hq / d.Hkv;
  d.scale = cfg.scale.value_or(1.0 / std::sqrt(double(d.E)));
  if (!(d.scale > 0) || !std::isfinite(d.scale))
    args_error(span, kernel, "scale={} must be a positive number", d.scale);
  d.q_start = cfg.causal ? std::clamp<int64_t>(-cfg.causal_offset, 0, d.L) : 0;
  return d;
}

inline void check_bias(const nl::tensor& bias, const AttentionDims& d, const char* kernel,
                       const Span& span) {
  require_rank(bias, 4, kernel, "bias", span);
  const auto bs = bias.shape();
  auto fits = [](int64_t n, int64_t full) { return n == 1 || n == full; };
  if (bias.dtype() != nl::float32 || !fits(bs[0], d.B) || !fits(bs[1], d.Hq) || !fits(bs[2], d.L) ||
      bs[3] != d.S)
    args_error(span, kernel,
               "bias must be float32 [B or 1, Hq or 1, L or 1, S] = [{} or 1, {} or 1, {} or 1, "
               "{}], got {} {}",
               d.B, d.Hq, d.L, d.S, dtype_name(bias.dtype()), shape_str(bs));
}

inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// dst [qr, sw] = scale * scores + the bias of batch b, query head hq, queries [q0, q0 + qr),
// keys [s0, s0 + sw) (a bias row broadcast over the partitions when the bias has one row).
inline void biased_scores(const nl::tensor& dst, const nl::tensor& scores, double scale,
                          const nl::tensor& bias, const nl::index& b, const nl::index& hq,
                          const nl::index& q0, const nl::index& s0) {
  const int64_t qr = dst.shape()[0], sw = dst.shape()[1];
  const auto bs = bias.shape();
  auto view = bias(bs[0] == 1 ? nl::index(0) : b, bs[1] == 1 ? nl::index(0) : hq, nl::all, nl::all);
  nl::tensor tile = nl::load(view(bs[2] == 1 ? nl::ds(0, 1) : nl::ds(q0, qr), nl::ds(s0, sw)));
  if (bs[2] == 1 && qr > 1) tile = nl::broadcast_to(tile, {qr, sw});
  isa::tensor_scalar(dst, scores, nl::multiply, scale);
  isa::tensor_tensor(dst, dst, tile, nl::add);
}

// One key block of the online softmax over the rows of the score tile s (the forward's, and
// the math backward's first sweep): m_new = max(m, rowmax s), kept finite with a bias (a bias
// may hide every key a row has seen so far, left padding: exp(s - max) is then 0, not
// exp(-inf + inf) = NaN); neg_sm = -sc m_new (into `neg_sm_into` when given, a tile that
// outlives a rolled loop); e = exp(sc s + neg_sm) of e_dtype with its row sum; alpha = exp(sc
// m + neg_sm); l = l alpha + rowsum. The caller copies m_new into m once done with alpha.
struct SoftmaxStep {
  nl::tensor m_new, e, alpha;
};
inline SoftmaxStep online_softmax_step(const nl::tensor& s, const nl::tensor& m,
                                       const nl::tensor& l, DType e_dtype, const char* e_name,
                                       double sc, bool finite_max,
                                       const std::optional<nl::tensor>& neg_sm_into = {}) {
  const int64_t qr = s.shape()[0];
  auto m_new = nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "m_new");
  isa::tensor_reduce(m_new, nl::max, s, 1);
  isa::tensor_tensor(m_new, m_new, m, nl::maximum);
  if (finite_max)
    isa::tensor_scalar(m_new, m_new, nl::maximum, double(-std::numeric_limits<float>::max()));
  const nl::tensor neg_sm =
      neg_sm_into ? *neg_sm_into : nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "neg_sm");
  isa::tensor_scalar(neg_sm, m_new, nl::multiply, -sc);
  auto e = nl::ndarray(s.shape(), e_dtype, nl::sbuf, e_name);
  auto rowsum = nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "rowsum");
  isa::activation(e, nl::exp, s, neg_sm, sc, nl::add, rowsum);
  auto alpha = nl::ndarray({qr, 1}, nl::float32, nl::sbuf, "alpha");
  isa::activation(alpha, nl::exp, m, neg_sm, sc);
  isa::tensor_scalar(l, l, nl::multiply, alpha, false, nl::add, rowsum);
  return {m_new, e, alpha};
}

// Causal mask of a score tile whose rows are queries q0.. and columns keys s0..: keeps s where
// key <= query + offset, else -inf; rel = q0 + offset - s0 (static, though q0 and s0 may not
// be). Column f is visible to row p when f <= rel + p, so columns up to rel are visible to
// every row and only the ones after go through affine_select.
inline void mask_causal_rel(const nl::tensor& s, int64_t rel) {
  const int64_t cols = s.shape()[1];
  const int64_t m0 = std::clamp<int64_t>(rel + 1, 0, cols);
  if (m0 == cols) return;
  // value(p, f') = rel - m0 + p - f' >= 0 for column f = m0 + f'
  isa::affine_select(s(nl::all, nl::ds(m0, cols - m0)), {{-1, cols - m0}}, 1,
                     s(nl::all, nl::ds(m0, cols - m0)), kNegInf, nl::greater_equal, rel - m0);
}

// The causal mask applied to a score tile where it lies, PSUM included: the columns some row
// cannot see (mask_causal_rel's) take -inf through a predicated copy on the Vector engine, which
// may write PSUM where affine_select (GpSimd) cannot, so the tile is not first copied to SBUF
// (the copy and the select were 10% of the causal bf16 forward's instructions). Program
// constants (causal_mask_tiles): `hidden` [128, 256] holds 1 where its column c >= its
// partition p + 128, `ninf` [128, 128] -inf.
struct CausalMaskTiles {
  nl::tensor hidden, ninf;
};
inline CausalMaskTiles causal_mask_tiles() {
  auto hidden = nl::ndarray({kPartitions, 2 * kPartitions}, nl::float32, nl::sbuf, "hidden");
  isa::iota(hidden, {{1, 2 * kPartitions}}, -kPartitions, -1);  // c - p - 128
  isa::tensor_scalar(hidden, hidden, nl::greater_equal, 0.0);
  return {hidden, nl::full({kPartitions, kPartitions}, kNegInf, nl::float32, nl::sbuf, "ninf")};
}
// The tile s [qr, cols] (rel as mask_causal_rel's: column f is hidden from row p when f > rel +
// p) masked in place. The copy covers the last min(cols, 128) columns, in whole vectors: column
// f reads hidden[p, f - rel + 127], 1 exactly when f > rel + p. Every hidden column is among
// them when cols <= rel + 129, as for every tile the attention kernels visit (each holds a key
// some row of the tile sees).
inline void mask_causal_in_place(const nl::tensor& s, int64_t rel, const CausalMaskTiles& t) {
  const int64_t qr = s.shape()[0], cols = s.shape()[1];
  if (cols - 1 <= rel) return;  // every column visible to row 0, so to all
  NEURON_ASSERT(cols <= rel + kPartitions + 1,
                "a causal score tile of {} columns at rel {}: those past rel + 128 are hidden "
                "from every row (visit fewer keys)",
                cols, rel);
  const int64_t a = std::max<int64_t>(0, cols - kPartitions), n = cols - a;
  isa::tensor_copy_predicated(s(nl::all, nl::ds(a, n)), t.ninf(nl::ds(0, qr), nl::ds(0, n)),
                              t.hidden(nl::ds(0, qr), nl::ds(a - rel + kPartitions - 1, n)));
}

// The key range a causal query tile [q0, q0 + qr) visits: keys [0, masked_from) are visible to
// every row and run unmasked, keys [masked_from, end) go through the mask. masked_from is
// rounded down to a whole key block (masking visible keys changes nothing), so the unmasked
// part is one rolled loop without a tail and the masked part is usually a single block: two
// copies of the loop body per query tile, which keeps the unrolled IR small.
struct KeyRange {
  int64_t masked_from, end;
};
inline KeyRange causal_keys(int64_t q0, int64_t qr, int64_t offset, int64_t S) {
  const int64_t all_see = std::clamp<int64_t>(q0 + offset + 1, 0, S);
  const int64_t end = std::clamp<int64_t>(q0 + qr + offset, 0, S);
  return {all_see / kKeyBlock * kKeyBlock, end};
}

// Causal query tiles of [q_start, L) with the key blocks each visits: tile(q0, qr, blocks),
// where blocks(step) calls step(s0, sw, mask_rel) for the tile's key blocks in increasing order
// (mask_rel, rel = q0 + offset - s0, on the diagonal ones; mask_causal_rel). The regular tiles
// (128 rows whose keys need no clamping at 0 or S) go in groups of kKeyBlock / 128 = 4 through
// one rolled loop: tile t of group j sees 512 (j + u_t) keys unmasked (a runtime trip count,
// u_t static) and a masked range of static width and static rel right after, so the IR holds
// four copies of the body whatever L is (unrolling every tile made L = 2048 a 9 s compile).
// The other tiles are unrolled, their unmasked blocks a rolled loop of kind `unmasked`.
template <typename Tile>
void for_each_causal_query_tile(const AttentionDims& d, int64_t offset, LoopKind unmasked,
                                const Tile& tile) {
  const int64_t qa = d.q_start, per = kKeyBlock / kPartitions;
  const int64_t groups =
      std::max<int64_t>(0, std::min(d.L - qa, d.S - offset - qa) / kKeyBlock);
  if (groups > 0) {
    for (nl::index j : nl::affine_range(groups)) {
      for (int64_t t = 0; t < per; ++t) {
        const int64_t q_rel = qa + t * kPartitions;                 // q0 at j = 0
        const int64_t all_see = q_rel + offset + 1;                 // >= 1, at j = 0
        const int64_t u = all_see / kKeyBlock;                      // unmasked blocks at j = 0
        const int64_t width = all_see + kPartitions - 1 - u * kKeyBlock;  // masked keys
        tile(j * kKeyBlock + q_rel, kPartitions, [&](const auto& step) {
          for (nl::index i : nl::dynamic_range(j + u))
            step(i * kKeyBlock, kKeyBlock, std::nullopt);
          for_each_static_tile(0, width, kKeyBlock, [&](int64_t w0, int64_t sw) {
            step(j * kKeyBlock + (u * kKeyBlock + w0), sw, q_rel + offset - u * kKeyBlock - w0);
          });
        });
      }
    }
  }
  for_each_static_tile(qa + groups * kKeyBlock, d.L, kPartitions, [&](int64_t q0, int64_t qr) {
    const KeyRange keys = causal_keys(q0, qr, offset, d.S);
    tile(nl::index(q0), qr, [&](const auto& step) {
      for_each_tile(
          keys.masked_from, kKeyBlock,
          [&](nl::index, nl::index s0, int64_t sw) { step(s0, sw, std::nullopt); }, 0, unmasked);
      for_each_static_tile(keys.masked_from, keys.end, kKeyBlock,
                           [&](int64_t s0, int64_t sw) { step(s0, sw, q0 + offset - s0); });
    });
  });
}

// The contraction chunks of a head dim: [c0, c0 + cw) with cw <= 128 (the partitions one
// matmul contracts over). A head dim over 128 adds its chunks' products in PSUM.
struct Chunk {
  int64_t c0, cw;
};
inline std::vector<Chunk> head_chunks(int64_t e) {
  std::vector<Chunk> out;
  for_each_static_tile(0, e, kPartitions, [&](int64_t c0, int64_t cw) { out.push_back({c0, cw}); });
  return out;
}

// dst = stationary^T @ moving over chunked contractions: one matmul per chunk, the first
// overwriting dst (or adding, with `accumulate`), the others adding.
inline void matmul_chunks(const nl::tensor& dst, const std::vector<nl::tensor>& stationary,
                          const std::vector<nl::tensor>& moving, bool accumulate = false) {
  for (size_t c = 0; c < stationary.size(); ++c)
    isa::nc_matmul(dst, stationary[c], moving[c], accumulate || c > 0);
}

// Transposes rows [0, n) of a [n, D] HBM view through the Tensor engine into an HBM scratch
// [D, n] (`dst` a view of it), 128 rows and 128 columns at a time.
// With `scale`, the rows are multiplied by it first (in their dtype).
inline void transpose_into(const nl::tensor& dst, const nl::tensor& src, int64_t n,
                           double scale = 1.0) {
  const int64_t D = src.shape()[1];
  for_each_tile(n, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    auto t = nl::load(src(nl::ds(r0, rr), nl::all));
    if (scale != 1.0) isa::tensor_scalar(t, t, nl::multiply, scale);
    for (const Chunk& c : head_chunks(D))
      nl::store(dst(nl::ds(c.c0, c.cw), nl::ds(r0, rr)),
                transpose_to_sbuf(t(nl::all, nl::ds(c.c0, c.cw)), "tT"));
  });
}

// x [rows, D] (SBUF, rows <= 128) transposed into one SBUF tile [cw, rows] per head-dim chunk.
inline std::vector<nl::tensor> transpose_chunks(const nl::tensor& x, const std::string& name) {
  std::vector<nl::tensor> out;
  for (const Chunk& c : head_chunks(x.shape()[1]))
    out.push_back(transpose_to_sbuf(x(nl::all, nl::ds(c.c0, c.cw)), name));
  return out;
}

// a / d for an index whose constant and coefficients are multiples of d.
inline nl::index div_exact(const nl::index& a, int64_t d) {
  nl::index r(a.constant / d);
  NEURON_ASSERT(a.constant % d == 0, "{} is not a multiple of {}", a.str(), d);
  for (auto& t : a.terms) {
    NEURON_ASSERT(t.coeff % d == 0, "{} is not a multiple of {}", a.str(), d);
    r = r + nl::index::var(t.var, t.coeff / d);
  }
  return r;
}

// Stores zeros in rows [0, n) of a [.., D] HBM view (queries that see no key).
inline void store_zero_rows(const nl::tensor& dst, int64_t n, int64_t D) {
  for_each_tile(n, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    nl::store(dst(nl::ds(r0, rr), nl::all), nl::zeros({rr, D}, dst.dtype(), nl::sbuf, "zero"));
  });
}

}  // namespace detail

// Returns {out [B, Hq, L, Ev], lse [B, Hq, L] fp32}. Launch with attention_grid(q, k).
// With a bias (fp32 [Bb, Hb, Lb, S], Bb in {1, B}, Hb in {1, Hq}, Lb in {1, L}: broadcast
// along its size-1 dims), the softmax is over scale * q.k + bias (PyTorch's float attn_mask;
// -inf hides a key) and lse is in those units: logsumexp(scale * q.k + bias). A query row
// whose keys are all hidden gets out 0 and lse -inf, as PyTorch's CPU attention does.
inline std::tuple<nl::tensor, nl::tensor> attention_forward(const nl::tensor& q,
                                                            const nl::tensor& k,
                                                            const nl::tensor& v,
                                                            const std::optional<nl::tensor>& bias,
                                                            const AttentionConfig& cfg = {},
                                                            Span span = Span::current()) {
  using namespace detail;
  AttentionDims d = check_attention(q, k, v, cfg, "attention_forward", span);
  if (bias) check_bias(*bias, d, "attention_forward", span);
  const DType dt = q.dtype();
  auto out = nl::ndarray({d.B, d.Hq, d.L, d.Ev}, dt, nl::shared_hbm, "out");
  auto lse = nl::ndarray({d.B, d.Hq, d.L}, nl::float32, nl::shared_hbm, "lse");
  const nl::index b = nl::program_id(0), hk = nl::program_id(1), hq = hk * d.G + nl::program_id(2);
  auto out_h = out(b, hq, nl::all, nl::all);
  auto lse_h = lse(b, hq, nl::all);

  // K^T [E, S] (keys on the free axis: the moving operand of the score matmul) and V's rows,
  // 128 per tile: on chip for the whole program when they fit, else K^T in an HBM scratch
  // and both read per key block. Key blocks start at multiples of 128.
  const int64_t ST = ceil_div(d.S, kPartitions);
  const std::vector<Chunk> e_chunks = head_chunks(d.E);
  const int64_t EC = static_cast<int64_t>(e_chunks.size());
  const bool resident = (EC * d.S + ST * d.Ev) * dtype_bytes(dt) <= cfg.resident_kv_bytes;
  std::optional<nl::tensor> kT_sb, v_sb, kT_hbm;
  if (resident) {
    // Chunk c of K^T is kT_sb[0:cw, c, :].
    kT_sb = nl::ndarray({std::min(d.E, kPartitions), EC, d.S}, dt, nl::sbuf, "kT");
    v_sb = nl::ndarray({std::min(d.S, kPartitions), ST, d.Ev}, dt, nl::sbuf, "v_rows");
    for_each_tile(d.S, kPartitions, [&](nl::index t, nl::index s0, int64_t sr) {
      auto rows = nl::load(k(b, hk, nl::ds(s0, sr), nl::all));
      for (int64_t c = 0; c < EC; ++c) {
        const Chunk& ch = e_chunks[static_cast<size_t>(c)];
        isa::tensor_copy((*kT_sb)(nl::ds(0, ch.cw), c, nl::ds(s0, sr)),
                         nl::transpose(rows(nl::all, nl::ds(ch.c0, ch.cw))));
      }
      isa::dma_copy((*v_sb)(nl::ds(0, sr), t, nl::all), v(b, hk, nl::ds(s0, sr), nl::all));
    });
  } else {
    kT_hbm = nl::ndarray({d.E, d.S}, dt, nl::hbm, "kT");
    transpose_into(*kT_hbm, k(b, hk, nl::all, nl::all), d.S);
  }
  // K^T [E, sw] of the keys [s0, s0 + sw), one tile per head-dim chunk.
  auto key_block = [&](const nl::index& s0, int64_t sw) {
    std::vector<nl::tensor> out;
    for (int64_t c = 0; c < EC; ++c) {
      const Chunk& ch = e_chunks[static_cast<size_t>(c)];
      out.push_back(resident ? (*kT_sb)(nl::ds(0, ch.cw), c, nl::ds(s0, sw))
                             : nl::load((*kT_hbm)(nl::ds(ch.c0, ch.cw), nl::ds(s0, sw))));
    }
    return out;
  };
  auto value_rows = [&](const nl::index& r0, int64_t rr) {
    return resident ? (*v_sb)(nl::ds(0, rr), div_exact(r0, kPartitions), nl::all)
                    : nl::load(v(b, hk, nl::ds(r0, rr), nl::all));
  };

  // With a bias the scores are scaled and biased before the softmax, which then runs at scale
  // 1 (sc).
  const double sc = bias ? 1.0 : d.scale;

  // Rows that see no key.
  for_each_tile(d.q_start, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    nl::store(out_h(nl::ds(r0, rr), nl::all), nl::zeros({rr, d.Ev}, dt, nl::sbuf, "zero"));
    isa::dma_copy(lse_h(nl::ds(r0, rr)), nl::full({rr, 1}, kNegInf, nl::float32, nl::sbuf, "ninf"));
  });

  std::optional<CausalMaskTiles> mask_tiles;
  if (cfg.causal && !bias) mask_tiles = causal_mask_tiles();

  // The online-softmax state of one tile of queries [q0, q0 + qr).
  struct QueryTile {
    nl::index q0;
    int64_t qr;
    std::vector<nl::tensor> qT;  // Q^T [E, qr], one tile per head-dim chunk
    nl::tensor m, l, acc;
  };
  auto open_tile = [&](const nl::index& q0, int64_t qr) {
    return QueryTile{q0,
                     qr,
                     transpose_chunks(nl::load(q(b, hq, nl::ds(q0, qr), nl::all)), "qT"),
                     nl::full({qr, 1}, kNegInf, nl::float32, nl::sbuf, "m"),
                     nl::zeros({qr, 1}, nl::float32, nl::sbuf, "l"),
                     nl::zeros({qr, d.Ev}, nl::float32, nl::sbuf, "acc")};
  };
  // One key block [s0, s0 + sw) for a group of query tiles, phase by phase across the group:
  // the tiles' chains are independent, so one tile's softmax (Vector and Scalar engines)
  // overlaps another's matmuls (Tensor engine). mask_rel: the group is one causal tile whose
  // block is on the diagonal, rel = q0 + causal_offset - s0 (mask_causal_rel).
  auto step = [&](std::vector<QueryTile>& tiles, const nl::index& s0, int64_t sw,
                  std::optional<int64_t> mask_rel) {
    auto kt = key_block(s0, sw);
    std::vector<nl::tensor> scores, m_new, alpha, p;
    for (auto& t : tiles) {
      auto s_ps = nl::ndarray({t.qr, sw}, nl::float32, nl::psum, "scores");
      matmul_chunks(s_ps, t.qT, kt);
      scores.push_back(s_ps);
    }
    for (size_t i = 0; i < tiles.size(); ++i) {
      auto& t = tiles[i];
      nl::tensor s = scores[i];
      if (bias) {
        s = nl::ndarray({t.qr, sw}, nl::float32, nl::sbuf, "biased");
        biased_scores(s, scores[i], d.scale, *bias, b, hq, t.q0, s0);
      }
      if (mask_rel) {
        if (bias)
          mask_causal_rel(s, *mask_rel);
        else
          mask_causal_in_place(s, *mask_rel, *mask_tiles);
      }
      SoftmaxStep st = online_softmax_step(s, t.m, t.l, dt, "p", sc, bias.has_value());
      m_new.push_back(st.m_new);
      p.push_back(st.e);
      alpha.push_back(st.alpha);
    }
    std::vector<nl::tensor> pv;
    for (auto& t : tiles) pv.push_back(nl::ndarray({t.qr, d.Ev}, nl::float32, nl::psum, "pv"));
    for_each_static_tile(0, sw, kPartitions, [&](int64_t c, int64_t cw) {
      auto vt = value_rows(s0 + c, cw);
      for (size_t i = 0; i < tiles.size(); ++i) {
        auto pT =
            transpose_to_sbuf(p[i](nl::all, nl::ds(c, cw)), "pT", /*evacuate_on_scalar=*/true);
        isa::nc_matmul(pv[i], pT, vt, /*accumulate=*/c > 0);
      }
    });
    for (size_t i = 0; i < tiles.size(); ++i) {
      auto& t = tiles[i];
      isa::tensor_scalar(t.acc, t.acc, nl::multiply, alpha[i]);
      isa::tensor_tensor(t.acc, t.acc, pv[i], nl::add);
      isa::tensor_copy(t.m, m_new[i]);
    }
  };
  auto close_tile = [&](const QueryTile& t) {
    auto o = nl::ndarray({t.qr, d.Ev}, dt, nl::sbuf, "o");
    nl::tensor l = t.l;
    if (bias) {  // a row whose keys are all hidden has l = acc = 0: out 0 (as PyTorch), not NaN
      l = nl::ndarray({t.qr, 1}, nl::float32, nl::sbuf, "l_safe");
      isa::tensor_scalar(l, t.l, nl::maximum, double(std::numeric_limits<float>::min()));
    }
    isa::tensor_scalar(o, t.acc, nl::multiply, nl::reciprocal(l));
    nl::store(out_h(nl::ds(t.q0, t.qr), nl::all), o);
    auto logl = nl::log(t.l);
    auto lse_t = nl::ndarray({t.qr, 1}, nl::float32, nl::sbuf, "lse_t");
    isa::tensor_scalar(lse_t, t.m, nl::multiply, sc, false, nl::add, logl);
    isa::dma_copy(lse_h(nl::ds(t.q0, t.qr)), lse_t);
  };

  if (!cfg.causal) {
    // Groups of two query tiles share each key block.
    for_each_tile(d.L, 2 * kPartitions, [&](nl::index, nl::index g0, int64_t gr) {
      std::vector<QueryTile> tiles;
      for_each_static_tile(0, gr, kPartitions,
                           [&](int64_t c, int64_t cw) { tiles.push_back(open_tile(g0 + c, cw)); });
      for_each_tile(
          d.S, kKeyBlock,
          [&](nl::index, nl::index s0, int64_t sw) { step(tiles, s0, sw, std::nullopt); }, 0,
          LoopKind::sequential);
      for (auto& t : tiles) close_tile(t);
    });
  } else {
    // Causal, one query tile at a time (for_each_causal_query_tile).
    for_each_causal_query_tile(
        d, cfg.causal_offset, LoopKind::sequential,
        [&](const nl::index& q0, int64_t qr, const auto& blocks) {
          std::vector<QueryTile> tiles{open_tile(q0, qr)};
          blocks([&](const nl::index& s0, int64_t sw, std::optional<int64_t> mask_rel) {
            step(tiles, s0, sw, mask_rel);
          });
          close_tile(tiles[0]);
        });
  }
  return {out, lse};
}

inline std::tuple<nl::tensor, nl::tensor> attention_forward(const nl::tensor& q,
                                                            const nl::tensor& k,
                                                            const nl::tensor& v,
                                                            const AttentionConfig& cfg = {},
                                                            Span span = Span::current()) {
  return attention_forward(q, k, v, std::nullopt, cfg, span);
}

}  // namespace neuron::kernels
