# Eager mode (neuron.kernel(mode="eager"), NEURON_EAGER=1): each operation runs at once as a
# one-op kernel on the simulator. Every kernel here runs eagerly, natively and on the
# simulator, and the three must agree bit for bit; a NumPy reference checks the values.
import io
import pdb
import traceback

import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

RNG = np.random.default_rng(11)
f64 = np.float64


def three_ways(fn, *args, grid=None):
    """Runs fn eagerly, natively and on the simulator; asserts bit-identical outputs and
    returns the eager ones."""
    results = []
    for mode in ("eager", "native", "simulate"):
        k = neuron.kernel(fn, mode=mode)
        k = k if grid is None else k[grid]
        out = k(*[a.copy() for a in args])
        results.append(out if isinstance(out, tuple) else (out,))
    eager, native, simulated = results
    for e, n, s in zip(eager, native, simulated):
        assert e.dtype == n.dtype and e.shape == n.shape
        np.testing.assert_array_equal(e.view(np.uint8), n.view(np.uint8))
        np.testing.assert_array_equal(e.view(np.uint8), s.view(np.uint8))
    return eager if len(eager) > 1 else eager[0]



# ---- nl: allocation, data movement, element-wise, reductions, matrix ops ---------------------

def nl_everything(x, y, c):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
    mm = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
    bf = nl.ndarray((128, 64), nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(y[:, 0:64])
    col = nl.load(c)
    z = nl.zeros((128, 64), nl.float32)
    o = nl.ones((128, 64), nl.float32)
    f = nl.full((128, 64), 0.3, nl.float32)
    e = nl.empty_like(t)
    e[:, :] = t  # a copy on chip
    zl = nl.zeros_like(t)
    a = nl.exp(t) + nl.tanh(u) * 2.0 - nl.sigmoid(t) / (o + 1.0)
    a = a + nl.sqrt(nl.abs(t)) + nl.rsqrt(nl.abs(u) + 1.0) + nl.gelu(t) + nl.silu(u)
    a = a + nl.log(nl.abs(t) + 1.0) + nl.relu(u) + nl.sin(t) + nl.cos(u) + nl.erf(t)
    a = a + nl.softplus(u) + nl.sign(t) + nl.square(u) + nl.negative(t) + nl.reciprocal(o + f)
    a = a + nl.gelu_apprx_tanh(u) + nl.maximum(t, u) + nl.minimum(t, 0.5) + nl.power(o + f, 2.0)
    a = a + nl.where(nl.greater(t, u), t, u) + (t < u) + (t >= 0.0) + nl.equal(t, u) + zl + z
    a = a + nl.broadcast_to(col, (128, 64)) + nl.multiply(t, col) + -t + abs(u) + 1.0 / (o + f)
    a = a + (2.0 - e) * (3.0 + t) + 2.0 ** f
    nl.store(out, a)
    s = nl.sum(t, axis=1, keepdims=True)
    m = nl.max(u, axis=1, keepdims=True)
    n = nl.min(u, axis=1, keepdims=True)
    me = nl.mean(t, axis=1, keepdims=True)
    r = nl.ndarray((128, 4), nl.float32)
    r[:, 0:1] = s
    r[:, 1:2] = m
    r[:, 2:3] = n
    r[:, 3:4] = me
    nl.store(red, r)
    p = nl.matmul(t[:, 0:64], u, transpose_x=True)   # [64, 64] in PSUM
    q = nl.matmul(nl.copy(nl.transpose(t[0:64, :])), u[0:64, :])
    nl.store(mm, nl.copy(p) + nl.copy(q, dtype=nl.float32))
    nl.store(bf, nl.copy(a, dtype=nl.bfloat16))
    return out, red, mm, bf


def test_nl_functions_agree_with_compiled_and_simulated():
    x = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
    y = RNG.uniform(-2, 2, (128, 96)).astype(np.float32)
    c = RNG.uniform(-1, 1, (128, 1)).astype(np.float32)
    out, red, mm, bf = three_ways(nl_everything, x, y, c)
    u = y[:, :64].astype(f64)
    np.testing.assert_allclose(red[:, 0], x.astype(f64).sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(red[:, 1], u.max(1))
    want = x[:, :64].astype(f64).T @ u + x[:64, :64].astype(f64).T @ u[:64]
    np.testing.assert_allclose(mm, want, rtol=1e-4, atol=1e-3)
    assert bf.dtype == ml_dtypes.bfloat16 and np.isfinite(out).all()


def integer_ops(x, y):
    out = nl.ndarray((128, 16), nl.int32, buffer=nl.shared_hbm)
    half = nl.ndarray((128, 16), nl.float16, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    c = nl.bitwise_and(a, b) + nl.left_shift(a, 2) - nl.right_shift(b, 1) + nl.bitwise_or(a, 3)
    c = nl.bitwise_xor(c, a) + nl.maximum(a, b) + nl.not_equal(a, b) + nl.less_equal(a, b)
    m = nl.logical_or(nl.logical_and(nl.greater(a, 3), nl.less(b, 100)), nl.equal(a, 7))
    m = nl.logical_xor(m, nl.greater_equal(b, 250))
    nl.store(half, nl.where(m, nl.copy(a, dtype=nl.float16), nl.copy(b, dtype=nl.float16)))
    nl.store(out, c)
    return out, half


def test_integer_and_logical_functions_agree():
    x = RNG.integers(-50, 200, (128, 16)).astype(np.int32)
    y = RNG.integers(0, 300, (128, 16)).astype(np.int32)
    out, half = three_ways(integer_ops, x, y)
    want = ((x & y) + (x << 2) - (y >> 1) + (x | 3)) ^ x
    np.testing.assert_array_equal(out, want + np.maximum(x, y) + (x != y) + (x <= y))
    m = ((x > 3) & (y < 100)) | (x == 7)
    np.testing.assert_array_equal(half, np.where(m ^ (y >= 250), x, y).astype(np.float16))


# ---- every nisa instruction ------------------------------------------------------------------

def isa_everything(x, y, b):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((128, 3), nl.float32, buffer=nl.shared_hbm)
    ids = nl.ndarray((128, 64), nl.int32, buffer=nl.shared_hbm)
    tr = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32)
    nisa.dma_copy(t, x)
    u = nl.load(y)
    bias = nl.load(b)
    r = nl.ndarray((128, 64), nl.float32)
    s = nl.ndarray((128, 1), nl.float32)
    nisa.activation(r, nl.exp, t, bias=bias, scale=0.5, reduce_op=nl.add, reduce_res=s)
    nisa.activation(dst=r, op=nl.tanh, data=r, scale=bias)
    q = nl.ndarray((128, 64), nl.float32)
    nisa.tensor_tensor(q, r, u, nl.multiply)
    nisa.tensor_scalar(q, q, nl.multiply, 3.0, op1=nl.subtract, operand1=1.0, reverse1=True)
    nisa.tensor_scalar(q, q, nl.add, bias)
    m = nl.ndarray((128, 1), nl.float32)
    nisa.tensor_reduce(m, nl.maximum, q, axis=1, negate=True)
    rr = nl.ndarray((128, 3), nl.float32)
    nisa.tensor_copy(rr[:, 0:1], s)
    nisa.tensor_copy(rr[:, 1:2], m)
    nisa.memset(rr[:, 2:3], -7.5)
    nl.store(red, rr)
    io = nl.ndarray((128, 64), nl.int32)
    nisa.iota(io, [[1, 64]], offset=5, channel_multiplier=100)
    nl.store(ids, io)
    sel = nl.ndarray((128, 64), nl.float32)
    nisa.affine_select(sel, [[-1, 64]], 1, q, -9.0, cmp_op=nl.greater_equal)
    pred = nl.greater(u, 0.0)
    nisa.tensor_copy_predicated(sel, t, pred)
    pt = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(pt, sel)
    st = nl.ndarray((64, 128), nl.float32)
    nisa.tensor_copy(st, pt)
    nisa.dma_copy(tr, st)
    nl.store(out, sel)
    return out, red, ids, tr


def test_every_isa_instruction_agrees():
    x = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
    y = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
    b = RNG.uniform(-1, 1, (128, 1)).astype(np.float32)
    out, red, ids, tr = three_ways(isa_everything, x, y, b)
    p, f = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    np.testing.assert_array_equal(ids, 5 + 100 * p + f)
    want_s = np.exp(x.astype(f64) * 0.5 + b).sum(1)
    np.testing.assert_allclose(red[:, 0], want_s, rtol=1e-5)
    np.testing.assert_array_equal(red[:, 2], -7.5)
    np.testing.assert_array_equal(tr, out.T)
    np.testing.assert_array_equal(out[y > 0], x[y > 0])


# ---- PSUM accumulation: accumulate=None (auto), True and False in loops ----------------------

def matmul_accumulate(x, y):
    auto = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    add = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    mixed = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    pa = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
    pt = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    pf = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
    pm = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
    for i in nl.affine_range(3):
        a = nl.load(x[i * 128:(i + 1) * 128, :])
        b = nl.load(y[i * 128:(i + 1) * 128, :])
        nisa.nc_matmul(pa, a, b)                   # auto: overwrite, then add
        nisa.nc_matmul(pt, a, b, accumulate=True)
        nisa.nc_matmul(pf, a, b, accumulate=False)
    for j in nl.sequential_range(2):
        a = nl.load(x[j * 128:(j + 1) * 128, :])
        b = nl.load(y[j * 128:(j + 1) * 128, :])
        nisa.nc_matmul(pm[:, 0:32], a, b[:, 0:32])  # auto on two halves
        nisa.nc_matmul(pm[:, 32:64], a, b[:, 32:64])
        pm[:, 0:32] = nl.copy(pm[:, 0:32])           # a non-matmul write: the next auto overwrites
    nl.store(auto, pa)
    nl.store(add, pt)
    nl.store(last, pf)
    nl.store(mixed, pm)
    return auto, add, last, mixed


def test_matmul_accumulate_auto_true_false_in_loops():
    x = RNG.standard_normal((384, 128)).astype(np.float32)
    y = RNG.standard_normal((384, 64)).astype(np.float32)
    auto, add, last, mixed = three_ways(matmul_accumulate, x, y)
    full = x.astype(f64).T @ y
    np.testing.assert_allclose(auto, full, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(auto, add)
    np.testing.assert_allclose(last, x[256:].astype(f64).T @ y[256:], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(mixed[:, :32], x[128:256].astype(f64).T @ y[128:256, :32],
                               rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(mixed[:, 32:], x[:256].astype(f64).T @ y[:256, 32:],
                               rtol=1e-4, atol=1e-3)


def psum_in_loop_and_hbm_writes(x, y):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32)
    for i in nl.affine_range(3):
        p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)  # fresh each iteration
        for k in nl.affine_range(2):
            nisa.nc_matmul(p, nl.load(x[k * 128:(k + 1) * 128, :]),
                           nl.load(y[k * 128:(k + 1) * 128, :]))
        acc += p
    scratch = nl.ndarray((128, 64), nl.float32, buffer=nl.hbm)
    nisa.dma_copy(scratch, acc)
    nl.store(y[256:384, :], nl.load(scratch) * 0.5)  # a write into an input, as compiled allows
    nl.store(out, nl.load(y[256:384, :]))
    return out


def test_psum_allocated_in_a_loop_scratch_and_input_writes():
    x = RNG.standard_normal((256, 128)).astype(np.float32)
    y = RNG.standard_normal((384, 64)).astype(np.float32)
    out = three_ways(psum_in_loop_and_hbm_writes, x, y)
    np.testing.assert_allclose(out, 1.5 * (x.astype(f64).T @ y[:256]), rtol=1e-4, atol=1e-3)
    ye = y.copy()
    neuron.kernel(psum_in_loop_and_hbm_writes, mode="eager")(x, ye)
    np.testing.assert_array_equal(ye[256:], out)  # the caller's array, written in place


def partly_marked_psum(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
    a = nl.load(x)
    nisa.memset(p, 5.0)                  # not a matmul write
    nisa.nc_matmul(p[:, 0:32], a, a[:, 0:32])
    nisa.nc_matmul(p, a, a[:, 0:64])     # auto: adds on columns 0:32, overwrites 32:64
    nl.store(out, p)
    return out


def test_auto_accumulate_into_a_partly_marked_region_follows_each_elements_mark():
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    out = three_ways(partly_marked_psum, x)  # native, simulate and eager: the same bits
    g = x.astype(f64).T @ x
    np.testing.assert_allclose(out[:, :32], 2 * g[:, :32], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(out[:, 32:], g[:, 32:64], rtol=1e-4, atol=1e-3)


def flags_hand_over(x, marks):
    """psum_flags_set / psum_flags_get (ops.hpp), the instructions eager mode hands a PSUM
    tile's flags over with, in a compiled kernel: set from `marks`, read back, then an
    auto-accumulating matmul follows them element by element."""
    from neuron import _C
    from neuron._span import user_span
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    seen = nl.ndarray((2, 128, 64), nl.uint8, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
    a = nl.load(x)
    nisa.memset(p, 5.0)
    _C._psum_flags_set(p, nl.load(marks), user_span())
    for i, after in enumerate(("set", "matmul")):
        if after == "matmul":
            nisa.nc_matmul(p, a, a[:, 0:64])
        f = nl.ndarray((128, 64), nl.uint8, buffer=nl.sbuf)
        _C._psum_flags_get(f, p, user_span())
        nl.store(seen[i], f)
    nl.store(out, p)
    return out, seen


def test_psum_flags_hand_over_instructions_agree_on_both_executors():
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    marks = RNG.integers(0, 3, (128, 64)).astype(np.uint8)  # 2 counts as set, like 1
    outs = [neuron.kernel(flags_hand_over, mode=m)(x, marks) for m in ("native", "simulate")]
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    out, seen = outs[0]
    np.testing.assert_array_equal(seen[0], marks != 0)
    np.testing.assert_array_equal(seen[1], 1)  # a matmul write sets every flag it writes
    g = x.astype(f64).T @ x[:, 0:64]
    np.testing.assert_allclose(out, np.where(marks != 0, 5.0 + g, g), rtol=1e-4, atol=1e-3)


def test_a_failing_auto_accumulate_leaves_the_psum_values_alone():
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        a = nl.load(x)
        nisa.memset(p, 5.0)
        nisa.nc_matmul(p[:, 0:32], a, a[:, 0:32])
        try:
            nisa.nc_matmul(p, a[0:64, :], a[:, 0:64])  # K 64 against 128: a shape error
        except neuron.NeuronError:
            pass
        nl.store(out, p)
        return out

    x = RNG.standard_normal((128, 128)).astype(np.float32)
    out = neuron.kernel(k, mode="eager")(x)
    np.testing.assert_allclose(out[:, :32], x.astype(f64).T @ x[:, :32], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(out[:, 32:], 5.0)  # not zeroed by the failed matmul


# ---- grids, loops, control flow --------------------------------------------------------------

def gridded(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    for k in nl.static_range(2):
        rows = nl.ds((i * 2 + j) * 256 + k * 128, 128)
        t = nl.load(a[rows, :]) * (k + 1.0)
        nl.store(out[rows, :], t + nl.load(b[rows, :]))
    return out


def test_grid_programs_share_their_outputs():
    a = RNG.standard_normal((1024, 32)).astype(np.float32)
    b = RNG.standard_normal((1024, 32)).astype(np.float32)
    out = three_ways(gridded, a, b, grid=(2, 2))
    scale = np.tile(np.repeat([1.0, 2.0], 128), 4)[:, None]
    np.testing.assert_allclose(out, a.astype(f64) * scale + b, rtol=1e-6)


def test_loops_iterate_and_indices_are_ints():
    seen = []

    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            seen.append(i)
            nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(nl.load(x[i * 128:(i + 1) * 128, :])))
        return out

    x = RNG.standard_normal((384, 16)).astype(np.float32)
    three_ways(k, x)
    eager = seen[:3]  # eager ran first: three ints; compiled traced one symbolic index
    assert [int(i) for i in eager] == [0, 1, 2] and str(eager[2]) == "2" and len(seen) == 5


def branch_on_register(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    r = nisa.register_alloc(0)
    if r == 0:
        nl.store(out[0:128, :], nl.load(x[0:128, :]))
    return out


def slice_sized_by_index(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[0:128, 0:1], nl.load(x[0:128, 0:i + 1]))
    return out


@pytest.mark.parametrize("fn,rule,text", [(branch_on_register, "control-flow", "if r == 0"),
                                          (slice_sized_by_index, "index", "x[0:128, 0:i + 1]")],
                         ids=["branch", "slice-size"])
def test_what_compiling_refuses_on_loop_indices_eager_refuses_too(fn, rule, text):
    x = np.zeros((256, 4), np.float32)
    for mode in ("eager", "native"):
        with pytest.raises(neuron.NeuronError) as info:
            neuron.kernel(fn, mode=mode)(x)
        assert info.value.rule == rule and info.value.line == line_of(fn, text)


# ---- printing and debugging ------------------------------------------------------------------

def test_print_shows_values(capsys):
    def k(x):
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x) * 2.0
        print(t[0:2, :])
        nl.store(out, t)
        return out

    x = np.arange(512, dtype=np.float32).reshape(128, 4)
    neuron.kernel(k, mode="eager")(x)
    text = capsys.readouterr().out
    assert "[2, 4] float32 in sbuf" in text
    assert "[[ 0.  2.  4.  6.]\n [ 8. 10. 12. 14.]]" in text


def test_device_print_matches_the_simulator(capsys):
    def k(x):
        out = nl.ndarray((128, 3), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.device_print("tile", t[0:4, :])
        u = nl.exp(t)
        nl.device_print("exp", u[126:128, 1:3])
        nl.store(out, u)
        return out

    x = RNG.standard_normal((128, 3)).astype(np.float32)
    neuron.kernel(k, mode="simulate")(x)
    simulated = capsys.readouterr().out
    neuron.kernel(k, mode="eager")(x)
    eager = capsys.readouterr().out
    assert simulated.startswith("tile [4, 3] float32") and eager == simulated


def test_values_are_readable_mid_kernel_like_in_a_debugger():
    snapshots = []

    def inspect_tile(t):  # what a pdb session does: read the values at this point
        if hasattr(t, "numpy"):  # eager only (compiled kernels have no values to show)
            snapshots.append((t.numpy(), t.shape, t.dtype, t.buffer))

    def k(x):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 8), nl.float32)
        for i in nl.sequential_range(3):
            acc += nl.load(x[i * 128:(i + 1) * 128, :])
            inspect_tile(acc)
        nl.store(out, acc)
        return out

    x = RNG.standard_normal((384, 8)).astype(np.float32)
    out = neuron.kernel(k, mode="eager")(x)
    assert len(snapshots) == 3
    np.testing.assert_array_equal(snapshots[0][0], x[:128])
    np.testing.assert_allclose(snapshots[2][0], x[:128] + x[128:256] + x[256:], rtol=1e-6)
    np.testing.assert_array_equal(snapshots[2][0], out)
    assert snapshots[0][1:] == ((128, 8), nl.float32, nl.sbuf)
    np.testing.assert_array_equal(out, neuron.kernel(k)(x))


def test_a_pdb_session_inside_the_kernel_sees_values():
    commands = io.StringIO("p t.shape\np t[0:1, 0:2]\np float(t.numpy()[3, 1])\nc\n")
    transcript = io.StringIO()

    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.exp(nl.load(x))
        pdb.Pdb(stdin=commands, stdout=transcript, nosigint=True).set_trace()
        nl.store(out, t)
        return out

    x = np.log(np.arange(1, 257, dtype=np.float32)).reshape(128, 2)
    out = neuron.kernel(k, mode="eager")(x)
    text = transcript.getvalue()
    assert "(128, 2)" in text and "[1, 2] float32 in sbuf" in text
    assert f"{float(out[3, 1])}" in text and out[3, 1] == pytest.approx(8.0, rel=1e-5)


def test_neuron_eager_env_makes_eager_the_default(monkeypatch, capsys):
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        print("value", t.numpy()[0, 0])
        nl.store(out, t)
        return out

    x = np.full((128, 2), 3.0, np.float32)
    monkeypatch.setenv("NEURON_EAGER", "1")
    k1 = neuron.kernel(k)
    assert k1.mode == "eager"
    np.testing.assert_array_equal(k1(x), x)
    assert "value 3.0" in capsys.readouterr().out
    assert neuron.kernel(k, mode="native").mode == "native"
    monkeypatch.setenv("NEURON_EAGER", "0")
    assert neuron.kernel(k).mode == "native"


# ---- errors and calling conventions ----------------------------------------------------------

def bad_slice(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    v = t[0:64, :]
    w = a[0:256, :]
    nl.store(out, t + v + w)
    return out


def bad_shapes(x, y):
    out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
    a, b = nl.load(x), nl.load(y)
    nisa.nc_matmul(acc, a, b)
    nl.store(out, nl.copy(acc))
    return out


def test_errors_point_at_the_users_line_with_toolkit_frames_stripped():
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(bad_slice, mode="eager")(np.zeros((128, 64), np.float32))
    e = info.value
    assert e.rule == "index" and e.line == line_of(bad_slice, "a[0:256")
    frames = traceback.extract_tb(e.__traceback__)
    assert [f.name for f in frames if f.filename == __file__][-1] == "bad_slice"
    assert len([f for f in frames if "/neuron/" in f.filename]) <= 1

    compiled = None
    for mode in ("native", "eager"):
        with pytest.raises(neuron.NeuronError) as info:
            neuron.kernel(bad_shapes, mode=mode)(np.zeros((128, 128), np.float32),
                                                 np.zeros((64, 128), np.float32))
        assert info.value.line == line_of(bad_shapes, "nisa.nc_matmul")
        compiled = compiled or info.value.rule
        assert info.value.rule == compiled


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")

    def k(x, y):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x) * nl.load(y) + 1.0)
        return out

    x = torch.randn(128, 32)
    y = torch.randn(128, 32).to(torch.bfloat16)
    e = neuron.kernel(k, mode="eager")(x, y.float())
    assert isinstance(e, torch.Tensor)
    assert torch.equal(e, neuron.kernel(k)(x, y.float()))
    eb = neuron.kernel(k, mode="eager")(y, y)
    assert eb.dtype == torch.bfloat16 and torch.equal(eb, neuron.kernel(k)(y, y))


def test_shapes_are_tuples_in_every_mode():
    # A kernel that builds a shape from a tensor's (`(1,) + x.shape[1:]`) runs in all modes.
    def first_row(x):
        assert isinstance(x.shape, tuple) and isinstance(nl.load(x).shape, tuple)
        out = nl.ndarray((1,) + x.shape[1:], x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x[0:1, :]))
        return out

    x = np.arange(21, dtype=np.float32).reshape(3, 7)
    for mode in ("native", "simulate", "eager"):
        np.testing.assert_array_equal(neuron.kernel(first_row, mode=mode)(x), x[0:1])
