# The cached call path (kernel.py `_call_fast`): after a kernel's first call with some argument
# shapes, dtypes and scalar parameters, later such calls skip binding, keying and copies. These
# tests check that path gives what the general path gives, against NumPy, and that every call
# the fast path must not take (a new shape, a non-contiguous or read-only array, another
# parameter value, a changed NEURON_PARTITION_BLOCKS) still behaves as documented.
import numpy as np
import pytest

import neuron
import neuron.language as nl
from helpers import scale_inplace

RNG = np.random.default_rng(7)
A = RNG.standard_normal((16, 48)).astype(np.float32)


def affine(x, scale, shift):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x) * scale + shift)
    return out


def two_outputs(x, y):
    s = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    tx, ty = nl.load(x), nl.load(y)
    nl.store(s, tx + ty)
    nl.store(d, tx - ty)
    return s, d


def test_repeated_calls_take_the_cached_path_and_match_numpy():
    k = neuron.kernel(two_outputs)
    b = A[::-1].copy()
    for _ in range(3):
        s, d = k(A, b)
        np.testing.assert_array_equal(s, A + b)
        np.testing.assert_array_equal(d, A - b)
    assert len(k._fast) == 1  # one signature, served by the cached path after the first call


def test_a_launch_written_inline_keeps_the_cached_path():
    # kernel[grid](...) in a loop (FlexAttention's forward does it every call): the same launch
    # object each time, so its cached calls stay cached; another grid is another launch.
    k = neuron.kernel(two_outputs)
    b = A[::-1].copy()
    for _ in range(3):
        s, d = k[2](A, b)
        np.testing.assert_array_equal(s, A + b)
    assert k[2] is k[2] and k[2] is not k[3] and k[(2,)] is k[2]
    assert len(k[2]._fast) == 1
    with pytest.raises(ValueError, match="positive ints"):
        k[0]


def test_the_most_recent_grids_and_signatures_stay_cached():
    # More grids and signatures than a kernel keeps (64 each): the oldest make way, so a loop
    # over the latest stays on the cached path (before, the 65th and later were never kept).
    k = neuron.kernel(two_outputs)
    launches = [k[g] for g in range(1, 71)]
    assert k[70] is launches[-1] and k[70] is k[70] and k[1] is not launches[0]
    a = RNG.standard_normal((16, 70)).astype(np.float32)
    b = a[::-1].copy()
    for n in range(1, 71):  # 70 shapes: 70 signatures
        s, _ = k(a[:, :n].copy(), b[:, :n].copy())
        np.testing.assert_array_equal(s, a[:, :n] + b[:, :n])
    assert len(k._fast) == 64
    # The latest shape is served by the cached path; the first made way.
    assert k._fast.get(k._fast_key((a, b))) is not None
    assert k._fast.get(k._fast_key((a[:, :1].copy(), b[:, :1].copy()))) is None


def test_each_call_reads_its_own_arrays():
    k = neuron.kernel(two_outputs)
    for i in range(4):
        x = A + i
        s, _ = k(x, A)
        np.testing.assert_array_equal(s, x + A)


def test_writes_to_the_input_land_in_the_callers_array_on_every_call():
    k = neuron.kernel(scale_inplace)
    for _ in range(3):
        a = A.copy()
        old = k(a)
        np.testing.assert_array_equal(old, A)
        np.testing.assert_array_equal(a, A * 2)


def test_calls_the_cached_path_must_not_take():
    k = neuron.kernel(scale_inplace)
    k(A.copy())
    # Same shape and dtype, but Fortran order: the kernel runs on a copy, written back.
    f = np.asfortranarray(A)
    k(f)
    np.testing.assert_array_equal(f, A * 2)
    # Read-only: copied, so the kernel's write is refused rather than lost.
    r = A.copy()
    r.setflags(write=False)
    with pytest.raises(ValueError, match=r"writes argument 0, a read-only array"):
        k(r)
    # A new shape compiles a new kernel.
    small = A[:8].copy()
    np.testing.assert_array_equal(k(small), A[:8])
    np.testing.assert_array_equal(small, A[:8] * 2)


def test_scalar_parameters_key_the_cached_path_by_type_and_bits():
    k = neuron.kernel(affine)
    np.testing.assert_allclose(k(A, 2.0, 1.0), A * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(k(A, 2.0, 1.0), A * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(k(A, 3.0, 1.0), A * 3 + 1, rtol=1e-6)
    np.testing.assert_allclose(k(A, 3, 1), A * 3 + 1, rtol=1e-6)
    # -0.0 and 0.0 are equal in Python but trace apart (x * -0.0 + -0.0 is -0.0 for x > 0).
    pz, nz = k(A, 0.0, 0.0), k(A, -0.0, -0.0)
    assert not np.signbit(pz[A > 0]).any()
    assert np.signbit(nz[A > 0]).all()
    assert len(k._fast) == 5


def test_torch_tensors_come_back_as_tensors_on_every_call():
    torch = pytest.importorskip("torch")
    k = neuron.kernel(two_outputs)
    x, y = torch.from_numpy(A.copy()), torch.from_numpy(A[::-1].copy())
    for _ in range(3):
        s, d = k(x, y)
        assert isinstance(s, torch.Tensor) and isinstance(d, torch.Tensor)
        torch.testing.assert_close(s, x + y, rtol=0, atol=0)
    # The same shapes as NumPy arrays: NumPy out, from its own cached entry.
    s, _ = k(A, A)
    assert isinstance(s, np.ndarray)
    # bf16 tensors: through their bits (NumPy has no bfloat16 of its own).
    xb, yb = x.to(torch.bfloat16), y.to(torch.bfloat16)
    for _ in range(2):
        s, _ = k(xb, yb)
        assert s.dtype == torch.bfloat16
        torch.testing.assert_close(s, (xb.float() + yb.float()).to(torch.bfloat16), rtol=0,
                                   atol=0)


def test_torch_in_place_and_non_contiguous_tensors():
    torch = pytest.importorskip("torch")
    k = neuron.kernel(scale_inplace)
    for _ in range(2):
        t = torch.from_numpy(A.copy())
        k(t)
        np.testing.assert_array_equal(t.numpy(), A * 2)
    t = torch.from_numpy(np.ascontiguousarray(A.T)).T  # same shape, not contiguous
    k(t)
    np.testing.assert_array_equal(t.numpy(), A * 2)


def test_a_changed_partition_blocks_setting_reloads_the_kernel(monkeypatch):
    k = neuron.kernel(two_outputs)
    k(A, A)
    k(A, A)
    monkeypatch.setenv("NEURON_PARTITION_BLOCKS", "0")
    s, _ = k(A, A)
    np.testing.assert_array_equal(s, A + A)
    assert "partition_blocks=off" in k.last_report  # compiled for the new setting


def with_constant(x):
    # nl.shared_constant: a hidden input the cached path passes again (a fresh copy) each call.
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    c = nl.shared_constant(np.arange(16, dtype=np.float32).reshape(16, 1))
    nl.store(out, nl.add(nl.load(x), nl.load(c)))
    return out


def test_shared_constants_on_every_cached_call():
    k = neuron.kernel(with_constant)
    x = A[:16].copy()
    for _ in range(3):
        np.testing.assert_array_equal(k(x), x + np.arange(16, dtype=np.float32)[:, None])
    assert len(k._fast) == 1
