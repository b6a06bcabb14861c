# What Python keeps per kernel signature is bounded (neuron/lru.py; issue 13, bounded JIT
# memory): a process that meets new shapes without end keeps at most NEURON_CACHE_MEMORY_ENTRIES
# traced and compiled kernels per cache, and a signature evicted comes back traced anew with the
# same results.
import numpy as np
import pytest
import torch

import neuron
import neuron.isa as nisa
import neuron.language as nl
from neuron import lru
from neuron.flex_attention import flex_attention
from neuron.flex_attention import kernel as flex_kernel
from neuron.ops import _kernels
from neuron.ops import functional as F


def test_lru_keeps_the_most_recently_used():
    d = lru.Lru(3)
    for k in "abc":
        d[k] = k.upper()
    assert d.get("a") == "A"  # now the most recent
    d["d"] = "D"  # evicts b, the least recent
    assert "b" not in d and list(d) == ["c", "a", "d"]
    assert d.setdefault("c", "other") == "C" and d.setdefault("e", "E") == "E"
    assert len(d) == 3 and list(d) == ["d", "c", "e"]
    with pytest.raises(KeyError):
        d["a"]
    none = lru.Lru(0)  # NEURON_CACHE_MEMORY_ENTRIES=0: nothing kept
    assert none.setdefault("x", 1) == 1 and len(none) == 0


def test_bound_follows_the_environment(monkeypatch):
    d = lru.Lru()
    monkeypatch.setenv("NEURON_CACHE_MEMORY_ENTRIES", "2")
    for i in range(5):
        d[i] = i
    assert list(d) == [3, 4]
    monkeypatch.setenv("NEURON_CACHE_MEMORY_ENTRIES", "lots")
    with pytest.raises(neuron.NeuronError, match="NEURON_CACHE_MEMORY_ENTRIES='lots'"):
        d[5] = 5


@neuron.kernel
def add_one(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_kernel_keeps_a_bounded_number_of_signatures(monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_MEMORY_ENTRIES", "4")
    k = neuron.kernel(add_one.fn)
    for n in range(1, 11):  # ten shapes, ten signatures
        x = np.arange(2 * n, dtype=np.float32).reshape(2, n)
        np.testing.assert_array_equal(k(x), x + 1)
    assert len(k._cache) == 4 and len(k._by_ir) == 4
    x = np.full((2, 1), 5.0, np.float32)  # the first signature, evicted: traced again
    np.testing.assert_array_equal(k(x), x + 1)
    assert len(k._cache) == 4


def test_the_torch_operators_keep_a_bounded_number_of_kernels(monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_MEMORY_ENTRIES", "3")
    xs = [torch.randn(2, 5 + i) for i in range(6)]
    for x in xs + xs[:2]:
        torch.testing.assert_close(F.softmax(x, -1), torch.softmax(x, -1))
    assert len(_kernels._compiled) <= 3


def test_flex_attention_keeps_a_bounded_number_of_kernels(monkeypatch):
    # A search over score_mods: each mod graph is a kernel of its own (simulator backend: no
    # LLVM compile), against PyTorch's attention with the same scores.
    monkeypatch.setenv("NEURON_CACHE_MEMORY_ENTRIES", "2")
    built = []
    build = flex_kernel._build
    monkeypatch.setattr(flex_kernel, "_build", lambda *a: built.append(a) or build(*a))
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 16, 8) for _ in range(3))
    scores = q @ k.transpose(-1, -2) / 8 ** 0.5
    for c in (1.0, -2.0, 3.0, 1.0):  # a constant per mod: a new graph each, the last an old one
        out = flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki, c=c: s + c * (qi - ki),
                             kernel_options={"BACKEND": "simulator"})
        bias = c * (torch.arange(16)[:, None] - torch.arange(16)[None, :])
        want = torch.softmax(scores + bias, -1) @ v
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        assert len(flex_kernel._KERNELS) <= 2
    assert len(built) == 4  # the first mod's kernel was evicted by the third's: built again
