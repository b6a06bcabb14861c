# The Python package keeps no copy of a C++ rule: promotion, broadcasting, reduction shapes,
# trip counts and diagnostics come from the C++ core; one dtype table; no import cycle; every
# documented submodule usable after `import neuron`; Python syntax in every message.
import ast
import os
import subprocess
import sys

import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from neuron import _C, dtypes

PACKAGE = os.path.dirname(neuron.__file__)


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


def test_documented_submodules_are_usable_after_import_neuron():
    # A fresh interpreter: nothing imported by other tests. neuron.torch is checked below, in
    # this process (importing torch in a subprocess costs seconds).
    r = _run("import neuron\n"
             "print(sorted(neuron.cache.info()))\n"
             "print(neuron.registry.list())\n"
             "print(neuron.dtypes.to_dtype('bfloat16'), neuron.language.float32, neuron.isa)\n"
             "print(callable(neuron.compat.install), neuron.legacy.language.arange)\n"
             "import sys; print('torch' in sys.modules)\n")
    assert r.returncode == 0, r.stderr
    assert "build_id" in r.stdout and "'matmul'" in r.stdout
    assert r.stdout.strip().endswith("False")  # import neuron does not import torch
    assert callable(neuron.torch.custom_op)
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        neuron.nonexistent


def _imports(path, package):
    """The package modules a module imports at its top level (not inside functions)."""
    tree = ast.parse(open(path).read())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
            mod = ".".join(base + ([node.module] if node.module else []))
            if node.module:
                out.add(mod)
            for a in node.names:  # from . import x: x may be a module
                out.add(f"{mod}.{a.name}")
    return out


def test_no_import_cycle_between_the_packages_modules():
    modules = {}
    for root, _, files in os.walk(os.path.realpath(PACKAGE)):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), os.path.dirname(
                    os.path.realpath(PACKAGE)))[:-3].replace(os.sep, ".")
                name = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
                pkg = name if f == "__init__.py" else name.rsplit(".", 1)[0]
                modules[name] = (os.path.join(root, f), pkg)
    graph = {m: {d for d in _imports(p, pkg) if d in modules and d != m}
             for m, (p, pkg) in modules.items()}
    # A package importing its own submodules is not a cycle through them.
    for m in graph:
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".") and m != "neuron"}

    def cycle_from(m, stack):
        for d in graph[m]:
            if d in stack:
                return stack[stack.index(d):] + [d]
            c = cycle_from(d, stack + [d])
            if c:
                return c
        return None
    for m in graph:
        c = cycle_from(m, [m])
        assert c is None, " -> ".join(c)
    r = _run("import neuron.eager")  # the module that was part of a cycle, imported first
    assert r.returncode == 0, r.stderr


def test_one_dtype_table_derived_from_the_cpp_list():
    torch = pytest.importorskip("torch")
    assert set(dtypes.ALL) == set(_C.DType.__members__.values())
    host_as = {"float8_e5m2_x4": np.uint32, "float8_e4m3fn_x4": np.uint32,
               "float4_e2m1fn_x4": np.uint16, "tfloat32": np.float32}
    for d in dtypes.ALL:
        assert dtypes.to_dtype(d.name_) == d
        if d.name_ in host_as:  # packed MX data as raw bits (mx.md), tf32 as its fp32 storage
            assert dtypes.numpy_dtype(d) == host_as[d.name_]
            assert dtypes.torch_dtype(d, torch) == getattr(torch, np.dtype(host_as[d.name_]).name)
            continue
        assert dtypes.to_dtype(dtypes.numpy_dtype(d)) == d
        if d == nl.float8_e4m3:
            with pytest.raises(TypeError, match="no torch dtype"):
                dtypes.torch_dtype(d, torch)
        else:
            assert dtypes.to_dtype(dtypes.torch_dtype(d, torch)) == d
    assert nl.to_dtype is dtypes.to_dtype
    for d in dtypes.ALL:
        assert getattr(nl, d.name_ if d.name_ != "bool" else "bool_") == d


# ---- rules from C++ ------------------------------------------------------------------------

def test_legacy_promotion_is_the_current_apis_promotion():
    from neuron.legacy import ops
    all_dtypes = list(dtypes.ALL)
    for a in all_dtypes:
        for b in all_dtypes:
            @neuron.kernel
            def k(x, y):
                out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
                r = nl.add(nl.load(x), nl.load(y))
                nl.store(out, nl.copy(r, nl.float32))
                return out
            ir = str(k.trace(((128, 4), a), ((128, 4), b)))
            assert ops.promote(a, b) == _C.promote(a, b)
            assert f"{_C.promote(a, b).name_}[128, 4]" in ir


@pytest.mark.parametrize("shape,axis,keepdims", [
    ((128, 4, 8), 1, False), ((128, 4, 8), (1, 2), False), ((128, 4, 8), -1, True),
    ((128, 8), 1, False), ((128, 2, 3, 4), (2, 3), False), ((128, 2, 3, 4), 1, True)])
def test_legacy_reduction_shapes_are_the_current_apis(shape, axis, keepdims):
    from neuron.legacy import ops
    seen = []

    @neuron.kernel
    def k(x):
        seen.append(tuple(nl.sum(nl.load(x), axis=axis, keepdims=keepdims).shape))
        return nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    k.trace((shape, nl.float32))
    _, _, legacy = ops.reduced(list(shape), axis, keepdims)
    assert seen and tuple(legacy) == seen[0]
    if keepdims:
        assert seen[0] == np.sum(np.zeros(shape), axis=axis, keepdims=True).shape


def test_broadcast_and_trip_count_rules_are_the_cpp_ones():
    span = _C.Span()
    assert _C.broadcast_shape([[128, 1], [128, 5]], span) == [128, 5]
    assert _C.broadcast_shape([[4], [3, 1]], span, pad_ranks=True) == [3, 4]
    with pytest.raises(neuron.NeuronError, match="different ranks") as e:
        _C.broadcast_shape([[4], [3, 1]], span)
    assert e.value.rule == "broadcast"
    for args in ((0, 10, 3), (10, 0, -3), (5, 5, 1), (0, -1, 1)):
        assert _C.trip_count(*args, span) == len(range(*args))
    import neuron.legacy.language as lnl
    with pytest.raises(neuron.NeuronError, match="do not broadcast") as e:
        lnl.arange(4)[:, None] + lnl.arange(3)[None, :] + lnl.arange(5)[None, :]
    assert e.value.rule == "broadcast"


def test_python_raised_errors_are_rendered_by_cpp():
    span = _C.Span(__file__, 1, 3)
    e = neuron.errors._error("rule-x", "what went wrong", span)
    assert str(e) == _C.render_diagnostic("rule-x", "what went wrong", span)
    assert str(e).startswith(f"{__file__}:1:3: error: [rule-x] what went wrong\n")
    assert str(neuron.errors.call_error("r", "m")) == "<unknown location>: error: [r] m"


# ---- Python syntax in every message that reaches a Python user --------------------------------

def _error_of(fn, *args, mode="native"):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode=mode)(*args)
    return e.value


A = np.zeros((128, 8), np.float32)


def returns_a_tile(a):
    return nl.load(a)


def hbm_compute(a):  # a compute instruction writing HBM (verify's engine-memory rule)
    out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.tensor_copy(out, a)
    return out


def matmul_1d(a):
    return nl.matmul(nl.ndarray((4, 4, 4), nl.float32), nl.load(a))


def transpose_3d(a):
    return nl.transpose(nl.ndarray((4, 4, 4), nl.float32))


def two_scalars(a):
    return nl.add(1.0, 2.0)


def exp_as_alu(a):
    import neuron.isa as nisa
    t = nl.load(a)
    nisa.tensor_tensor(t, t, t, nl.exp)


@pytest.mark.parametrize("fn,expected", [
    (returns_a_tile, "nl.ndarray(..., buffer=nl.shared_hbm)"),
    (hbm_compute, "move it on chip with nl.load or nisa.dma_copy"),
    (matmul_1d, "nl.matmul takes 2-D tiles"),
    (transpose_3d, "nl.transpose takes a 2-D tile"),
    (two_scalars, "nl.add needs at least one tile operand"),
    (exp_as_alu, "nl.exp is an activation function")])
@pytest.mark.parametrize("mode", ["native", "eager"])
def test_cpp_rules_speak_python_to_python_users(fn, expected, mode):
    e = _error_of(fn, A, mode=mode)
    assert expected in e.message
    assert "::" not in str(e)


def test_outside_a_kernel_and_nested_kernels_speak_python():
    with pytest.raises(neuron.NeuronError, match=r"inside a @neuron.kernel function") as e:
        nl.ndarray((1,), nl.float32)
    assert "::" not in str(e.value)
    inner = neuron.kernel(returns_a_tile)

    def outer(a):
        inner.trace(((128, 8), nl.float32))
    assert "a @neuron.kernel called while tracing kernel 'outer'" in _error_of(outer, A).message



def test_a_kernel_called_inside_another_kernel_is_inlined():
    @neuron.kernel
    def doubled(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), 2.0))
        return out

    def calls_inner(a):
        return doubled(a)  # NKI: a jit kernel called while tracing another runs inline

    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    for mode in ("native", "simulate", "eager"):
        np.testing.assert_array_equal(neuron.kernel(calls_inner, mode=mode)(x), 2 * x)

    def calls_with_grid(a):
        return doubled[2](a)
    with pytest.raises(TypeError, match="call it without a launch grid"):
        neuron.kernel(calls_with_grid)(x)
