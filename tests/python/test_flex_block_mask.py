# create_block_mask / BlockMask of neuron.flex_attention against PyTorch's own, field by field,
# for the mask_mods of PyTorch's examples, plus FLEX.md's invariants.
import time

import pytest
import torch
import torch.nn.attention.flex_attention as tfa

from neuron.flex_attention import (BlockMask, and_masks, create_block_mask, create_mask,
                                   noop_mask, or_masks)

import flex_helpers as fh

FIELDS = BlockMask._TENSOR_ATTRS
DOC = fh.doc_lengths(1000, [100, 300, 50, 417, 133])
HEAD_W = torch.tensor([0, 40, 100])


def head_window(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= HEAD_W[h] + b * 17


CASES = {
    "causal": (fh.causal, 2, 1, 512, 512, 128),
    "causal_odd": (fh.causal, 1, 1, 1000, 777, 128),
    "window": (fh.sliding_window(200), 1, 2, 1000, 1000, 64),
    "prefix_lm": (fh.prefix_lm(300), 1, 1, 1000, 1000, (128, 64)),
    "document": (fh.document(DOC), 1, 1, 1000, 1000, 128),
    "head_batch": (head_window, 2, 3, 600, 700, (64, 128)),
    "and": (and_masks(fh.causal, fh.sliding_window(100)), 1, 1, 700, 700, 64),
    "or": (or_masks(fh.prefix_lm(64), head_window), 2, 3, 300, 257, 32),
    "noop": (noop_mask, 1, 1, 300, 500, 128),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fields_equal_pytorch(name):
    mod, B, H, Q, KV, bs = CASES[name]
    ours = create_block_mask(mod, B, H, Q, KV, BLOCK_SIZE=bs)
    ref = tfa.create_block_mask(mod, B, H, Q, KV, device="cpu", BLOCK_SIZE=bs)
    for f in FIELDS:
        a, b = getattr(ours, f), getattr(ref, f)
        assert a.dtype == torch.int32 and torch.equal(a, b), f
    assert ours.BLOCK_SIZE == ref.BLOCK_SIZE and ours.seq_lengths == ref.seq_lengths
    assert ours.shape == ref.shape and ours.numel() == ref.numel()
    assert ours.sparsity() == pytest.approx(ref.sparsity())
    assert torch.equal(ours.to_dense(), ref.to_dense())
    assert ours.to_string() == ref.to_string()
    assert str(ours) == str(ref)


def test_flex_invariants():
    bm = create_block_mask(fh.causal, 4, 2, 2048, 2048)
    assert bm.sparsity() == pytest.approx(46.875)
    bm = create_block_mask(and_masks(fh.causal, lambda b, h, q, kv: q - kv <= 512),
                           1, 1, 2048, 2048)
    assert int(bm.kv_num_blocks.sum()) == 28


def test_methods_match_pytorch():
    mod = head_window
    ours = create_block_mask(mod, 2, 3, 512, 512, BLOCK_SIZE=64)
    ref = tfa.create_block_mask(mod, 2, 3, 512, 512, device="cpu", BLOCK_SIZE=64)
    for index in [0, (1, 2), (slice(0, 2), 1), (0, slice(None), torch.tensor([1, 3]))]:
        a, b = ours[index], ref[index]
        for f in FIELDS:
            assert torch.equal(getattr(a, f), getattr(b, f)), (index, f)
    a, b = ours._adjust(300, 200), ref._adjust(300, 200)
    for f in FIELDS:
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    t = ours.as_tuple()
    assert t[:2] == (512, 512) and t[-3:-1] == (64, 64) and t[-1] is mod
    moved = ours.to("cpu")
    assert all(torch.equal(getattr(moved, f), getattr(ours, f)) for f in FIELDS)
    rebuilt = BlockMask.from_kv_blocks(ours.kv_num_blocks, ours.kv_indices,
                                       ours.full_kv_num_blocks, ours.full_kv_indices,
                                       BLOCK_SIZE=64, mask_mod=mod)
    assert all(torch.equal(getattr(rebuilt, f), getattr(ours, f)) for f in FIELDS)
    assert "kv_num_blocks=torch.Size([2, 3, 8])" in repr(ours)


@pytest.mark.parametrize("kind", ["mask", "score"])
def test_create_mask_matches_pytorch(kind):
    if kind == "mask":
        mod = fh.document(DOC[:300])
    else:
        def mod(score, b, h, q, kv):
            return torch.where(q >= kv, score, -float("inf"))
    ours = create_mask(mod, 2, 2, 300, 300)
    ref = tfa.create_mask(mod, 2, 2, 300, 300, device="cpu")
    assert torch.equal(ours, ref)


def test_long_causal_mask_is_built_per_block():
    # 32768^2 elements would be a 1 GiB bool mask; evaluated per block it is quick.
    t0 = time.perf_counter()
    bm = create_block_mask(fh.causal, 1, 1, 32768, 32768)
    took = time.perf_counter() - t0
    n = 32768 // 128
    assert int(bm.full_kv_num_blocks.sum()) == n * (n - 1) // 2
    assert int(bm.kv_num_blocks.sum()) == n
    assert took < 30, took  # generous: the shared CI machine; the bench/ figure is the claim


def test_score_mod_is_refused():
    with pytest.raises(AssertionError, match="requires a mask_mod"):
        create_block_mask(fh.rel_bias, 1, 1, 64, 64)
