# Registered C++ kernels (NEURON_KERNEL) listed and called from Python by name, with typed
# parameters checked by their declared kind.
import enum
import inspect

import numpy as np
import pytest

import neuron
import neuron.language as nl

X = np.linspace(-3, 3, 256 * 64, dtype=np.float32).reshape(256, 64)


def test_the_examples_kernels_are_registered_with_their_signatures():
    names = neuron.registry.list()
    for n in ("vector_add", "matmul_naive", "row_softmax", "scaled_activation"):
        assert n in names
    info = neuron.registry.info("scaled_activation")
    assert info.inputs == ["x"]
    kinds = {p.name: (p.kind.name, p.default, p.required) for p in info.params}
    assert kinds == {"scale": ("float", 1.0, False), "act": ("choice", "relu", False),
                     "negate": ("bool", False, False), "out_dtype": ("dtype", nl.float32, False),
                     "rows": ("int", 128, False)}
    assert info.params[1].choices == ["none", "relu", "exp", "tanh"]
    assert info.span.file.endswith("scaled_activation.hpp")
    k = neuron.registry.get("scaled_activation")
    assert str(inspect.signature(k)) == ("(x, *, scale=1.0, act='relu', negate=False, "
                                         "out_dtype=<DType.float32: 0>, rows=128)")
    assert "rows per tile" in k.__doc__
    with pytest.raises(ValueError, match="no kernel named 'nope' is registered .*matmul"):
        neuron.registry.get("nope")


def test_a_registered_kernel_runs_with_its_defaults_and_given_parameters():
    k = neuron.registry.get("scaled_activation")
    np.testing.assert_allclose(k(X), np.maximum(X, 0), rtol=1e-6)
    x64 = X.astype(np.float64)
    np.testing.assert_allclose(k(X, scale=0.5, act="tanh", negate=True, rows=64),
                               np.tanh(-0.5 * x64), rtol=1e-5, atol=1e-6)
    out = k(X, act="exp", scale=2, out_dtype="bfloat16")  # an int for a float; a dtype name
    assert out.dtype.name == "bfloat16"
    np.testing.assert_allclose(out.astype(np.float64), np.exp(2 * x64), rtol=1e-2)
    sim = neuron.registry.get("scaled_activation", mode="simulate")
    np.testing.assert_array_equal(sim(X, act="tanh"), k(X, act="tanh"))


def test_grids_and_the_ir_of_registered_kernels():
    add = neuron.registry.get("vector_add")
    b = np.ones_like(X)
    np.testing.assert_array_equal(add[2](X, b), X + 1)
    ir = neuron.registry.get("scaled_activation").trace(((256, 64), nl.float32), rows=32)
    assert "affine_range(8)" in str(ir)
    assert neuron.registry.get("vector_add") is neuron.registry.get("vector_add")


class Act(enum.Enum):
    tanh = 1


def test_parameter_values_are_checked_by_kind():
    k = neuron.registry.get("scaled_activation")
    with pytest.raises(TypeError, match="parameter 'rows' of kernel 'scaled_activation' is an "
                       "int; got True"):
        k(X, rows=True)
    with pytest.raises(TypeError, match="parameter 'scale' .* is a float; got 'big'"):
        k(X, scale="big")
    with pytest.raises(TypeError, match=r"parameter 'act' .* is a choice \('none', 'relu', 'exp', "
                       r"'tanh'\); got 3"):
        k(X, act=3)
    with pytest.raises(neuron.NeuronError, match="is one of 'none', 'relu', 'exp', 'tanh'; got "
                       "'gelu'") as e:
        k(X, act="gelu")
    assert e.value.rule == "kernel-param"
    with pytest.raises(TypeError, match="unexpected keyword argument 'rwos'"):
        k(X, rwos=64)
    with pytest.raises(TypeError, match="too many positional arguments"):
        k(X, 0.5)  # parameters of a C++ kernel are keyword-only
    with pytest.raises(TypeError, match="argument 'x' is a tensor; pass a NumPy array"):
        k(3.0)
    # An enum member stands for its name; NumPy scalars for Python numbers.
    np.testing.assert_array_equal(k(X, act=Act.tanh, rows=np.int64(64), scale=np.float32(1)),
                                  k(X, act="tanh", rows=64))


def test_a_rule_of_the_cpp_kernel_points_at_its_cpp_source():
    k = neuron.registry.get("scaled_activation")
    with pytest.raises(neuron.NeuronError, match="rows = 96 must divide the 256 rows") as e:
        k(X, rows=96)
    assert e.value.rule == "kernel-param"
    assert e.value.file.endswith("scaled_activation.hpp")


def test_registered_kernels_do_not_run_eagerly():
    k = neuron.registry.get("softmax", mode="eager")
    with pytest.raises(TypeError, match=r"C\+\+ kernel: it cannot run eagerly"):
        k(X)
