# neuron.ops' scaled_dot_product_attention with an attn_mask (the masked kernels, forward and
# backward) and with key / query counts that change between calls (rounded up to buckets, the
# padding masked): against PyTorch's own function in float64 by test_ops' judge, and the number of
# kernels compiled.
import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import neuron  # noqa: E402
from neuron import ops  # noqa: E402
from neuron import torch as nt  # noqa: E402
from neuron.ops import _kernels, _shapes  # noqa: E402
from neuron.ops._reference import original  # noqa: E402
from test_ops import judge, rand  # noqa: E402


def sdpa_check(q, k, v, dtype=torch.float32, mask_dtype=None, **kw):
    """ops' sdpa under no_grad and strict mode (no fallback) against PyTorch's in float64; a
    float mask in the test dtype, or mask_dtype."""
    def run(fn, dt):
        m = kw.get("attn_mask")
        args = {**kw}
        if m is not None and m.dtype != torch.bool:
            args["attn_mask"] = m.to(mask_dtype if mask_dtype and dt != torch.float64 else dt)
        return fn(q.to(dt), k.to(dt), v.to(dt), **args)
    with torch.no_grad(), ops.strict():
        ours = run(ops.scaled_dot_product_attention, dtype)
    golden = run(original.scaled_dot_product_attention, torch.float64)
    peer = run(original.scaled_dot_product_attention, dtype)
    judge("output", ours, peer, golden)
    return ours


def compiles():
    c = neuron.cache.info()
    return c["memory_hits"] + c["disk_hits"] + c["misses"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masks_of_every_broadcast_form_match_pytorch(dtype):
    B, H, L, S, E = 2, 4, 70, 600, 32
    q, k, v = rand(B, H, L, E, seed=1), rand(B, H, S, E, seed=2), rand(B, H, S, E, seed=3)
    g = torch.Generator().manual_seed(4)
    dense = torch.rand(B, H, L, S, generator=g) > 0.3
    dense[..., 0] = True  # every row sees a key here (fully masked rows: their own test)
    sdpa_check(q, k, v, dtype, attn_mask=dense)                      # bool [B, H, L, S]
    sdpa_check(q, k, v, dtype, attn_mask=dense[0, 0])                # bool [L, S]
    sdpa_check(q, k, v, dtype, attn_mask=torch.randn(B, 1, L, S, generator=g))  # float
    sdpa_check(q, k, v, dtype, attn_mask=torch.randn(1, H, 1, S, generator=g))  # a key bias
    sdpa_check(q, k, v, dtype, attn_mask=torch.randn(L, 1, generator=g))        # a row bias
    sdpa_check(q, k, v, dtype, attn_mask=dense[0, 0], is_causal=False, scale=0.3)
    sdpa_check(q, k, v, dtype, torch.float32, attn_mask=torch.randn(L, S, generator=g))


def test_a_left_padded_batch_as_transformers_passes_it():
    # Hugging Face's sdpa mask: [B, 1, L, S] expanded (stride 0 along L) from a key padding
    # mask, finfo.min where hidden. Batch 1 hides its first 700 keys: its whole first key
    # block of 512, where the running max would be -inf and exp(-inf + inf) NaN.
    B, H, L, S, E = 2, 2, 3, 1100, 64
    q, k, v = rand(B, H, L, E, seed=5), rand(B, H, S, E, seed=6), rand(B, H, S, E, seed=7)
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1, :700] = False
    for hidden in (torch.finfo(torch.float32).min, float("-inf")):
        mask = torch.zeros(B, S).masked_fill(~keep, hidden)[:, None, None, :].expand(B, 1, L, S)
        sdpa_check(q, k, v, attn_mask=mask)
    sdpa_check(q, k, v, attn_mask=keep[:, None, None, :])


def test_rows_that_see_no_key_are_zero_as_in_pytorch():
    q, k, v = rand(1, 2, 5, 16, seed=8), rand(1, 2, 9, 16, seed=9), rand(1, 2, 9, 16, seed=10)
    mask = torch.ones(5, 9, dtype=torch.bool)
    mask[2] = False
    with torch.no_grad(), ops.strict():
        y = ops.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(y[:, :, 2], torch.zeros(1, 2, 16))
    torch.testing.assert_close(y, original.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pytorchs_causal_bias_masks(dtype):
    # torch.nn.attention.bias.causal_upper_left / causal_lower_right stand for masks they do
    # not store (PyTorch's own sdpa dispatches them): ours read them as tensors (wrong numbers,
    # or an error) and lost their rule that is_causal=True with one is a ValueError.
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left
    q, k, v = rand(1, 2, 23, 16, seed=40), rand(1, 2, 56, 16, seed=41), rand(1, 2, 56, 16, seed=42)
    for make in (causal_upper_left, causal_lower_right):
        with torch.no_grad(), ops.strict():
            ours = ops.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                                    attn_mask=make(23, 56))
            with ops.patch():  # the same through torch.nn.functional, and through
                # PyTorch's own function bound before the patch (it ran with the mask's
                # uninitialised storage)
                for sdpa in (torch.nn.functional.scaled_dot_product_attention,
                             original.scaled_dot_product_attention):
                    torch.testing.assert_close(
                        sdpa(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=make(23, 56)),
                        ours)
        assert type(ours) is torch.Tensor
        golden, peer = (original.scaled_dot_product_attention(
            q.to(dt), k.to(dt), v.to(dt), attn_mask=make(23, 56)._materialize("cpu"))
            for dt in (torch.float64, dtype))
        judge(make.__name__, ours, peer, golden)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
        ops.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(23, 56),
                                         is_causal=True)


def test_masks_with_gqa_causal_leading_dims_and_3d_inputs():
    q, k, v = rand(2, 3, 8, 40, 16, seed=11), rand(2, 3, 2, 40, 16, seed=12), \
        rand(2, 3, 2, 40, 24, seed=13)
    mask = rand(3, 1, 40, 40, seed=14)  # broadcast over the first leading dim and the heads
    sdpa_check(q, k, v, attn_mask=mask, enable_gqa=True)
    sdpa_check(q, k, v, attn_mask=mask > 0, is_causal=False, enable_gqa=True)
    q3, k3 = rand(4, 33, 16, seed=15), rand(4, 50, 16, seed=16)
    sdpa_check(q3, k3, k3, attn_mask=rand(33, 50, seed=17))


def test_a_mask_that_requires_grad_falls_back_with_the_reason():
    q = rand(1, 2, 5, 8, seed=18).requires_grad_()
    mask = rand(5, 5, seed=17).requires_grad_()
    n = nt.fallback_counts().get(("neuron.ops.scaled_dot_product_attention", "mask"), 0)
    with warnings.catch_warnings():  # (warned once per process: maybe by an earlier test)
        warnings.simplefilter("ignore")
        y = ops.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    assert nt.fallback_counts()[("neuron.ops.scaled_dot_product_attention", "mask")] == n + 1
    y.sum().backward()
    assert q.grad is not None and mask.grad is not None
    with pytest.raises(neuron.NeuronError, match="mask requires grad"), ops.strict():
        ops.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_what_pytorch_decides_goes_to_pytorch():
    # A mask with is_causal (PyTorch's math path raises, its flash path applies both), and a
    # float mask hiding whole rows with finfo.min when gradients are needed (the kernels'
    # backward would lose those rows' sums): PyTorch's own function, counted.
    q = rand(1, 2, 5, 8, seed=90).requires_grad_()
    key = ("neuron.ops.scaled_dot_product_attention", "mask")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = nt.fallback_counts().get(key, 0)
        ops.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool),
                                         is_causal=True)
        padded = torch.zeros(5, 5)
        padded[1] = torch.finfo(torch.float32).min
        y = ops.scaled_dot_product_attention(q, q, q, attn_mask=padded)
        assert nt.fallback_counts()[key] == n + 2
    qp = q.detach().clone().requires_grad_()
    want = original.scaled_dot_product_attention(qp, qp, qp, attn_mask=padded)
    dy = rand(1, 2, 5, 8, seed=91)
    (y * dy).sum().backward()
    (want * dy).sum().backward()
    torch.testing.assert_close(q.grad, qp.grad)
    with torch.no_grad(), ops.strict():  # without gradients the kernels run it
        torch.testing.assert_close(ops.scaled_dot_product_attention(q, q, q, attn_mask=padded),
                                   want.detach())
    for m in (torch.ones(5), torch.ones(5, dtype=torch.bool)):  # 1-D: PyTorch's verdict
        try:
            expect = original.scaled_dot_product_attention(q, q, q, attn_mask=m)
        except (RuntimeError, IndexError) as e:
            with pytest.raises(type(e)):
                ops.scaled_dot_product_attention(q, q, q, attn_mask=m)
        else:
            torch.testing.assert_close(ops.scaled_dot_product_attention(q, q, q, attn_mask=m),
                                       expect)


def test_a_mask_under_torch_compile():
    q = rand(1, 2, 6, 8, seed=19)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    f = torch.compile(lambda q, m: ops.scaled_dot_product_attention(q, q, q, attn_mask=m),
                      fullgraph=True, backend="aot_eager")
    with torch.no_grad(), ops.strict():
        y = f(q, mask)
    torch.testing.assert_close(y, original.scaled_dot_product_attention(q, q, q, attn_mask=mask))
    qg, qp = q.clone().requires_grad_(), q.clone().requires_grad_()
    with ops.strict():
        f(qg, mask).square().sum().backward()  # the masked kernels' backward in the graph
    original.scaled_dot_product_attention(qp, qp, qp, attn_mask=mask).square().sum().backward()
    torch.testing.assert_close(qg.grad, qp.grad, rtol=1e-4, atol=1e-5)


def test_masks_pytorch_rejects_get_pytorchs_error():
    q = rand(1, 2, 5, 8, seed=20)
    with pytest.raises(RuntimeError):
        with torch.no_grad():
            ops.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 5))


def test_a_decode_loop_compiles_a_kernel_per_bucket_not_per_step():
    # The KV cache grows by one key a step; the second key count makes the dim dynamic, and
    # the 39 steps from 601 to 639 keys then share one bucket (640: a multiple of 64).
    _shapes.reset()
    B, Hq, Hkv, E = 1, 4, 2, 32
    q = rand(B, Hq, 1, E, seed=21)
    kv = rand(B, Hkv, 640, E, seed=22), rand(B, Hkv, 640, E, seed=23)
    before = compiles()
    for n in range(600, 640):
        sdpa_check(q, kv[0][:, :, :n], kv[1][:, :, :n], enable_gqa=True)
    assert compiles() - before <= 2  # 600 exactly, then the bucket of 601..639


def test_a_bucketed_call_matches_the_exact_one():
    _shapes.reset()
    q, k = rand(1, 2, 3, 16, seed=30), rand(1, 2, 50, 16, seed=31)
    with torch.no_grad():
        exact = ops.scaled_dot_product_attention(q, k[:, :, :40], k[:, :, :40])
        ops.scaled_dot_product_attention(q, k, k)  # a second key count: dynamic from here
        padded = ops.scaled_dot_product_attention(q, k[:, :, :40], k[:, :, :40])
    torch.testing.assert_close(padded, exact, rtol=1e-6, atol=1e-6)


def grad_check(q, k, v, dtype=torch.float32, **kw):
    """Output and gradients of q, k, v of ops' sdpa (strict) against PyTorch's in float64."""
    gen = torch.Generator().manual_seed(7)
    runs = []
    for fn, dt in ((ops.scaled_dot_product_attention, dtype),
                   (original.scaled_dot_product_attention, dtype),
                   (original.scaled_dot_product_attention, torch.float64)):
        ts = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
        args = dict(kw)
        if args.get("attn_mask") is not None and args["attn_mask"].dtype != torch.bool:
            args["attn_mask"] = args["attn_mask"].to(dt)
        with ops.strict():
            y = fn(*ts, **args)
        if not runs:
            dy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
        y.backward(dy.to(dt))
        runs.append((y, *[t.grad for t in ts]))
    for what, ours, peer, golden in zip(("output", "dq", "dk", "dv"), *runs):
        judge(what, ours, peer, golden)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_through_masks(dtype):
    B, H, L, S, E = 2, 2, 150, 600, 32
    q, k, v = rand(B, H, L, E, seed=60), rand(B, H, S, E, seed=61), rand(B, H, S, E, seed=62)
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1, :530] = False  # batch 1's first key block all hidden
    grad_check(q, k, v, dtype, attn_mask=keep[:, None, None, :])
    grad_check(q, k, v, dtype, attn_mask=rand(B, H, L, S, seed=63))
    dense = rand(L, S, seed=64) > 0
    dense[3] = False  # a row that sees no key: zero output and gradient, as PyTorch's
    grad_check(q, k, v, dtype, attn_mask=dense, is_causal=False)
    grad_check(rand(B, 8, 3, E, seed=65), k, v, dtype, attn_mask=keep[:, None, None, :],
               enable_gqa=True)


def test_prompt_lengths_that_vary_share_buckets_in_inference_and_training():
    # A server's prompts (masked) and a fine-tuning loop's batches (causal, gradients through
    # the padding) of different lengths: the kernels compile per bucket.
    _shapes.reset()
    before = compiles()
    for n, seed in ((100, 70), (130, 71), (135, 72), (140, 73)):
        q, k = rand(1, 2, n, 16, seed=seed), rand(1, 2, n, 16, seed=seed + 10)
        sdpa_check(q, k, k, attn_mask=rand(n, n, seed=seed + 20))
        grad_check(q, k, k, is_causal=True)
    # 100 exactly (masked forward, causal forward and backward), then one bucket (144) for
    # 130, 135 and 140
    assert compiles() - before <= 6


def test_the_masked_kernel_is_bit_identical_on_the_simulator():
    q, k, v = rand(1, 2, 3, 16, seed=40), rand(1, 2, 20, 16, seed=41), rand(1, 2, 20, 16, seed=42)
    mask = rand(1, 2, 3, 20, seed=43)
    mask[..., 5:9] = float("-inf")
    with torch.no_grad(), ops.strict():
        native = ops.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        _kernels.mode = "simulate"
        try:
            simulated = ops.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        finally:
            _kernels.mode = "native"
    assert torch.equal(native, simulated)


def test_decode_steps_of_a_gqa_group_run_as_one_query_tile():
    # G x L <= 128 query rows of a kv head's group share one query tile: per-head and per-row
    # masks follow their rows, and gradients flow back through the regrouping.
    q, k, v = rand(2, 8, 3, 16, seed=50), rand(2, 2, 77, 16, seed=51), rand(2, 2, 77, 24, seed=52)
    sdpa_check(q, k, v, enable_gqa=True)
    sdpa_check(q, k, v, attn_mask=rand(2, 8, 3, 77, seed=53), enable_gqa=True)
    sdpa_check(q, k, v, attn_mask=rand(1, 1, 3, 77, seed=54) > -1, enable_gqa=True)
    sdpa_check(q, k, v, attn_mask=rand(8, 1, 77, seed=55), enable_gqa=True)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    peer = [t.clone().requires_grad_() for t in (q, k, v)]
    with ops.strict():
        ops.scaled_dot_product_attention(*ours, enable_gqa=True).square().sum().backward()
    original.scaled_dot_product_attention(*peer, enable_gqa=True).square().sum().backward()
    for a, b in zip(ours, peer):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_buckets_follow_the_documented_rule():
    # docs/kernels.md: a multiple of an eighth of the power of two at or below the size.
    assert [_shapes.bucket(n) for n in (1, 3, 16, 17, 31, 33, 130, 257, 601, 1025, 5000)] == \
        [1, 3, 16, 18, 32, 36, 144, 288, 640, 1152, 5120]
    for n in range(1, 40000, 7):
        b = _shapes.bucket(n)
        assert n <= b <= n * 1.125


def test_row_counts_that_vary_compile_per_bucket_with_the_same_bits():
    # A server's prompt lengths through the row-wise ops: the second row count makes the rows
    # dynamic; later counts share buckets, and the real rows keep the exact kernels' bits
    # (rows do not mix), gradients included.
    _shapes.reset()
    D, w, lw = 48, rand(48, seed=80), rand(40, 48, seed=81)
    cos, sin = rand(300, 24, seed=82), rand(300, 24, seed=83)
    fns = {"linear": lambda x: ops.linear(x, lw),
           "rms_norm": lambda x: ops.rms_norm(x, (D,), w),
           "layer_norm": lambda x: ops.layer_norm(x, (D,), w, w),
           "softmax": lambda x: ops.softmax(x, -1),
           "swiglu": lambda x: ops.swiglu(x),
           "rope": lambda x: ops.rope(x, cos[:x.shape[-2]], sin[:x.shape[-2]])}
    exact = {}
    for n in (150, 200, 203, 207):
        x = rand(1, n, D, seed=n).requires_grad_()
        for name, fn in fns.items():
            if n == 150:  # before the rows are dynamic: the exact kernels
                y = fn(x)
                (g,) = torch.autograd.grad(y.square().sum(), x)
                exact[name] = (y.detach(), g)
                continue
            before = compiles()
            with ops.strict():
                y = fn(x)
                (g,) = torch.autograd.grad(y.square().sum(), x)
            new = compiles() - before
            assert new <= (2 if n == 200 else 0), (name, n, new)  # 200..207: one bucket (208)
            # 150 rows again, now padded to 160: the exact call's bits
            x150 = rand(1, 150, D, seed=150).requires_grad_()
            y150 = fn(x150)
            (g150,) = torch.autograd.grad(y150.square().sum(), x150)
            assert torch.equal(y150.detach(), exact[name][0]), name
            assert torch.equal(g150, exact[name][1]), name


def test_padded_rows_of_a_norm_with_eps_0_do_not_poison_the_weight_gradient():
    # Rows appended by bucketing are copies of a real row: a zero row's variance would be 0,
    # 1 / sqrt(0 + eps=0) inf, and 0 * inf = NaN in the weight's gradient sum.
    _shapes.reset()
    w = rand(8, seed=92).requires_grad_()
    for n in (16, 17):
        x = rand(n, 8, seed=n).requires_grad_()
        for fn in (lambda: ops.rms_norm(x, (8,), w, eps=0.0),
                   lambda: ops.layer_norm(x, (8,), w, None, eps=0.0)):
            w.grad = None
            fn().square().sum().backward()
            assert torch.isfinite(w.grad).all() and torch.isfinite(x.grad).all()


def test_layer_norm_mixed_dtypes_as_pytorch():
    x = rand(3, 8, seed=93)
    for xd, wd in ((torch.bfloat16, torch.float16), (torch.float32, torch.bfloat16)):
        with pytest.raises(RuntimeError, match="mixed dtype"):
            original.layer_norm(x.to(xd), (8,), torch.ones(8, dtype=wd))
        with pytest.raises(RuntimeError, match="mixed dtype"):
            ops.layer_norm(x.to(xd), (8,), torch.ones(8, dtype=wd))
    with ops.strict():  # a float32 weight with a bf16 input is PyTorch's allowed mix
        ops.layer_norm(x.to(torch.bfloat16), (8,), torch.ones(8))
