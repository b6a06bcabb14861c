# The two execution modes agree, neuron.simulate returns a profile, and outputs are NumPy
# arrays that own their memory.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl


def gelu_rows(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.gelu(t) * 2.0 + nl.sum(t, axis=1))
    return out


X = np.random.default_rng(3).standard_normal((256, 128)).astype(np.float32)


def test_native_and_simulator_agree_bit_exactly():
    native = neuron.kernel(gelu_rows)(X)
    simulated = neuron.kernel(gelu_rows, mode="simulate")(X)
    np.testing.assert_array_equal(native, simulated)


def test_simulate_returns_outputs_and_profile():
    k = neuron.kernel(gelu_rows)
    sim = neuron.simulate(k)
    out = sim(X)
    np.testing.assert_array_equal(out, k(X))
    assert isinstance(sim.profile, str) and sim.profile
    assert k.last_report  # the native compile report


def test_device_print_reaches_python_stdout(capsys):
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.device_print("tile", t)
        nl.store(out, t)
        return out

    x = np.full((128, 2), 3.0, np.float32)
    for mode in ("native", "simulate"):
        neuron.kernel(k, mode=mode)(x)
        assert "tile" in capsys.readouterr().out


def test_outputs_keep_their_memory_after_the_kernel_is_gone():
    out = neuron.kernel(gelu_rows)(X)
    again = neuron.kernel(gelu_rows)(X)
    del again
    assert out.flags["C_CONTIGUOUS"] and out.shape == X.shape
    np.testing.assert_array_equal(out, neuron.kernel(gelu_rows, mode="simulate")(X))


def test_arguments_the_kernel_cannot_take_are_refused_clearly():
    import pytest
    k = neuron.kernel(gelu_rows)
    with pytest.raises(TypeError, match="float64"):
        k(X.astype(np.float64))
    with pytest.raises(AttributeError) as info:  # a list is a compile-time parameter
        k(X.tolist())
    assert "pass a NumPy array or torch tensor" in info.value.__notes__[0]
    # a non-contiguous NumPy array is copied to a contiguous one first
    wide = np.concatenate([X, X], axis=1)[:, ::2]
    assert not wide.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(k(wide), k(np.ascontiguousarray(wide)))


def test_compile_returns_the_pipeline_report_and_the_final_ir():
    compiled = neuron.kernel(gelu_rows).compile(X)
    names = [p.name for p in compiled.passes]
    for expected in ("verify", "legalize", "allocate"):
        assert expected in names
    assert all(p.ms >= 0 for p in compiled.passes)
    # after legalize the IR holds ISA instructions only (no nl.* helper ops)
    assert "nl." not in str(compiled.kernel)


def long_chain(x, r):
    """700 top-level instructions (a Python loop unrolls at trace time): lowered natively as a
    chain of functions (docs/native.md, "Long programs")."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in range(700):
        t = nl.add(t, float(i % 7) - 3.0) if i % 2 else nl.multiply(t, 1.0 + (i % 5) / 64)
    nl.store(out, t)
    if r is not None:  # a register in the same long program: it stays one function
        reg = nisa.register_alloc(0)
        nisa.register_load(reg, nl.load(r))
        o2 = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        nisa.register_store(o2, reg)
        return out, o2
    return out


@pytest.mark.parametrize("with_register", [False, True])
def test_long_programs_run_natively_like_the_simulator(with_register):
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    args = (x, np.array([[5]], np.int32) if with_register else None)
    kernel = neuron.kernel(long_chain)
    native = kernel(*args)
    simulated = neuron.simulate(kernel)(*args)
    want = x.copy()
    for i in range(700):  # the same operations in float32, in order
        want = want + np.float32(i % 7 - 3.0) if i % 2 else want * np.float32(1.0 + (i % 5) / 64)
    for a, b in zip(native if with_register else [native], simulated if with_register
                    else [simulated]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(native[0] if with_register else native, want)
    if with_register:
        assert native[1][0, 0] == 5
