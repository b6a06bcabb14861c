# The native backend runs runs of partition-local instructions a block of partitions at a time
# (codegen/llvm/lower_program.cpp, docs/native.md). These kernels have rows long enough to be
# blocked, and runs whose views are shifted across partitions (where blocking would read what
# another block wrote): native results must be the simulator's bits, with blocks and without
# (NEURON_PARTITION_BLOCKS=0), with SBUF folding (the runs' temporaries in run buffers, tiles of
# broadcast rows in one row, loads forwarded to their readers) and without
# (NEURON_SBUF_FOLDING=0), with element-wise chains fused into one loop and without
# (NEURON_FUSED_CHAINS=0), and match NumPy.
import inspect
import itertools

import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

RNG = np.random.default_rng(11)
F = 2048  # 8 KiB fp32 rows, 1 MiB tiles: the runs are blocked


def softmax_rows(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    negmax = nl.ndarray((128, 1), nl.float32)
    nisa.tensor_reduce(negmax, nl.maximum, t, axis=1, negate=True)
    e = nl.ndarray((128, F), nl.float32)
    s = nl.ndarray((128, 1), nl.float32)
    nisa.activation(e, nl.exp, t, bias=negmax, reduce_op=nl.add, reduce_res=s)
    r = nl.ndarray((128, 1), nl.float32)
    nisa.activation(r, nl.reciprocal, s)
    y = nl.ndarray((128, F), nl.float32)
    nisa.tensor_scalar(y, e, nl.multiply, r)
    nisa.dma_copy(out, y)
    return out


def shifted(x):
    # Through an HBM scratch, rows written by one DMA of a run are read back one row lower by
    # the next: partition p of the read is partition p + 1 of the write. (On-chip views cannot
    # overlap that way: a view of n partitions starts at a quadrant boundary.)
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    scratch = nl.ndarray((256, F), nl.float32, buffer=nl.private_hbm)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    u = nl.ndarray((128, F), nl.float32)
    nisa.tensor_scalar(u, t, nl.multiply, 2.0)
    nisa.dma_copy(scratch[0:128, :], u)
    v = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(v, scratch[1:129, :])
    w = nl.ndarray((128, F), nl.float32)
    nisa.tensor_tensor(w, v, t, nl.add)
    nisa.dma_copy(out, w)
    return out


def shifted_reference(x):
    x = x.astype(np.float64)
    s = np.zeros((256, F))
    s[0:128] = 2 * x
    return s[1:129] + x


def carried(x):
    # acc is set before the loop and updated in place in each iteration's run (it carries values
    # into the run: not run-local); t is loaded and used up inside the run (run-local).
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), nl.float32)
    nisa.memset(acc, 0.5)
    for i in nl.sequential_range(3):
        t = nl.ndarray((128, F), nl.float32)
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128, :])
        u = nl.ndarray((128, F), nl.float32)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.tensor_tensor(acc, acc, u, nl.add)
    nisa.dma_copy(out, acc)
    return out


def weighted(x):
    # w = x's first row on every partition (a broadcast: one physical row natively), then
    # overwritten on half its partitions by an ordinary write (no longer one row from there).
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    row = nl.ndarray((1, F), nl.float32)
    nisa.dma_copy(row, x[0:1, :])
    w = nl.broadcast_to(row, (128, F))
    half = nl.full((128, F), 0.5, nl.float32)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    y = nl.ndarray((128, F), nl.float32)
    nisa.tensor_tensor(y, t, w, nl.multiply)
    nisa.tensor_tensor(y, y, half, nl.add)
    nisa.tensor_scalar(w[0:64, :], t[0:64, :], nl.multiply, 3.0)
    nisa.tensor_tensor(y, y, w, nl.add)
    nisa.dma_copy(out, y)
    return out


def bit_views(x):
    # A run's temporary read through an int32 view (its exponent field) and rewritten in place
    # through a bf16 view of its halves: views of other dtypes in a blocked run, its temporary
    # in a run buffer.
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    sq = nl.ndarray((128, F), nl.float32)
    nisa.activation(sq, nl.square, t)
    e = nl.ndarray((128, F), nl.int32)
    nisa.tensor_scalar(e, sq.view(nl.int32), nl.right_shift, 23)
    halves = sq.view(nl.bfloat16)
    nisa.tensor_scalar(halves, halves, nl.multiply, 2.0)  # the high half doubled: 2x the value
    y = nl.ndarray((128, F), nl.float32)
    nisa.tensor_tensor(y, sq, e, nl.add)
    nisa.dma_copy(out, y)
    return out


def widened(x):
    # x in bf16, loaded into an fp32 tile: the load is forwarded (the value reads take the bf16
    # rows, widened as the load would), except for the tile read through an int32 view, whose
    # bits only the fp32 tile holds. Two kernels: the second one has no such view.
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    e = nl.ndarray((128, F), nl.int32)
    nisa.tensor_scalar(e, t.view(nl.int32), nl.right_shift, 16)
    y = nl.ndarray((128, F), nl.float32)
    nisa.tensor_scalar(y, t, nl.multiply, 2.0)
    nisa.tensor_tensor(y, y, e, nl.add)
    nisa.dma_copy(out, y)
    return out


def widened_values(x):
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    s = nl.ndarray((128, 1), nl.float32)
    nisa.tensor_reduce(s, nl.add, t, axis=1)
    y = nl.ndarray((128, F), nl.float32)
    nisa.tensor_scalar(y, t, nl.multiply, 2.0, op1=nl.add, operand1=s)
    nisa.dma_copy(out, y)
    return out


def column_sums(x):
    # Matmuls contracting over the rows of a run's tiles (a norm backward's dweight): each
    # block adds its rows of K, the first overwriting where the instruction does (ps), the
    # rest accumulating, one fma chain per element in increasing k as the whole instruction's.
    # The stationary is a real operand (two columns of t); acc accumulates onto a memset.
    out = nl.ndarray((3, F), nl.float32, buffer=nl.shared_hbm)
    chunks = range(F // 512)
    accs = [nl.ndarray((1, 512), nl.float32, buffer=nl.psum) for _ in chunks]
    for acc in accs:
        nisa.memset(acc, 1.0)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    u = nl.ndarray((128, F), nl.float32)
    nisa.tensor_scalar(u, t, nl.multiply, t[:, 0:1], op1=nl.add, operand1=0.25)
    ones = nl.full((128, 1), 1.0, nl.float32)
    pss = [nl.ndarray((2, 512), nl.float32, buffer=nl.psum) for _ in chunks]
    for c in chunks:
        cols = slice(c * 512, (c + 1) * 512)
        nisa.nc_matmul(pss[c], t[:, 0:2], u[:, cols], accumulate=False)
        nisa.nc_matmul(accs[c], ones, t[:, cols], accumulate=True)
    res = nl.ndarray((2, F), nl.float32)
    sums = nl.ndarray((1, F), nl.float32)
    for c in chunks:
        cols = slice(c * 512, (c + 1) * 512)
        nisa.tensor_copy(res[:, cols], pss[c])
        nisa.tensor_copy(sums[:, cols], accs[c])
    nisa.dma_copy(out[0:2, :], res)
    nisa.dma_copy(out[2:3, :], sums)
    return out


def weighted_column_sums(x):
    # One stationary column (t[:, 2]) over a block's rows: the native backend's column-sum
    # path (a partition block's rows of K without the matmul kernel); each block after the
    # first adds its rows to the one before's sums.
    out = nl.ndarray((1, F), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, F), nl.float32)
    nisa.dma_copy(t, x)
    u = nl.ndarray((128, F), nl.float32)
    nisa.tensor_scalar(u, t, nl.multiply, t[:, 0:1], op1=nl.add, operand1=0.25)
    pss = [nl.ndarray((1, 512), nl.float32, buffer=nl.psum) for _ in range(F // 512)]
    for c, ps in enumerate(pss):
        nisa.nc_matmul(ps, t[:, 2:3], u[:, c * 512:(c + 1) * 512], accumulate=False)
    dots = nl.ndarray((1, F), nl.float32)
    for c, ps in enumerate(pss):
        nisa.tensor_copy(dots[:, c * 512:(c + 1) * 512], ps)
    nisa.dma_copy(out, dots)
    return out


def row_dots(x):
    # p = x * (x + 1) and its row sum, written as a user writes them: natively the sum joins
    # the loop of u and p (a fused chain ending in its reduction, in the reduction's lane
    # order); p is read again by its store, so the loop writes it too. The max of u goes
    # into a bf16 column through a chain of one step.
    out = nl.ndarray((128, F + 2), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.add(t, 1.0)
    p = nl.multiply(t, u)
    s = nl.sum(p, axis=1, keepdims=True)
    v = nl.multiply(t, -0.5)
    m = nl.ndarray((128, 1), nl.bfloat16)
    nisa.tensor_reduce(m, nl.maximum, v, axis=1, negate=True)
    nl.store(out[:, 0:F], p)
    nl.store(out[:, F:F + 1], s)
    nl.store(out[:, F + 1:F + 2], m)
    return out


def profiled_rows(fn, op, knob, value, monkeypatch):
    # The native profile's rows of instructions `op` of fn on a [128, F] input, with the knob.
    monkeypatch.setenv(knob, value)
    prof = neuron.native_profile(fn)
    prof(RNG.standard_normal((128, F)).astype(np.float32))
    return [r for r in prof.profile.rows if r["op"] == op]


def test_row_sums_run_in_the_fused_loops(monkeypatch):
    # row_dots' reductions have no calls of their own with chains on (their time is their
    # chain's, billed to its first instruction), one per block with chains off.
    for chains in ("1", "0"):
        rows = profiled_rows(row_dots, "tensor_reduce", "NEURON_FUSED_CHAINS", chains, monkeypatch)
        assert len(rows) == (0 if chains == "1" else 2), rows


def test_contracting_matmuls_run_in_the_blocks(monkeypatch):
    # column_sums' matmuls join the blocked run of t's load and u: one call per block (so the
    # tiles stay in cache), or one call each with blocks off; the bits are checked above.
    for fn, per_chunk in ((column_sums, 2), (weighted_column_sums, 1)):
        for blocks in ("1", "0"):
            rows = profiled_rows(fn, "nc_matmul", "NEURON_PARTITION_BLOCKS", blocks, monkeypatch)
            calls = [r["calls"] for r in rows]
            assert len(calls) == per_chunk * (F // 512)
            assert all(c > 1 for c in calls) if blocks == "1" else all(c == 1 for c in calls), \
                calls


def exp_rows(x, steps):
    # A run of 3 + steps instructions on x's tile: load, exp, `steps` element-wise steps, store.
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32)
    nisa.dma_copy(t, x)
    y = nl.ndarray(x.shape, nl.float32)
    nisa.activation(y, nl.exp, t)
    for k in range(steps):
        z = nl.ndarray(x.shape, nl.float32)
        nisa.tensor_tensor(z, y, t, nl.add if k % 2 else nl.subtract)
        y = z
    nisa.dma_copy(out, y)
    return out


@pytest.mark.parametrize("width,steps,blocked", [(128, 14, True), (128, 3, False),
                                                 (64, 14, False), (256, 14, False),
                                                 (512, 14, False)])
def test_long_runs_of_tiles_just_over_l1_are_blocked(width, steps, blocked):
    # Without a matmul, a run of at least 16 instructions whose widest tile is just over L1
    # (32 KiB < [128, 128] fp32 <= 64 KiB: a FlexAttention key tile's score mod and softmax
    # update) is blocked so the tiles it hands on stay in L1. A short one stays whole (the
    # blocks' calls cost it more: a softmax), as do [128, 64] (it fits), [128, 512]
    # (attention's score tiles lost more than they gained) and [128, 256] (no measured reason).
    # The bits stay the simulator's.
    x = RNG.standard_normal((128, width)).astype(np.float32)
    fn = lambda x: exp_rows(x, steps)  # noqa: E731
    prof = neuron.native_profile(fn)
    got = prof(x)
    calls = [r["calls"] for r in prof.profile.rows if r["op"] == "activation"]
    assert len(calls) == 1 and (calls[0] > 1) == blocked, calls
    sim = neuron.kernel(fn, mode="simulate")(x)
    assert got.tobytes() == sim.tobytes()
    want = np.exp(x.astype(np.float64)) - (steps % 2) * x.astype(np.float64)
    np.testing.assert_allclose(sim, want, rtol=1e-4, atol=1e-4)


def reference(fn, x):
    if fn is row_dots:
        x = x.astype(np.float64)
        p = x * (x + 1)
        m = np.max(-0.5 * x, axis=1, keepdims=True)
        m = (-m).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
        return np.concatenate([p, p.sum(axis=1, keepdims=True), m], axis=1)
    if fn in (column_sums, weighted_column_sums):
        x = x.astype(np.float64)
        u = x * x[:, 0:1] + 0.25
        if fn is weighted_column_sums:
            return x[:, 2:3].T @ u
        return np.concatenate([x[:, 0:2].T @ u, 1.0 + x.sum(axis=0, keepdims=True)])
    if fn is widened:
        t = x.astype(np.float32)
        return 2.0 * t.astype(np.float64) + (t.view(np.uint32) >> 16)  # a logical shift
    x = x.astype(np.float64)
    if fn is widened_values:
        return 2 * x + x.sum(axis=1, keepdims=True)
    if fn is softmax_rows:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if fn is weighted:
        w = np.broadcast_to(x[0], x.shape).copy()
        w[0:64] = 3 * x[0:64]
        return x * x[0] + 0.5 + w
    if fn is carried:
        return 0.5 + sum(2 * x[i * 128:(i + 1) * 128] for i in range(3))
    if fn is bit_views:  # doubling the high bf16 half of a normal fp32 doubles it; doubling the
        # low half moves mantissa bits 7-14 (below 2^-15 of the value, inside the tolerance)
        sq = x.astype(np.float32) ** 2
        return 2.0 * sq.astype(np.float64) + (sq.view(np.int32) >> 23)
    return shifted_reference(x)


@pytest.mark.parametrize("fn", [softmax_rows, shifted, carried, weighted, bit_views, widened,
                                widened_values, column_sums, weighted_column_sums,
                                row_dots])
def test_blocked_runs_give_the_simulator_bits(fn, monkeypatch):
    x = RNG.standard_normal((384 if fn is carried else 128, F)).astype(np.float32)
    if fn in (widened, widened_values):
        x = x.astype(ml_dtypes.bfloat16)
    sim = neuron.kernel(fn, mode="simulate")(x)
    # Streaming stores from 1 MiB: the 128 x 2048 fp32 outputs (softmax_rows, shifted, ...)
    # are written by chains with non-temporal stores.
    for blocks, folding, chains, stream in (("1", "1", "1", "8M"), ("1", "0", "1", "8M"),
                                            ("0", "1", "1", "8M"), ("1", "1", "0", "8M"),
                                            ("1", "1", "1", "1M")):
        monkeypatch.setenv("NEURON_PARTITION_BLOCKS", blocks)
        monkeypatch.setenv("NEURON_SBUF_FOLDING", folding)
        monkeypatch.setenv("NEURON_FUSED_CHAINS", chains)
        monkeypatch.setenv("NEURON_STREAM_STORES_MIN_BYTES", stream)
        k = neuron.kernel(fn)
        assert k(x).tobytes() == sim.tobytes(), (blocks, folding, chains, stream)
        assert ("partition_blocks=off" in k.last_report) == (blocks == "0")
        assert ("sbuf_folding=off" in k.last_report) == (folding == "0")
        assert ("fused_chains=off" in k.last_report) == (chains == "0")
        assert f"stream={int(stream[:-1]) << 20}" in k.last_report
    np.testing.assert_allclose(sim, reference(fn, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("knob,value", [("NEURON_PARTITION_BLOCKS", "yes"),
                                         ("NEURON_SBUF_FOLDING", "on"),
                                         ("NEURON_FUSED_CHAINS", "on")])
def test_a_bad_knob_value_names_the_knob(knob, value, monkeypatch):
    monkeypatch.setenv(knob, value)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(softmax_rows)(np.zeros((128, F), np.float32))
    assert info.value.rule == "config"
    assert f"{knob}='{value}' is not 0 or 1" in info.value.message


@pytest.mark.parametrize("value", ["8X", "-1", "x"])
def test_a_bad_stream_threshold_names_the_knob(value, monkeypatch):
    monkeypatch.setenv("NEURON_STREAM_STORES_MIN_BYTES", value)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(softmax_rows)(np.zeros((128, F), np.float32))
    assert info.value.rule == "config"
    assert f"NEURON_STREAM_STORES_MIN_BYTES='{value}' is not a byte count" in info.value.message


def shared_moving(a_t, b, also_read=False):
    # A row group's matmuls (kernels/include/neuron/kernels/matmul.hpp): per K tile, B's tile is
    # loaded and two matmuls read it as their moving operand, their stationaries slices of a
    # panel at the loop's offset. Natively the matmuls read B's rows in HBM and the load is
    # dropped (lower_program.cpp emit_forwarded_matmuls), unless something else reads the tile
    # (also_read: the tile is added into an SBUF sum as well).
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M + 1, N), nl.float32, buffer=nl.shared_hbm)
    panel = nl.ndarray((128, K // 128, M), a_t.dtype)
    for kt in nl.affine_range(K // 128):
        nisa.dma_copy(panel[:, kt, :], a_t[kt * 128:(kt + 1) * 128, :])
    accs = [nl.zeros((128, N), nl.float32, buffer=nl.psum) for _ in range(M // 128)]
    seen = nl.zeros((128, N), nl.float32)
    for kt in nl.affine_range(K // 128):
        bt = nl.ndarray((128, N), b.dtype)
        nisa.dma_copy(bt, b[kt * 128:(kt + 1) * 128, :])
        for j, acc in enumerate(accs):
            nisa.nc_matmul(acc, panel[:, kt, j * 128:(j + 1) * 128], bt, accumulate=True)
        if also_read:
            nisa.tensor_tensor(seen, seen, bt, nl.add)
    for j, acc in enumerate(accs):
        y = nl.ndarray((128, N), nl.float32)
        nisa.tensor_copy(y, acc)
        nisa.dma_copy(out[j * 128:(j + 1) * 128, :], y)
    total = nl.ndarray((128, N), nl.float32)
    nisa.tensor_copy(total, seen)
    nisa.dma_copy(out[M:M + 1, :], total[0:1, :])
    return out


B_LOAD_LINE = next(n for n, line in zip(itertools.count(inspect.getsourcelines(shared_moving)[1]),
                                          inspect.getsourcelines(shared_moving)[0])
                   if "nisa.dma_copy(bt," in line)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("also_read", [False, True])
def test_matmuls_read_their_moving_tile_from_hbm(dtype, also_read, monkeypatch):
    K, M, N = 384, 256, 512
    a_t = RNG.standard_normal((K, M)).astype(np.float32).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(np.float32).astype(dtype)
    fn = lambda a_t, b: shared_moving(a_t, b, also_read)  # noqa: E731
    sim = neuron.kernel(fn, mode="simulate")(a_t, b)
    want = np.concatenate([a_t.astype(np.float64).T @ b.astype(np.float64),
                           (b.astype(np.float64)[0::128] * also_read).sum(axis=0)[None]])
    np.testing.assert_allclose(sim, want, rtol=1e-2 if dtype is not np.float32 else 1e-5,
                               atol=1e-2 if dtype is not np.float32 else 1e-4)
    for folding in ("1", "0"):
        monkeypatch.setenv("NEURON_SBUF_FOLDING", folding)
        assert neuron.kernel(fn)(a_t, b).tobytes() == sim.tobytes(), folding
        prof = neuron.native_profile(fn)
        prof(a_t, b)
        # B's tile loads go when folding is on. Read by an addition too, a bf16 tile keeps its
        # load (bf16 matmuls run whole, outside partition-blocked runs); fp32 matmuls join the
        # addition's blocked run, which forwards the load to all three readers.
        b_loads = [r for r in prof.profile.rows if r["line"].endswith(f":{B_LOAD_LINE}")]
        forwarded = folding == "1" and (not also_read or dtype is np.float32)
        assert len(b_loads) == (0 if forwarded else 1), prof.profile.rows
