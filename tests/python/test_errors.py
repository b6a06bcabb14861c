# User errors raised while tracing or compiling point at the user's kernel line with a caret,
# and the traceback shows the user's frames, not the toolkit's.
import traceback

import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

THIS = __file__



def out_of_range(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[0:256, :])
    nl.store(out, t)
    return out


def test_trace_error_shows_user_line_and_caret():
    k = neuron.kernel(out_of_range)
    with pytest.raises(neuron.NeuronError) as info:
        k(np.zeros((128, 64), np.float32))
    e = info.value
    assert e.rule == "index"
    assert e.line == line_of(out_of_range, "a[0:256")
    assert e.file.endswith("test_errors.py")
    assert "slice 0:256 is out of range" in e.message
    text = str(e)
    assert "t = nl.load(a[0:256, :])" in text
    caret_line = text.splitlines()[-1]
    assert caret_line.strip() == "^"
    # the caret sits under the subscript's start column
    assert e.column > 1 and caret_line.index("^") == text.splitlines()[-2].index("a[0:256")
    frames = traceback.extract_tb(e.__traceback__)
    user = [f for f in frames if f.filename == THIS]
    assert [f.name for f in user][-1] == "out_of_range"
    toolkit = [f for f in frames if "/neuron/" in f.filename]
    assert len(toolkit) <= 1  # only the re-raise in Kernel.__call__ remains


def bad_matmul(x, y):
    out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
    a, b = nl.load(x), nl.load(y)
    nisa.nc_matmul(acc, a, b)
    nl.store(out, nl.copy(acc))
    return out


def test_isa_error_has_rule_and_line():
    k = neuron.kernel(bad_matmul)
    with pytest.raises(neuron.NeuronError) as info:
        k(np.zeros((128, 128), np.float32), np.zeros((64, 128), np.float32))
    assert info.value.line == line_of(bad_matmul, "nisa.nc_matmul")
    assert info.value.rule


def branchy(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    if t > 0:
        nl.store(out, t)
    return out


def test_if_on_traced_value_says_what_to_use():
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(branchy)(np.zeros((128, 4), np.float32))
    assert info.value.rule == "control-flow"
    assert "nl.where" in info.value.message
    assert info.value.line == line_of(branchy, "if t > 0")


def test_loop_slice_with_non_constant_size_is_rejected():
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            nl.store(out[0:128, :], nl.load(x[i * 64:i * 128, :]))
        return out

    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(k)(np.zeros((256, 4), np.float32))
    assert info.value.rule == "index"
    assert info.value.line == line_of(k, "i * 64:i * 128")
    # the failed trace left no loop open: a new kernel traces fine
    ok = neuron.kernel(lambda x: x)  # noqa: E731 (returns its input: NKI's alias)
    a = np.ones((128, 4), np.float32)
    assert ok(a) is a


def test_unknown_subscript_and_wrong_argument_count():
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x["rows"]))
        return out

    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(k)(np.zeros((128, 4), np.float32))
    assert "unsupported subscript" in info.value.message
    with pytest.raises(TypeError):
        neuron.kernel(k)(np.zeros((128, 4), np.float32), np.zeros((128, 4), np.float32))


def test_dsl_call_outside_a_kernel():
    with pytest.raises(neuron.NeuronError) as info:
        nl.zeros((128, 4), nl.float32)
    assert info.value.rule == "no-trace"


def test_branching_on_a_loop_index_unrolls_that_loop_and_on_a_program_id_traces_per_program():
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.load(x[i * 128:(i + 1) * 128, :])
            if i == 0:  # NKI 0.3+: the index is a Python value (unroll.py)
                t = t * 2.0
            nl.store(out[i * 128:(i + 1) * 128, :], t)
        return out

    x = np.ones((256, 4), np.float32)
    np.testing.assert_array_equal(neuron.kernel(k)(x)[:, 0], [2.0] * 128 + [1.0] * 128)

    def by_pid(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        if pid == 1:  # a program id is a Python value too: each program traced on its own
            nl.store(out[128:256, :], nl.load(x[128:256, :]) + 1.0)
        else:
            nl.store(out[0:128, :], nl.load(x[0:128, :]))
        return out

    np.testing.assert_array_equal(neuron.kernel(by_pid)[2](x)[:, 0], [1.0] * 128 + [2.0] * 128)

    def by_register(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        r = nisa.register_alloc(1)
        if r == 0:  # a register's value exists only at run time
            nl.store(out, nl.load(x))
        return out

    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(by_register)(np.zeros((128, 4), np.float32))
    assert info.value.rule == "control-flow"
    assert info.value.line == line_of(by_register, "if r == 0")
    assert "nl.where" in info.value.message


def test_python_range_index_compares_normally():
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in range(2):
            t = nl.load(x[i * 128:(i + 1) * 128, :])
            if i == 0:
                t = t * 2.0
            nl.store(out[i * 128:(i + 1) * 128, :], t)
        return out

    x = np.ones((256, 4), np.float32)
    np.testing.assert_array_equal(neuron.kernel(k)(x), np.concatenate([2 * x[:128], x[128:]]))


def test_unsupported_operator_says_what_to_use():
    def k(x):
        out = nl.ndarray((128, 128), x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, t @ t)
        return out

    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(k)(np.zeros((128, 128), np.float32))
    assert info.value.rule == "unsupported-operator"
    assert "nl.matmul" in info.value.message
    assert info.value.line == line_of(k, "t @ t")


def test_a_python_exception_in_the_kernel_propagates_and_the_next_trace_is_clean():
    def k(x):
        for i in nl.affine_range(2):
            raise KeyError("from the kernel")

    with pytest.raises(KeyError, match="from the kernel"):
        neuron.kernel(k)(np.zeros((128, 4), np.float32))
    x = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(neuron.kernel(out_of_range_fixed)(x), x)


def out_of_range_fixed(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a[0:128, :]))
    return out
