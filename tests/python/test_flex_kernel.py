# The FlexAttention forward as a neuron kernel (kernel_options={"BACKEND": "native" |
# "simulator"}): block lists read at run time (one compile per mask shape), full blocks without
# mask_mod, empty blocks skipped, b/h-dependent mods and captured tensors read by gathers,
# judged against the float64 dense reference by FLEX.md's rule. Every case runs on the
# simulator (no LLVM compile: cheap); a subset also natively.
import warnings

import pytest
import torch

import neuron
from neuron.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention
from neuron.flex_attention import kernel as K

import flex_helpers as fh


@pytest.fixture(autouse=True)
def quick_native_compiles(monkeypatch):
    # The instruction kernels called as host functions: the same bits as the bitcode build
    # (test_bad_inputs.py::test_host_instruction_kernels_give_the_same_bits) at about a third
    # of the cold compile time of these long kernels.
    monkeypatch.setenv("NEURON_NATIVE_KERNELS", "host")


def run(backend, q, k, v, score_mod=None, block_mask=None):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no silent switch to the host path
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask,
                              enable_gqa=q.shape[1] != k.shape[1],
                              kernel_options={"BACKEND": backend},
                              return_aux=AuxRequest(lse=True))


def check(name, got, q, k, v, score_mod, mask_mod):
    out, aux = got
    golden, golden_lse = fh.dense_reference(q.double(), k.double(), v.double(), score_mod,
                                            mask_mod)
    ref, _ = fh.dense_reference(q, k, v, score_mod, mask_mod)
    assert out.dtype == q.dtype and out.shape == golden.shape
    fh.judge(f"{name} out", out, golden, ref)
    fh.lse_close(f"{name} lse", aux.lse, golden_lse, tol=1e-4)


def qkv(B, Hq, Hkv, Bk, L, S, E, Ev, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Hq, L, E, generator=g).to(dtype),
            torch.randn(Bk, Hkv, S, E, generator=g).to(dtype),
            torch.randn(Bk, Hkv, S, Ev, generator=g).to(dtype))


def compiles():
    c = neuron.cache.info()
    return c["memory_hits"] + c["disk_hits"] + c["misses"]


@pytest.mark.parametrize("backend", ["native", "simulator"])
def test_one_compile_serves_every_block_mask_and_captured_value(backend):
    # The same document mask_mod over two document layouts: different block lists (a new
    # BlockMask) and different captured values, one trace and one compile request.
    L = 256 if backend == "native" else 288  # a shape no other test compiles
    q, k, v = qkv(1, 2, 2, 1, L, L, 16, 16)
    layouts = [fh.doc_lengths(L, [40, 100, 7, L - 147]), fh.doc_lengths(L, [L - 30, 30])]
    doc = layouts[0].clone()

    def document(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]
    traces, requests = K.TRACES[0], compiles()
    seen = []
    for ids in layouts:
        doc.copy_(ids)
        bm = create_block_mask(document, 1, 1, L, L, BLOCK_SIZE=32)
        seen.append(bm.kv_num_blocks.clone())
        check(f"doc {backend}", run(backend, q, k, v, block_mask=bm), q, k, v, None,
              lambda b, h, qi, ki, d=ids.clone(): d[qi] == d[ki])
    assert not torch.equal(seen[0], seen[1])  # the masks differ...
    assert K.TRACES[0] - traces == 1          # ...one trace
    assert compiles() - requests <= 1         # ...one compile request (0: already on disk)


def test_full_blocks_skip_mask_mod_and_absent_blocks_are_skipped():
    # Hand-made lists that contradict mask_mod (causal), so the result shows which blocks the
    # kernel visited and where it applied mask_mod: block (0, 0) is declared full (every query
    # sees key block 0 whole, even keys after it), row 3 omits block 2 (never attended though
    # causal allows it), the diagonal blocks are partial (causal applied).
    L, QB = 128, 32
    full_n = torch.tensor([[[1, 1, 1, 2]]], dtype=torch.int32)
    full_i = torch.tensor([[[[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]]]],
                          dtype=torch.int32)
    part_n = torch.tensor([[[0, 1, 1, 1]]], dtype=torch.int32)
    part_i = torch.tensor([[[[0, 0, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0]]]],
                          dtype=torch.int32)
    bm = BlockMask.from_kv_blocks(part_n, part_i, full_n, full_i, BLOCK_SIZE=QB,
                                  mask_mod=fh.causal, seq_lengths=(L, L))
    dense = torch.zeros(L, L, dtype=torch.bool)
    qi, ki = torch.arange(L).view(-1, 1), torch.arange(L).view(1, -1)
    causal = qi >= ki
    for r in range(4):
        rows = slice(r * QB, (r + 1) * QB)
        for j in full_i[0, 0, r, :full_n[0, 0, r]].tolist():
            dense[rows, j * QB:(j + 1) * QB] = True
        for j in part_i[0, 0, r, :part_n[0, 0, r]].tolist():
            dense[rows, j * QB:(j + 1) * QB] = causal[rows, j * QB:(j + 1) * QB]
    assert dense[0, 5] and not causal[0, 5]          # full: mask_mod not applied
    assert causal[100, 70] and not dense[100, 70]    # absent: skipped

    def visited(b, h, q_idx, kv_idx):
        return dense[q_idx, kv_idx]
    q, k, v = qkv(1, 2, 2, 1, L, L, 16, 16)
    check("hand-made lists", run("simulator", q, k, v, block_mask=bm), q, k, v, None, visited)


# Captured tensors and data-dependent reads (gathers), b/h-dependent mods, integer ops.
G = torch.Generator().manual_seed(1)
BIAS = torch.randn(4, 300, generator=G)
REL = torch.randn(300, generator=G)
TABLE = torch.randn(8, generator=G)
DOC2 = torch.stack([fh.doc_lengths(200, [30, 70, 5, 60, 35]), fh.doc_lengths(200, [100, 100])])
SLOPES = torch.exp2(-8.0 * (torch.arange(4) + 1) / 4)


def bias_hq(score, b, h, q_idx, kv_idx):
    return score + BIAS[h, q_idx] - BIAS[h, kv_idx]


def rel_negative_index(score, b, h, q_idx, kv_idx):
    return score + REL[kv_idx - q_idx]  # negative when kv < q: counts from the end


def nested_gather(score, b, h, q_idx, kv_idx):
    return score * TABLE[(q_idx - kv_idx).abs() // 16 % 8]


def per_batch_head(b, h, q_idx, kv_idx):
    return (DOC2[b, q_idx] == DOC2[b, kv_idx]) & ((q_idx >= kv_idx) | (h == 1))


def alibi(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def chunked(b, h, q_idx, kv_idx):
    return (q_idx // 64 == kv_idx // 64) | (kv_idx % 50 == 0) | ~(q_idx > -1)


def casts(score, b, h, q_idx, kv_idx):
    return score + torch.floor(score * 2) * 0.1 + (q_idx * 0.37).int() * 0.01 + b


def bias_slopes(score, b, h, q_idx, kv_idx):
    return score + BIAS[h, q_idx] - SLOPES[h] * (q_idx - kv_idx).abs()


def q_only(score, b, h, q_idx, kv_idx):
    return BIAS[h, q_idx] * 0.5 + b  # no score, no kv_idx: a column the kernel widens


def q_rows(b, h, q_idx, kv_idx):
    return (q_idx % 3 != 0) | (h == 1)  # a column condition; a third of the rows fully masked


def late_start(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx - 40  # query rows 0..39 see no key


# name: (score_mod, mask_mod, B, Hq, Hkv, Bkv, L, S, E, Ev, BLOCK_SIZE, dtype, native too)
CASES = {
    "bias[h, q_idx]": (bias_hq, fh.causal, 1, 4, 4, 1, 200, 200, 32, 32, 64,
                       torch.float32, True),
    "rel[kv - q], no mask, S % 128": (rel_negative_index, None, 1, 2, 2, 1, 130, 150, 32, 16,
                                      128, torch.float32, False),
    "table[... // 16 % 8], chunked": (nested_gather, chunked, 1, 2, 2, 1, 200, 200, 16, 16,
                                      32, torch.float32, False),
    "per batch/head doc mask, alibi, gqa, kv broadcast": (
        alibi, per_batch_head, 2, 4, 2, 1, 200, 200, 32, 32, 64, torch.float32, True),
    "odd lengths, tuple blocks": (fh.softcap(3.0), fh.causal, 1, 2, 2, 1, 77, 131, 24, 40,
                                  (64, 32), torch.float32, True),
    "256 blocks, casts, b": (casts, fh.causal, 2, 2, 2, 2, 300, 300, 32, 32, 256,
                             torch.float32, False),
    # Whole blocks (L and S multiples of 64): the backward kernels read doc ids and biases by
    # plain loads too (no padding rows or keys to read past the captured tensors).
    "whole blocks: doc mask, bias[h, q_idx], slopes[h]": (
        bias_slopes, per_batch_head, 2, 4, 2, 1, 128, 192, 32, 32, 64, torch.float32, True),
    "q_idx, b, h only (columns)": (q_only, q_rows, 2, 2, 2, 1, 128, 128, 32, 32, 64,
                                   torch.float32, True),  # whole key blocks: see below
    "fully masked rows": (None, late_start, 1, 2, 2, 1, 100, 100, 16, 16, 32,
                          torch.float32, False),
    # bf16: the Tensor engine takes bf16 operands; E = 32's scale is not a power of two (the
    # scores are scaled in fp32), E = 64's is (Q^T carries it).
    "bf16 alibi causal": (alibi, fh.causal, 1, 4, 4, 1, 160, 160, 32, 32, 64,
                          torch.bfloat16, True),
    "bf16 softcap, gqa, odd lengths": (fh.softcap(3.0), fh.causal, 1, 4, 2, 1, 150, 170, 64, 48,
                                       64, torch.bfloat16, True),
    # Head dims over 128: the scores (and the backward's dp) contract in chunks of 128.
    "head dims 192 / 160, softcap, gqa": (fh.softcap(3.0), fh.causal, 1, 2, 1, 1, 100, 130, 192,
                                          160, 64, torch.float32, True),
}
PARAMS = [(n, b) for n, c in CASES.items() for b in (["simulator", "native"] if c[-1]
                                                      else ["simulator"])]


@pytest.mark.parametrize("name,backend", PARAMS)
def test_kernel_case(name, backend):
    score_mod, mask_mod, B, Hq, Hkv, Bk, L, S, E, Ev, bs, dtype, _ = CASES[name]
    q, k, v = qkv(B, Hq, Hkv, Bk, L, S, E, Ev, dtype)
    bm = create_block_mask(mask_mod, B, Hq, L, S, BLOCK_SIZE=bs) if mask_mod else None
    check(f"{name} {backend}", run(backend, q, k, v, score_mod, bm), q, k, v, score_mod,
          mask_mod)


def test_new_captured_values_reuse_the_kernel():
    q, k, v = qkv(1, 4, 4, 1, 96, 96, 16, 16)
    bias = torch.randn(4, 96)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h, kv_idx]
    bm = create_block_mask(fh.causal, 1, 1, 96, 96, BLOCK_SIZE=32)
    traces = K.TRACES[0]
    for _ in range(2):
        bias.normal_()
        check("new bias", run("simulator", q, k, v, score_mod, bm), q, k, v,
              lambda s, b, h, qi, ki, t=bias.clone(): s + t[h, ki], fh.causal)
    assert K.TRACES[0] - traces == 1


def test_the_kernel_says_why_it_cannot_run():
    q = torch.randn(1, 2, 64, 16)

    def bitwise(score, b, h, q_idx, kv_idx):
        return score * ((q_idx & 3) + 1)
    with pytest.warns(RuntimeWarning, match="bitwise operation and on integers"):
        out = flex_attention(q, q, q, score_mod=bitwise, kernel_options={"BACKEND": "native"})
    torch.testing.assert_close(out, fh.dense_reference(q, q, q, bitwise)[0])
    big = torch.randn(20000)

    def huge(score, b, h, q_idx, kv_idx):
        return score + big[q_idx]
    with pytest.warns(RuntimeWarning, match="captured tensors of 20000 elements"):
        flex_attention(q, q, q, score_mod=huge, kernel_options={"BACKEND": "simulator"})
    with pytest.raises(ValueError, match="BACKEND='gpu'"):
        flex_attention(q, q, q, kernel_options={"BACKEND": "gpu"})


# (The columns case's scores ignore q and k, so its reference has no gradient for them.)
BACKWARD = [(n, "simulator") for n in CASES if "columns" not in n] + [
    ("odd lengths, tuple blocks", "native"), ("head dims 192 / 160, softcap, gqa", "native"),
    ("bf16 softcap, gqa, odd lengths", "native")]


@pytest.mark.parametrize("name,backend", BACKWARD)
def test_kernel_backward(name, backend):
    # dq, dk, dv (through out and lse) from the backward kernel, against torch autograd
    # of the dense reference.
    score_mod, mask_mod, B, Hq, Hkv, Bk, L, S, E, Ev, bs, dtype, _ = CASES[name]
    q, k, v = (t.requires_grad_() for t in qkv(B, Hq, Hkv, Bk, L, S, E, Ev, dtype))
    bm = create_block_mask(mask_mod, B, Hq, L, S, BLOCK_SIZE=bs) if mask_mod else None
    out, aux = run(backend, q, k, v, score_mod, bm)
    g = torch.Generator().manual_seed(3)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    dlse = torch.randn(aux.lse.shape, generator=g, dtype=torch.float64)

    def loss(o, lse):
        return (o.double() * dout).sum() + \
            (torch.where(torch.isfinite(lse), lse.double(), 0) * dlse).sum()
    ours = torch.autograd.grad(loss(out, aux.lse), (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    golden = torch.autograd.grad(loss(*fh.dense_reference(q64, k64, v64, score_mod, mask_mod)),
                                 (q64, k64, v64))
    qr, kr, vr = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(loss(*fh.dense_reference(qr, kr, vr, score_mod, mask_mod)),
                              (qr, kr, vr))
    for n, a, gold, r in zip("qkv", ours, golden, ref):
        assert a.dtype == dtype and a.shape == gold.shape
        fh.judge(f"{name} {backend} d{n}", a, gold, r)


@pytest.mark.parametrize("backend", ["native", "simulator"])
def test_backward_of_a_score_of_q_idx_b_h_alone(backend):
    # The columns case's scores do not depend on q and k: dq and dk are zero and dv is p^T dout,
    # p from a [rows, 1] column widened over the keys (kernel_bwd.py probs).
    # Whole key blocks (L = S = 128): no padding check widens the column on its own.
    score_mod, mask_mod, B, Hq, Hkv, Bk, L, S, E, Ev, bs, dtype, _ = CASES[
        "q_idx, b, h only (columns)"]
    q, k, v = (t.requires_grad_() for t in qkv(B, Hq, Hkv, Bk, L, S, E, Ev, dtype))
    bm = create_block_mask(mask_mod, B, Hq, L, S, BLOCK_SIZE=bs)
    out, _ = run(backend, q, k, v, score_mod, bm)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    dq, dk, dv = torch.autograd.grad((out * dout).sum(), (q, k, v))
    v64 = v.detach().double().requires_grad_()
    gold = fh.dense_reference(q.detach().double(), k.detach().double(), v64, score_mod,
                              mask_mod)[0]
    (gold_dv,) = torch.autograd.grad((gold * dout.double()).sum(), (v64,))
    vr = v.detach().clone().requires_grad_()
    ref = fh.dense_reference(q.detach(), k.detach(), vr, score_mod, mask_mod)[0]
    (ref_dv,) = torch.autograd.grad((ref * dout).sum(), (vr,))
    fh.judge(f"columns {backend} dv", dv, gold_dv, ref_dv)
    assert not dq.any() and not dk.any()


# Learnable captured tensors of score_mod, one per way the kernels reduce a read's gradient
# (kernel_bwd.grad_reads): indices of q_idx / b / h (summed along the keys), of kv_idx (summed
# along the queries), of both (whole tiles), through another
# captured tensor, with torch's negative-index wrap. (name: score_mod of the params, shapes of
# the params, dtype of q / k / v.) A bias added per query row alone would have a zero gradient
# (softmax ignores it), so the q-side ones scale the score.
L_, S_ = 100, 72
LEARNABLE = {
    "gate[h, q_idx] and slopes[h] (q side)":
        (lambda p: lambda s, b, h, q, k: s * torch.sigmoid(p[0][h, q]) + p[1][h] * (k - q),
         [(2, L_), (2,)], torch.float32),
    "bias[b, kv_idx] (kv side)":
        (lambda p: lambda s, b, h, q, k: s + p[0][b, k], [(2, S_)], torch.float32),
    "rel[q_idx - kv_idx] wrapping, full[h, q_idx, kv_idx] (tiles)":
        (lambda p: lambda s, b, h, q, k: s + p[0][q - k] + p[1][h, q, k],
         [(L_,), (2, L_, S_)], torch.float32),
    "tanh(score * scale[h]) + table[doc[q_idx], kv_idx], bf16":
        (lambda p: lambda s, b, h, q, k: torch.tanh(s * p[0][h]) + p[1][DOC[q], k],
         [(2,), (3, S_)], torch.bfloat16),
}
DOC = torch.arange(L_) * 3 // L_  # an integer captured tensor indexing a learnable one


@pytest.mark.parametrize("backend", ["native", "simulator"])
@pytest.mark.parametrize("name", LEARNABLE)
def test_kernel_backward_of_learnable_captured_tensors(name, backend):
    # The kernels' gradients of q, k, v and of the captured tensors (a causal block mask with
    # a partial last block, L != S, padding rows and keys), against torch autograd of the
    # dense reference in float64.
    make, shapes, dtype = LEARNABLE[name]
    g = torch.Generator().manual_seed(5)
    params = [torch.randn(sh, generator=g) for sh in shapes]
    q, k, v = (t.requires_grad_() for t in qkv(2, 2, 2, 2, L_, S_, 16, 16, dtype))
    bm = create_block_mask(fh.causal, 1, 1, L_, S_, BLOCK_SIZE=32)

    def grads(q, k, v, params, reference):
        mod = make(params)
        if reference:
            out = fh.dense_reference(q, k, v, mod, fh.causal)[0]
        else:
            out = run(backend, q, k, v, mod, bm)[0]
        dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(6))
        return torch.autograd.grad((out.double() * dout.double()).sum(), [q, k, v, *params])

    def leaves(ts, dtype=None):
        return [t.detach().to(dtype or t.dtype).clone().requires_grad_() for t in ts]
    ours = grads(q, k, v, leaves(params), False)
    golden = grads(*leaves((q, k, v), torch.float64), leaves(params, torch.float64), True)
    ref = grads(*leaves((q, k, v)), leaves(params), True)
    for n, a, gold, r in zip(["q", "k", "v"] + [f"param{i}" for i in range(len(params))],
                             ours, golden, ref):
        assert a.shape == gold.shape
        fh.judge(f"{name} {backend} d{n}", a, gold, r)


@pytest.mark.parametrize("backend", ["host", "native", "simulator"])
def test_gradients_at_a_mods_singular_points_are_finite(backend):
    # sqrt(|x|) of a where() whose taken branch is 0 on the diagonal (q == kv), and of s * w[kv]
    # on the zero padding keys (S = 72, blocks of 32): reverse mode gives the branch not taken
    # no gradient and padding keys none, so nothing may become 0 * inf = NaN (the kernels'
    # forward mode, emit._der; the host path's captured-tensor gradients, kept_scores).
    w = torch.rand(S_, generator=torch.Generator().manual_seed(8)) + 0.5

    def make(w):
        return lambda s, b, h, q, k: torch.sqrt(torch.abs(torch.where(q == k, (q - k) * 0.01,
                                                                      s * w[k])))
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 1, L_, S_, 16, 16))
    bm = create_block_mask(fh.causal, 1, 1, L_, S_, BLOCK_SIZE=32)
    wl = w.clone().requires_grad_()
    out = run(backend, q, k, v, make(wl), bm)[0]
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    ours = torch.autograd.grad((out * dout).sum(), (q, k, v, wl))
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v, w)]
    gold_out = fh.dense_reference(*leaves[:3], make(leaves[3]), fh.causal)[0]
    golden = torch.autograd.grad((gold_out * dout.double()).sum(), leaves)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, w)]
    ref_out = fh.dense_reference(*leaves[:3], make(leaves[3]), fh.causal)[0]
    ref = torch.autograd.grad((ref_out * dout).sum(), leaves)
    for n, a, gold, r in zip(("dq", "dk", "dv", "dw"), ours, golden, ref):
        assert not gold.isnan().any()
        fh.judge(f"singular {backend} {n}", a, gold, r)


def test_learnable_reads_the_kernels_cannot_run_take_the_host_path(monkeypatch):
    # A read indexed by an expression of the score, and a dense tile gradient past
    # DENSE_GRAD_BYTES: the kernel backend warns with the reason and the host path trains.
    from neuron.flex_attention import kernel_bwd
    q = torch.randn(1, 2, 64, 16, requires_grad=True)
    bias = torch.randn(2, 64, requires_grad=True)
    monkeypatch.setattr(kernel_bwd, "DENSE_GRAD_BYTES", 1000)
    for mod, why in ((lambda s, b, h, qi, ki: s + bias[h, (s > 0).long()], "of the score"),
                     (lambda s, b, h, qi, ki: s + bias[h, qi - ki], "DENSE_GRAD_BYTES")):
        with pytest.warns(RuntimeWarning, match=why):
            out = flex_attention(q, q, q, score_mod=mod, kernel_options={"BACKEND": "native"})
        (dbias,) = torch.autograd.grad(out.sum() + (out * out).sum(), (bias,))
        b64 = bias.detach().double().requires_grad_()
        mod64 = (lambda s, b, h, qi, ki: s + b64[h, (s > 0).long()]) if why == "of the score" \
            else (lambda s, b, h, qi, ki: s + b64[h, qi - ki])
        gold = fh.dense_reference(q.detach().double(), q.detach().double(), q.detach().double(),
                                  mod64)[0]
        (gold_db,) = torch.autograd.grad(gold.sum() + (gold * gold).sum(), (b64,))
        torch.testing.assert_close(dbias.double(), gold_db, rtol=1e-4, atol=1e-5)


def test_auto_backend_takes_the_kernel_for_large_calls_only(monkeypatch):
    # The default BACKEND ("auto", also PyTorch's own values) runs the native kernel for calls
    # of at least AUTO_KERNEL_SCORES scores from the second call of a signature on (a one-off
    # call compiles nothing), and the host path, silently, for smaller ones and for calls the
    # kernel cannot run. The threshold is lowered so the test stays small.
    from neuron.flex_attention import api
    ran = []
    forward = K.forward
    monkeypatch.setattr(K, "forward", lambda *a, **kw: ran.append(a[0].shape) or forward(*a, **kw))
    monkeypatch.delenv("NEURON_FLEX_BACKEND", raising=False)
    monkeypatch.setattr(api, "AUTO_KERNEL_SCORES", 2 * 64 * 64)
    q, k, v = qkv(1, 2, 2, 1, 64, 64, 16, 16)
    bm = create_block_mask(fh.causal, 1, 1, 64, 64, BLOCK_SIZE=32)
    monkeypatch.setattr(api, "_auto_seen", api.lru.Lru(api._AUTO_SEEN_MAX))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        first = flex_attention(q, k, v, block_mask=bm)
        assert ran == []  # a signature's first call: the host path
        for options in (None, {"BACKEND": "auto"}, {"BACKEND": "triton"}):
            out = flex_attention(q, k, v, block_mask=bm, kernel_options=options)
            check("auto", (out, flex_attention(q, k, v, block_mask=bm, return_aux=AuxRequest(
                lse=True))[1]), q, k, v, None, fh.causal)
        assert len(ran) == 6  # every call above, the lse ones included
        small = [t[:, :, :32] for t in (q, k, v)]  # below the threshold
        flex_attention(*small)
        host = flex_attention(q, k, v, block_mask=bm, kernel_options={"BACKEND": "host"})
        assert len(ran) == 6
        torch.testing.assert_close(out, host)
        torch.testing.assert_close(first, host)
        bias = torch.zeros(2, 64, requires_grad=True)  # the kernels cannot: no warning
        for _ in range(2):
            flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s + bias[h, (s > 0).long()],
                           block_mask=bm)
            flex_attention(q.double(), k.double(), v.double(), block_mask=bm)
        assert len(ran) == 6


def test_max_scores_from_the_kernel():
    q, k, v = qkv(1, 2, 2, 1, 100, 100, 16, 16)
    bm = create_block_mask(late_start, 1, 1, 100, 100, BLOCK_SIZE=32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out, aux = flex_attention(q, k, v, score_mod=fh.softcap(2.0), block_mask=bm,
                                  kernel_options={"BACKEND": "simulator"},
                                  return_aux=AuxRequest(lse=True, max_scores=True))
    s = fh.softcap(2.0)(q.double() @ k.double().transpose(-1, -2) / 4, None, None, None, None)
    keep = late_start(None, None, torch.arange(100).view(-1, 1), torch.arange(100).view(1, -1))
    want = torch.where(keep, s, -torch.inf).amax(-1)  # -inf on rows that see no key
    assert torch.equal(torch.isneginf(aux.max_scores), torch.isneginf(want))
    fin = torch.isfinite(want)
    torch.testing.assert_close(aux.max_scores[fin].double(), want[fin], rtol=1e-5, atol=1e-5)


def test_pytorchs_block_mask_through_the_kernels():
    import torch.nn.attention.flex_attention as tfa
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 1, 96, 96, 16, 16))
    bm = tfa.create_block_mask(fh.causal, 1, 2, 96, 96, device="cpu", BLOCK_SIZE=32)
    out, _ = run("simulator", q, k, v, fh.softcap(2.0), bm)
    dout = torch.randn(out.shape, dtype=torch.float64)
    ours = torch.autograd.grad((out.double() * dout).sum(), (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    gold_out, _ = fh.dense_reference(q64, k64, v64, fh.softcap(2.0), fh.causal)
    gold = torch.autograd.grad((gold_out * dout).sum(), (q64, k64, v64))
    torch.testing.assert_close(out.double(), gold_out, rtol=1e-4, atol=1e-4)
    for a, g in zip(ours, gold):
        torch.testing.assert_close(a.double(), g, rtol=1e-4, atol=1e-4)


def test_whole_transposes_and_per_tile_transposes_give_the_same_bits(monkeypatch):
    # K^T (forward) and Q^T / dout^T (backward) once per program when they fit KT_BYTES, or
    # per visited tile when they do not: the same values reach the same matmuls, so the same
    # bits, forward and backward; GQA, E > 128 (chunked), partial tails.
    def grads():
        q, k, v = (t.requires_grad_() for t in qkv(1, 4, 2, 1, 200, 300, 160, 64, seed=5))
        bm = create_block_mask(fh.causal, 1, 4, 200, 300)
        out, aux = run("simulator", q, k, v, block_mask=bm)
        dq, dk, dv = torch.autograd.grad((out * out).sum() + aux.lse.sum(), (q, k, v))
        return out.detach(), aux.lse.detach(), dq, dk, dv, (q, k, v)
    whole = grads()
    q, k, v = whole[5]
    check("whole transposes", (whole[0], type("A", (), {"lse": whole[1]})), q.detach(),
          k.detach(), v.detach(), None, fh.causal)
    traces = K.TRACES[0]
    monkeypatch.setattr(K, "KT_BYTES", 0)
    per_tile = grads()
    assert K.TRACES[0] == traces + 2  # kernels of their own: forward, backward
    for a, b in zip(whole[:5], per_tile[:5]):
        assert torch.equal(a, b)


def recorded_profiles(monkeypatch, key):
    # Every flex kernel launched from here on runs under neuron.native_profile; returns the
    # list its profiles go to. `key` (a new KT_BYTES) keeps the kernels out of the caches.
    import sys
    profiled_cls = sys.modules["neuron.kernel"]._Profiled
    profiles = []
    call = profiled_cls.__call__

    def recording(self, *args, **kwargs):
        out = call(self, *args, **kwargs)
        profiles.append(self.profile)
        return out
    monkeypatch.setattr(profiled_cls, "__call__", recording)
    real = K.get_kernel
    monkeypatch.setattr(K, "get_kernel", lambda *a: neuron.native_profile(real(*a)))
    monkeypatch.setattr(K, "KT_BYTES", key)
    return profiles


def test_a_profile_of_the_kernel_names_its_own_lines(monkeypatch):
    # The flex kernels live inside the package; their instructions are still attributed to
    # their own source lines (kernel.py), not to the first frame outside the package.
    profiles = recorded_profiles(monkeypatch, K.KT_BYTES + 1)
    q, k, v = qkv(1, 2, 2, 1, 64, 64, 16, 16)
    run("native", q, k, v, block_mask=create_block_mask(fh.causal, 1, 1, 64, 64))
    assert profiles and profiles[0].rows
    files = {r["line"].rsplit(":", 1)[0] for r in profiles[0].rows}
    assert files == {K.__file__}, files


def test_a_per_head_constant_keeps_p_at_v_one_fused_product(monkeypatch):
    # An ALiBi slope slopes[h] is one value per program. Read from a column of the caps tile
    # whose place depends on the program id, it kept the native backend from fusing the
    # transpose of p, its copy and p @ v into one product (docs/native.md "Transposed
    # matmuls"): the kernel with the slope must transpose no more than the kernel without a
    # score_mod, and still give ALiBi's values (per head, two programs a batch).
    profiles = recorded_profiles(monkeypatch, K.KT_BYTES + 2)
    slopes = torch.exp2(-8.0 * (torch.arange(4) + 1) / 4)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    q, k, v = qkv(2, 4, 4, 2, 256, 256, 32, 32)
    bm = create_block_mask(fh.causal, 2, 4, 256, 256)
    transposes = []
    for mod in (None, alibi):
        profiles.clear()
        got = run("native", q, k, v, mod, bm)
        check("alibi" if mod else "no score_mod", got, q, k, v, mod, fh.causal)
        transposes.append(sum(r["calls"] for r in profiles[-1].rows if r["op"] == "nc_transpose"))
    assert transposes[0] > 0 and transposes[1] == transposes[0], transposes
