# The bad-input catalogue, Python side (docs/reliability.md): what a user gets for each kind of
# bad argument to a kernel, checked against NumPy. A behaviour that is not right yet is a strict
# xfail naming the fix, so it flips when fixed.
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import neuron
import neuron.cache
import neuron.isa as nisa
import neuron.language as nl
from helpers import scale_inplace, softmax


def add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def special(a, b):
    """add, multiply, exp, maximum and a max reduction of the same inputs."""
    o_add = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    o_mul = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    o_exp = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    o_max = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    o_red = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(o_add, x + y)
    nl.store(o_mul, x * y)
    nl.store(o_exp, nl.exp(x))
    nl.store(o_max, nl.maximum(x, y))
    nl.store(o_red, nl.max(x, axis=1))
    return o_add, o_mul, o_exp, o_max, o_red


RNG = np.random.default_rng(0)
A = RNG.standard_normal((128, 64)).astype(np.float32)
B = RNG.standard_normal((128, 64)).astype(np.float32)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NEURON_CACHE", "on")
    return tmp_path / "cache"


# ---- non-contiguous inputs ---------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda x: np.asfortranarray(x),                      # column-major
    lambda x: np.ascontiguousarray(x.T).T,               # a transposed view
    lambda x: np.repeat(x, 2, axis=1)[:, ::2],           # a strided slice
], ids=["fortran", "transposed", "strided"])
def test_non_contiguous_numpy_is_copied_and_right(make):
    a, b = make(A), make(B)
    assert not a.flags.c_contiguous
    np.testing.assert_array_equal(neuron.kernel(add)(a, b), A + B)
    np.testing.assert_array_equal(neuron.simulate(neuron.kernel(add))(a, b), A + B)


def test_non_contiguous_torch_is_copied_and_right():
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(np.ascontiguousarray(A.T)).T
    b = torch.from_numpy(B)[:, :]
    assert not a.is_contiguous()
    out = neuron.kernel(add)(a, b)
    assert isinstance(out, torch.Tensor)
    np.testing.assert_array_equal(out.numpy(), A + B)


def test_writes_to_a_contiguous_input_land_in_the_callers_array():
    # Contiguous NumPy arrays and CPU tensors are passed zero-copy: a kernel that stores into
    # its input updates the caller's memory, as an in-place NKI kernel does on the device.
    a = A.copy()
    old = neuron.kernel(scale_inplace)(a)
    np.testing.assert_array_equal(old, A)
    np.testing.assert_array_equal(a, A * 2)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(A.copy())
    neuron.kernel(scale_inplace)(t)
    np.testing.assert_array_equal(t.numpy(), A * 2)


def test_writes_to_a_non_contiguous_input_are_copied_back():
    # The kernel runs on a contiguous copy; what it wrote is copied back into the caller's
    # array or tensor afterwards (runtime.host_arrays), so the write is not lost.
    a = np.asfortranarray(A)
    old = neuron.kernel(scale_inplace)(a)
    np.testing.assert_array_equal(old, A)
    np.testing.assert_array_equal(a, A * 2)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.ascontiguousarray(A.T)).T
    neuron.kernel(scale_inplace)(t)
    np.testing.assert_array_equal(t.numpy(), A * 2)


def test_writes_to_a_read_only_copied_input_are_refused():
    a = np.broadcast_to(A[:1], A.shape)  # read-only and non-contiguous
    with pytest.raises(ValueError, match=r"writes argument 0, a read-only array"):
        neuron.kernel(scale_inplace)(a)


def test_a_contiguous_read_only_input_is_never_written():
    a = A.copy()
    a.setflags(write=False)
    try:
        neuron.kernel(scale_inplace)(a)
    except (neuron.NeuronError, TypeError, ValueError):
        pass
    np.testing.assert_array_equal(a, A)


# ---- wrong device, dtype, kind, number ---------------------------------------------------------

def test_wrong_device_is_a_clear_type_error():
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(A).to("meta")
    with pytest.raises(TypeError, match=r"CPU tensors; got a tensor on meta"):
        neuron.kernel(add)(a, a)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, np.int64], ids=str)
def test_unsupported_numpy_dtype_names_the_supported_ones(dtype):
    a = A.astype(dtype)
    with pytest.raises(TypeError) as info:
        neuron.kernel(add)(a, a)
    msg = str(info.value)
    assert np.dtype(dtype).name in msg
    for name in ("float32", "bfloat16", "int8"):
        assert name in msg


def test_unsupported_torch_dtype_names_the_supported_ones():
    torch = pytest.importorskip("torch")
    for dt in (torch.float64, torch.complex64):
        t = torch.zeros(128, 4, dtype=dt)
        with pytest.raises(TypeError, match=r"unsupported dtype .*float32, bfloat16"):
            neuron.kernel(add)(t, t)


def test_wrong_number_of_arguments():
    with pytest.raises(TypeError, match=r"kernel add\(a, b\): missing a required argument: 'b'"):
        neuron.kernel(add)(A)
    with pytest.raises(TypeError, match=r"kernel add\(a, b\): too many positional arguments"):
        neuron.kernel(add)(A, B, A)


@pytest.mark.parametrize("bad", [[[1.0] * 64] * 128, 1.5, 3, None, "x", np.float32(1.0),
                                 {"a": 1}])
def test_a_non_array_where_the_kernel_wants_a_tensor_is_named_as_a_parameter(bad):
    # Anything but an array is a compile-time parameter; when the kernel then uses it as a
    # tensor, the error says so.
    with pytest.raises((TypeError, AttributeError, neuron.NeuronError)) as info:
        neuron.kernel(add)(bad, B)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "argument 'a'" in notes and "received it as a compile-time parameter" in notes


@pytest.mark.parametrize("bad,kind", [(object(), "object"), ({1, 2}, "set"),
                                      ({"a": object()}, "object")])
def test_arguments_that_are_neither_tensors_nor_parameters_are_type_errors(bad, kind):
    with pytest.raises(TypeError, match=rf"argument 'a(\['a'\])?' is a {kind}: kernel arguments "
                       "are NumPy arrays or torch tensors"):
        neuron.kernel(add)(bad, B)


def test_zero_dim_array_is_a_shape_error_naming_the_argument():
    x = np.array(1.0, np.float32)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(add)(x, x)
    assert info.value.rule == "shape"
    assert "kernel input 'a' has no dimensions" in info.value.message


# ---- NaN and Inf -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_nan_and_inf_propagate_like_numpy(mode):
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3e38, 1e-45], np.float32)
    a = np.resize(vals, (128, 9 * 7)).astype(np.float32)
    b = np.roll(a, 3, axis=1)
    k = neuron.kernel(special, mode=mode)
    o_add, o_mul, o_exp, o_max, o_red = k(a, b)
    with np.errstate(all="ignore"):
        # fp32 add and multiply, one rounding: NumPy's float32 results bit for bit (NaN stays
        # NaN; inf - inf and 0 * inf are NaN; overflow goes to inf).
        np.testing.assert_array_equal(o_add, a + b)
        np.testing.assert_array_equal(o_mul, a * b)
        # exp in double rounded once: exp(nan) = nan, exp(inf) = inf, exp(-inf) = 0.
        np.testing.assert_array_equal(o_exp, np.exp(a.astype(np.float64)).astype(np.float32))
    # maximum and the max reduction return the non-NaN operand (docs/numerics.md): np.fmax,
    # not np.maximum, which propagates NaN.
    np.testing.assert_array_equal(o_max, np.fmax(a, b))
    np.testing.assert_array_equal(o_red[:, 0], np.fmax.reduce(a, axis=1))
    assert np.isnan(o_add).any() and np.isinf(o_add).any()


# ---- empty and huge sizes ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(0, 64), (128, 0)])
def test_empty_arrays_are_a_shape_error_naming_the_argument(shape):
    # Kernels have no empty tensors, in Python as in C++ (the same check in the tracer): an
    # empty argument is refused before tracing the body, naming the argument.
    a = np.zeros(shape, np.float32)
    for k in (neuron.kernel(add), neuron.simulate(neuron.kernel(add))):
        with pytest.raises(neuron.NeuronError) as info:
            k(a, a)
        assert info.value.rule == "shape"
        assert f"kernel input 'a' has shape [{shape[0]}, {shape[1]}]" in info.value.message
        assert "empty tensors are not supported" in info.value.message


def test_empty_torch_tensor_is_a_shape_error():
    torch = pytest.importorskip("torch")
    t = torch.zeros(0, 8)
    with pytest.raises(neuron.NeuronError, match=r"tensor dimensions must be positive"):
        neuron.kernel(add)(t, t)


def test_huge_shapes_are_refused_before_any_allocation():
    k = neuron.kernel(add)
    # A byte size far beyond 2^48 (and beyond 2^64 for (2**40, 2**40) float32).
    for shape in [(2**40, 2**40), (2**62, 8), (2**24, 2**24)]:
        with pytest.raises(neuron.NeuronError) as info:
            k.compile((shape, np.float32), (shape, np.float32))
        assert info.value.rule == "tensor-size"
        assert str(shape[0]) in info.value.message
    # A real argument of 2^62 bytes (a zero-stride view: no memory behind it). A copy of it
    # would be a MemoryError; the size rule fires first.
    view = np.broadcast_to(np.zeros(1, np.float32), (2**30, 2**30))
    with pytest.raises(neuron.NeuronError) as info:
        k(view, view)
    assert info.value.rule == "tensor-size"
    # A dimension that does not fit in int64 is a TypeError from the argument conversion.
    with pytest.raises((TypeError, ValueError, OverflowError)):
        k.compile(((2**64, 1), np.float32), ((2**64, 1), np.float32))
    # Negative sizes in a (shape, dtype) spec.
    with pytest.raises(neuron.NeuronError, match=r"must be positive"):
        k.trace(((-1, 4), np.float32), ((-1, 4), np.float32))


def big_output(x):
    out = nl.ndarray((2**17, 2**30), nl.float16, buffer=nl.shared_hbm)  # 2^48 bytes
    nl.store(out[0:128, 0:16], nl.load(x))
    return out


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_output_beyond_host_memory_is_a_memory_error_naming_it(mode):
    # 2^48 bytes is the largest buffer the tensor-size rule allows, and more than any host can
    # allocate: a MemoryError that names the output and its size (it used to say only
    # "std::bad_alloc"; found by the Python API fuzzer).
    x = np.ones((128, 16), np.float16)
    with pytest.raises(MemoryError, match=r"out of host memory running kernel 'big_output'.*"
                                          r"'out0' float16\[131072, 1073741824\] "
                                          r"\(281474976710656 bytes\)"):
        neuron.kernel(big_output, mode=mode)(x)


# ---- the compile cache and the native code ---------------------------------------------------

CACHED_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import neuron, neuron.cache
    import neuron.language as nl

    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out

    k = neuron.kernel(add)
    a = np.arange(128 * 16, dtype=np.float32).reshape(128, 16)
    assert np.array_equal(k(a, a), a + a)
    print(k.last_report.splitlines()[0])
""")


def run_cached(env):
    r = subprocess.run([sys.executable, "-c", CACHED_RUN], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_cache_entry_is_recompiled(tmp_path, damage):
    d = tmp_path / "cache"
    env = dict(os.environ, NEURON_CACHE_DIR=str(d), NEURON_CACHE="on")
    out, _ = run_cached(env)
    assert ": cold" in out
    (entry,) = [p for p in d.iterdir() if p.suffix == ".neuronc"]
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[-1] ^= 0x40
    else:
        data = data[:len(data) // 2]
    entry.write_bytes(bytes(data))
    # The next process reports the entry once, removes it, compiles again and is right.
    out, err = run_cached(env)
    assert ": cold" in out
    assert err.count("neuron: warning: compile cache: ignoring") == 1
    assert str(entry) in err
    assert ("checksum" in err) if damage == "flip" else ("truncated" in err)
    # ... and the rewritten entry is good.
    out, err = run_cached(env)
    assert ": disk" in out and "warning" not in err


def test_host_instruction_kernels_give_the_same_bits(cache_dir, monkeypatch):
    # NEURON_NATIVE_KERNELS=host compiles without the bitcode kernels (no host-feature
    # specialization of element-wise code: the library's own compiled copies are called).
    x = RNG.standard_normal((256, 48)).astype(np.float32) * 4

    sim = neuron.simulate(neuron.kernel(softmax))[2](x)
    results = {}
    for kind in ("bitcode", "host"):
        monkeypatch.setenv("NEURON_NATIVE_KERNELS", kind)
        k = neuron.kernel(softmax)[2]
        results[kind] = k(x)
        assert f"kernels={kind}" in k.last_report
    assert results["host"].tobytes() == results["bitcode"].tobytes() == sim.tobytes()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(sim, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    monkeypatch.setenv("NEURON_NATIVE_KERNELS", "avx1")
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(softmax)[2](x)
    assert info.value.rule == "config"
    assert "bitcode, host" in info.value.message


# Wrong argument kinds the Python API fuzzer found raising Python's own errors (or
# AttributeError / NameError) inside the toolkit: each is now a TypeError naming the argument.
def _act_number(t):
    nisa.activation(dst=t, op=nl.exp, data=float("inf"), bias=1.0)


def _pred_string(t):
    nisa.tensor_copy_predicated(t, t, "", reverse_pred=True)


def _iota_int_pattern(t):
    nisa.iota(t, 5, offset=0)


def _select_fn_value(t):
    nisa.affine_select(t, [[-1, 16]], 1, t, nl.bypass)


def _max_axis_none(t):
    nl.max(t, axis=None)


def _reduce_float_axis(t):
    nisa.tensor_reduce(t[:, 0:1], nl.add, t, axis=1.5)


def _static_range_str(t):
    for _ in nl.static_range("2"):
        pass


@pytest.mark.parametrize("body,text", [
    (_act_number, "nisa.activation: data must be a tile"),
    (_pred_string, "predicate must be a tile"),
    (_iota_int_pattern, "list of [stride, count] pairs"),
    (_select_fn_value, "on_false_value must be a number"),
    (_max_axis_none, "nl.max: axis must be an int or a tuple of ints, got None"),
    (_static_range_str, "nl.static_range takes ints"),
    (_reduce_float_axis, "nisa.tensor_reduce: axis must be an int or a tuple of ints, got 1.5"),
], ids=lambda v: getattr(v, "__name__", "")[1:] if callable(v) else "")
def test_wrong_argument_kinds_are_type_errors_naming_the_argument(body, text):
    def k(x):
        t = nl.ndarray((16, 16), nl.float32)
        body(t)
        return t

    with pytest.raises(TypeError, match=text.replace("[", r"\[").replace("]", r"\]")):
        neuron.kernel(k).trace(np.zeros((16, 16), np.float32))


def test_bad_enum_and_step_arguments_name_the_argument():
    # An oob_mode that is not nisa.oob_mode (a string here) is a TypeError naming oob_mode in
    # every mode (it blamed the source view, or leaked a binding's signature dump); a
    # fori_loop step of 0 names fori_loop.
    def copy_with(x, oob):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype)
        nisa.dma_copy(t, x, oob_mode=oob)
        nl.store(out, t)
        return out

    def loop(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.fori_loop(0, 4, lambda i: None, step=0)
        return out

    x = np.ones((4, 8), np.float32)
    for mode in ("native", "simulate", "eager"):
        with pytest.raises(TypeError, match="oob_mode must be nisa.oob_mode.error or"):
            neuron.kernel(lambda a: copy_with(a, "skip"), mode=mode)(x)
        np.testing.assert_array_equal(
            neuron.kernel(lambda a: copy_with(a, nisa.oob_mode.skip), mode=mode)(x), x)
    with pytest.raises(neuron.NeuronError, match="fori_loop step must be a positive integer"):
        neuron.kernel(loop)(x)
