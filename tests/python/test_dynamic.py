# The dynamic half of the current API (neuron.language / neuron.isa, NKI_API.md 6.2-6.5):
# registers, runtime loops, .ap() access patterns, indirect DMA rows with oob_mode and the
# gathers, each against a NumPy reference, natively, on the simulator and eagerly (bit for bit).
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

RNG = np.random.default_rng(5)


def three_ways(fn, *args, modes=("native", "simulate", "eager")):
    """fn run in each mode (fresh copies of the inputs); asserts bit-identical outputs and
    returns the first mode's."""
    results = []
    for mode in modes:
        out = neuron.kernel(fn, mode=mode)(*[a.copy() for a in args])
        results.append(out if isinstance(out, tuple) else (out,))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    return results[0] if len(results[0]) > 1 else results[0][0]


def ints(shape, values, dtype=np.int32):
    return np.asarray(values, dtype).reshape(shape)


TABLE = RNG.uniform(-4, 4, (100, 64)).astype(np.float32)
ROWS = ints((32, 1), [(p * 37 + 5) % 100 for p in range(32)])


# ---- indirect rows: .ap(vector_offset=...) with nl.load / nl.store / nisa.dma_copy ---------------

def gather_rows(table, idx):
    out = nl.ndarray((32, 64), nl.float32, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    nl.store(out, nl.load(table.ap([[64, 32], [1, 64]], vector_offset=rows)))
    return out


def test_indirect_load_gathers_rows():
    np.testing.assert_array_equal(three_ways(gather_rows, TABLE, ROWS), TABLE[ROWS[:, 0]])


def gather_rows_skip(table, idx):
    out = nl.ndarray((32, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.full((32, 64), -1.0, nl.float32)
    nisa.dma_copy(t, table.ap([[64, 32], [1, 64]], vector_offset=nl.load(idx)),
                  oob_mode=nisa.oob_mode.skip)
    nl.store(out, t)
    return out


def test_dma_copy_skips_out_of_range_rows_and_errors_name_the_row():
    bad = ROWS.copy()
    bad[7, 0] = 100  # one past the last row
    want = np.where((bad < 100), TABLE[np.minimum(bad[:, 0], 99)], -1.0).astype(np.float32)
    want = np.where(bad < 100, want, np.float32(-1.0))
    np.testing.assert_array_equal(three_ways(gather_rows_skip, TABLE, bad), want)
    for mode in ("native", "simulate"):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(gather_rows, mode=mode)(TABLE, bad)
        msg = str(e.value)
        assert "row index 100" in msg and "element 7" in msg and "oob_mode" in msg, msg
        assert e.value.file == __file__
        assert e.value.line == line_of(gather_rows, "vector_offset=rows")
        assert "nl::" not in msg and "isa::" not in msg


def scatter_rows(src, idx):
    out = nl.ndarray((50, 16), nl.float32, buffer=nl.shared_hbm)
    out[...] = 0.0
    nl.store(out.ap([[16, 16], [1, 16]], vector_offset=nl.load(idx)), nl.load(src))
    return out


def scatter_rows_dma(src, idx):
    out = nl.ndarray((50, 16), nl.float32, buffer=nl.shared_hbm)
    out[...] = 0.0
    nisa.dma_copy(out.ap([[16, 16], [1, 16]], vector_offset=nl.load(idx)), nl.load(src))
    return out


@pytest.mark.parametrize("fn", [scatter_rows, scatter_rows_dma])
def test_indirect_store_scatters_rows(fn):
    src = RNG.uniform(-1, 1, (16, 16)).astype(np.float32)
    idx = ints((16, 1), [49 - 3 * p for p in range(16)])
    want = np.zeros((50, 16), np.float32)
    want[idx[:, 0]] = src
    np.testing.assert_array_equal(three_ways(fn, src, idx), want)


def scatter_columns_of_a_flat_cache(cache, idx, kt):
    """nki-library's batched KV-cache update of a transposed cache [B, 1, d, S]: seen flat, row
    idx[b] (= b*d*S + position) gets kt[b] down a column, stride S: each row's window reaches
    past the next rows, so the copy goes one window element at a time."""
    B, _, d, S = cache.shape
    rows = nl.ndarray((B, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(rows, idx)
    src = nl.load(kt)
    nisa.dma_copy(dst=cache.reshape((B * d * S,)).ap([[1, B], [S, d], [1, 1]], offset=0,
                                                   vector_offset=rows, indirect_dim=0),
                  src=src.ap([[d, B], [1, d], [1, 1]]))
    return cache


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_indirect_rows_whose_windows_overlap_the_next_rows(mode):
    B, d, S = 4, 8, 16
    pos = np.array([3, 0, 15, 7])
    idx = (np.arange(B) * d * S + pos).astype(np.uint32).reshape(B, 1)
    kt = RNG.uniform(-1, 1, (B, d)).astype(np.float32)
    cache = RNG.uniform(-1, 1, (B, 1, d, S)).astype(np.float32)
    want = cache.copy()
    for b in range(B):
        want[b, 0, :, pos[b]] = kt[b]
    neuron.kernel(scatter_columns_of_a_flat_cache, mode=mode)(cache, idx, kt)
    np.testing.assert_array_equal(cache, want)


# ---- gathers -------------------------------------------------------------------------------------

def gathers(data, idx, lidx):
    g = nl.ndarray((32, 8), nl.float32, buffer=nl.shared_hbm)
    f = nl.ndarray((32, 8), nl.float32, buffer=nl.shared_hbm)
    lg = nl.ndarray((32, 6), nl.float32, buffer=nl.shared_hbm)
    d, i = nl.load(data), nl.load(idx)
    gt = nl.ndarray((32, 8), nl.float32)
    nisa.nc_n_gather(gt, d, i)
    nl.store(g, gt)
    nl.store(f, nl.gather_flattened(d, i))
    lt = nl.ndarray((32, 6), nl.float32)
    nisa.local_gather(lt, d, nl.load(lidx), num_elem_per_idx=2, num_valid_indices=3)
    nl.store(lg, lt)
    return g, f, lg


def test_nc_n_gather_gather_flattened_and_local_gather():
    data = RNG.uniform(-1, 1, (32, 40)).astype(np.float32)
    idx = ints((32, 8), [(i * 13) % 40 for i in range(256)])
    lidx = ints((32, 1), [(i * 7) % 38 for i in range(32)], np.uint16)
    g, f, lg = three_ways(gathers, data, idx, lidx)
    np.testing.assert_array_equal(g, np.take_along_axis(data, idx, axis=1))
    np.testing.assert_array_equal(f, g)
    # Group q (16 partitions) uses indices lidx[16q + k], k < 3 (one column: partition-first).
    want = np.empty((32, 6), np.float32)
    for p in range(32):
        for k in range(3):
            start = lidx[16 * (p // 16) + k, 0]
            want[p, 2 * k:2 * k + 2] = data[p, start:start + 2]
    np.testing.assert_array_equal(lg, want)


def one_gather(data, idx):
    g = nl.ndarray((32, 8), nl.float32, buffer=nl.shared_hbm)
    gt = nl.ndarray((32, 8), nl.float32)
    nisa.nc_n_gather(gt, nl.load(data), nl.load(idx))  # the line the error names
    nl.store(g, gt)
    return g


@pytest.mark.parametrize("bad", [40, -1])
@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_nc_n_gather_index_out_of_range_is_an_error_at_its_line(mode, bad):
    # (The native gather checks a whole tile's indices before its branch-free loop.)
    idx = ints((32, 8), [(i * 13) % 40 for i in range(256)])
    idx[5, 3] = bad
    with pytest.raises(neuron.NeuronError, match=rf"index {bad} read at partition 5 is outside "
                                               r"the 40 elements") as e:
        neuron.kernel(one_gather, mode=mode)(np.ones((32, 40), np.float32), idx)
    assert e.value.line == line_of(one_gather, "nisa.nc_n_gather")


# ---- registers: dynamic offsets ------------------------------------------------------------------

def register_offsets(x, which):
    out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
    moved = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
    back = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
    w = nl.load(which)
    r = nisa.register_alloc()
    nisa.register_load(r, w)
    nl.store(out, nl.load(x[nl.ds(r * 128, 128), :]))
    # .ap(scalar_offset=tile): the tile's value (read into a register) moves the view by that
    # many rows of x (the stride of dim indirect_dim=0).
    nl.store(moved, nl.load(x.ap([[32, 128], [1, 32]], offset=32, scalar_offset=w)))
    s = nisa.register_alloc(7)
    nisa.register_move(s, r)
    t = nl.ndarray((1, 1), nl.int32)
    nisa.register_store(t, s)
    nl.store(back, t)
    return out, moved, back


@pytest.mark.parametrize("block", [0, 3])
def test_a_register_read_from_data_offsets_loads(block):
    x = RNG.uniform(-1, 1, (512, 32)).astype(np.float32)
    out, moved, back = three_ways(register_offsets, x, ints((1, 1), [block]))
    np.testing.assert_array_equal(out, x[block * 128:(block + 1) * 128])
    np.testing.assert_array_equal(moved, x[1 + block:1 + block + 128])
    assert back[0, 0] == block


def test_an_out_of_range_register_offset_names_the_users_line():
    x = np.zeros((512, 32), np.float32)
    for mode in ("native", "simulate"):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(register_offsets, mode=mode)(x, ints((1, 1), [4]))
        assert "out-of-bounds" in str(e.value)
        # both executors name the tensor and its shape, not only element numbers
        assert "tensor 'x' (shape [512, 32], 16384 elements)" in str(e.value), mode
        assert e.value.line == line_of(register_offsets, "x[nl.ds(r * 128, 128), :]")


def tile_columns(x, which):
    out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nisa.register_alloc()
    nisa.register_load(r, nl.load(which))
    nl.store(out, nl.copy(t[:, nl.ds(r, 4)]))
    return out


def test_a_register_index_stays_inside_its_tile():
    # Columns r..r+3 of an [128, 8] tile: r = 4 is the tile's last four; r = 5 reads past the
    # tile (still inside the partition, where another tile lives): an error in both
    # executors, not another tile's bytes.
    x = RNG.uniform(-1, 1, (128, 8)).astype(np.float32)
    out = three_ways(tile_columns, x, ints((1, 1), [4]))
    np.testing.assert_array_equal(out, x[:, 4:8])
    for mode in ("native", "simulate"):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(tile_columns, mode=mode)(x, ints((1, 1), [5]))
        assert "out-of-bounds" in str(e.value) and "outside its tile" in str(e.value), mode
        assert e.value.line == line_of(tile_columns, "nl.copy(t[:, nl.ds(r, 4)])")


# ---- runtime loops -------------------------------------------------------------------------------

def runtime_loops(x, n):
    out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
    cnt_out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 16), nl.float32)
    acc2 = nl.zeros((128, 16), nl.float32)
    trips = nisa.register_alloc()
    nisa.register_load(trips, nl.load(n))

    def add_block(i):
        nisa.tensor_tensor(acc, acc, nl.load(x[nl.ds(i * 128, 128), :]), nl.add)
    nl.fori_loop(0, trips, add_block)
    for i in nl.dynamic_range(1, trips, 2):  # odd blocks only
        acc2[...] += nl.load(x[nl.ds(i * 128, 128), :])

    cnt = nl.zeros((1, 1), nl.float32)

    def count_down(r):
        nisa.tensor_scalar(cnt, cnt, nl.add, 2.0)
        t = nl.ndarray((1, 1), nl.int32)
        nisa.register_store(t, r)
        dec = nl.ndarray((1, 1), nl.int32)
        nisa.tensor_scalar(dec, t, nl.subtract, 1.0)
        nxt = nisa.register_alloc()
        nisa.register_load(nxt, dec)
        return nxt
    nl.while_loop(trips, count_down)
    nl.store(out, acc)
    nl.store(out2, acc2)
    nl.store(cnt_out, cnt)
    return out, out2, cnt_out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_fori_dynamic_range_and_while_loops_read_their_trip_counts(n):
    x = RNG.uniform(-1, 1, (640, 16)).astype(np.float32)
    blocks = x.astype(np.float64).reshape(5, 128, 16)
    out, out2, cnt = three_ways(runtime_loops, x, ints((1, 1), [n]))
    np.testing.assert_allclose(out, blocks[:n].sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2, blocks[1:n:2].sum(axis=0), rtol=1e-5, atol=1e-5)
    assert cnt[0, 0] == 2 * n


TRACES = []


def block_sparse(x, blocks):
    TRACES.append(1)  # once per trace (compile)
    y = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 32), nl.float32)
    lst = nl.load(blocks)  # [1, 9]: the count, then the block ids
    n = nisa.register_alloc()
    nisa.register_load(n, lst[0:1, 0:1])
    for i in nl.dynamic_range(n):
        b = nisa.register_alloc()
        nisa.register_load(b, lst[0:1, nl.ds(i + 1, 1)])
        acc[...] += nl.load(x.ap([[32, 128], [1, 32]], offset=0, scalar_offset=b * 128))
    nl.store(y, acc)
    return y


def test_block_sparse_reads_its_block_list_at_run_time_with_one_compile():
    x = RNG.uniform(-1, 1, (8 * 128, 32)).astype(np.float32)
    k = neuron.kernel(block_sparse)
    TRACES.clear()
    for ids in ([1, 4, 6], [0, 2, 3, 5, 7]):
        lst = ints((1, 9), [len(ids)] + ids + [0] * (8 - len(ids)))
        want = x.astype(np.float64).reshape(8, 128, 32)[ids].sum(axis=0)
        np.testing.assert_allclose(k(x, lst), want, rtol=1e-5, atol=1e-5)
    assert len(TRACES) == 1
    lst = ints((1, 9), [2, 6, 1] + [0] * 6)
    np.testing.assert_array_equal(three_ways(block_sparse, x, lst), k(x, lst))


# ---- errors: Python messages at the user's line ----------------------------------------------------

def affine_bound_on_register(x):
    r = nisa.register_alloc(2)
    for i in nl.affine_range(r):
        pass


def branch_on_register(x):
    r = nisa.register_alloc(2)
    if r == 0:
        pass


def overlapping_pattern(x):
    t = nl.ndarray((128, 2, 32), nl.float32, buffer=nl.sbuf)
    nisa.memset(t, 0.0)
    nisa.dma_copy(dst=x.ap([[64, 128], [1, 2], [1, 32]]), src=t)  # windows one element apart
    return x


def loop_index_stored_as_register(x):
    t = nl.ndarray((1, 1), nl.int32)
    nl.fori_loop(0, 4, lambda i: nisa.register_store(t, i))


def while_body_returns_nothing(x):
    nl.while_loop(1, lambda r: None)


@pytest.mark.parametrize("fn,rule,text,words", [
    (affine_bound_on_register, "range", "nl.affine_range(r)", "nl.fori_loop"),
    (branch_on_register, "control-flow", "if r == 0", "register"),
    (overlapping_pattern, "access-pattern", "x.ap(", "can only be read"),
    (loop_index_stored_as_register, "register", "register_store(t, i)", "nisa.register_alloc"),
    (while_body_returns_nothing, "register", "nl.while_loop(1", "got None"),
])
@pytest.mark.parametrize("mode", ["native", "eager"])
def test_errors_are_python_at_the_users_line(fn, rule, text, words, mode):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode=mode)(np.zeros((128, 64), np.float32))
    assert e.value.rule == rule, str(e.value)
    assert e.value.line == line_of(fn, text), str(e.value)
    assert words in str(e.value)
    assert "::" not in e.value.message


def test_register_arguments_are_type_checked():
    def k(x):
        nisa.register_load(5, nl.load(x[0:1, 0:1]))

    with pytest.raises(TypeError, match="register_load: expected a register"):
        neuron.kernel(k)(np.zeros((4, 4), np.float32))


# ---- eager mode: registers are Python ints --------------------------------------------------------

def test_eager_registers_hold_values_and_loops_iterate(capsys):
    seen = []

    def k(x, n):
        out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        r = nisa.register_alloc()
        nisa.register_load(r, nl.load(n))
        seen.append(int(r))
        nl.fori_loop(0, r, lambda i: seen.append(int(i)))
        t = nl.ndarray((1, 1), nl.int32)
        nisa.register_store(t, r)
        nl.store(out, t)
        return out

    out = neuron.kernel(k, mode="eager")(np.zeros(4, np.float32), ints((1, 1), [3]))
    assert seen == [3, 0, 1, 2] and out[0, 0] == 3


def scatter_rows(x, rows):
    """Row i of x goes to row rows[i] of out through .ap(scalar_offset=...), as nki-library's
    indexed_flatten writes its rows; an offset outside out skips that copy (oob_mode skip)."""
    n, f = x.shape
    out = nl.ndarray((8, f), x.dtype, buffer=nl.shared_hbm)
    fill = nl.ndarray((8, f), x.dtype, buffer=nl.sbuf)
    nisa.memset(fill, -1.0)
    nisa.dma_copy(dst=out, src=fill)
    r_sb = nl.ndarray((1, n), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r_sb, src=rows)
    for i in range(n):
        t = nl.ndarray((1, f), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i:i + 1, :])
        r = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=r, src=r_sb[0:1, i:i + 1])
        nisa.dma_copy(dst=out.ap([[f, 1], [1, f]], offset=0, scalar_offset=r, indirect_dim=0),
                      src=t, oob_mode=nisa.oob_mode.skip)
    return out


def test_a_dma_copy_moved_out_of_range_by_its_scalar_offset_is_skipped_with_oob_mode_skip():
    x = RNG.standard_normal((5, 16)).astype(np.float32)
    rows = ints((1, 5), [5, -1000000, 2, 8, 7])  # below, and past the end (8 rows)
    want = np.full((8, 16), -1.0, np.float32)
    want[[5, 2, 7]] = x[[0, 2, 4]]
    np.testing.assert_array_equal(three_ways(scatter_rows, x, rows), want)


def scatter_rows_strict(x, rows):
    out = nl.ndarray((8, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    r = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=rows)
    t = nl.load(x)
    nisa.dma_copy(dst=out.ap([[16, 1], [1, 16]], offset=0, scalar_offset=r, indirect_dim=0),
                  src=t)
    return out


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
def test_without_oob_mode_skip_an_out_of_range_scalar_offset_is_an_error(mode):
    x = RNG.standard_normal((1, 16)).astype(np.float32)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(scatter_rows_strict, mode=mode)(x, ints((1, 1), [9]))
    assert info.value.line == line_of(scatter_rows_strict, "scalar_offset=r")


def expert_bias_up_half(bias, expert):
    """nki-library's MoE gate/up projection: the up half (bias[e, 1, 0:512]) of a runtime-chosen
    expert's bias, as 4 rows of 128, through .ap(offset=576, scalar_offset=e). The view starts
    mid-row of its [E * 1152 / 128, 128] storage, so its last storage row overhangs the tensor;
    only the rows a runtime offset actually reaches are checked."""
    out = nl.ndarray((4, 128), bias.dtype, buffer=nl.shared_hbm)
    e = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=e, src=expert)
    t = nl.ndarray((4, 128), bias.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=bias.ap([[128, 4], [1, 128]], offset=576, scalar_offset=e,
                                     indirect_dim=0))
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("e", (0, 3))
def test_a_runtime_offset_view_starting_mid_row_reads_each_experts_rows(e):
    bias = RNG.standard_normal((4, 2, 576)).astype(np.float16)
    got = three_ways(expert_bias_up_half, bias, ints((1, 1), [e]))
    np.testing.assert_array_equal(got, bias[e, 1, 0:512].reshape(4, 128))


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
def test_a_runtime_offset_past_the_last_expert_is_an_error_when_it_runs(mode):
    bias = RNG.standard_normal((4, 2, 576)).astype(np.float16)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(expert_bias_up_half, mode=mode)(bias, ints((1, 1), [4]))
    assert info.value.line == line_of(expert_bias_up_half, "src=bias.ap(")
    print(info.value)


def views_per_step(x):
    """nki-library's output projection: an .ap() view built on every loop step and used only
    on the steps where it fits (h < 7); building the others is no error."""
    out = nl.ndarray((7, 128, 4), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)  # [128, 28]
    for h in nl.affine_range(8):
        v = t.ap([[28, 128], [7, 4]], offset=h)  # h = 7 would walk past the row
        if h < 7:
            nl.store(out[h], nl.copy(v))
    return out


def uses_a_view_past_the_row(x):
    out = nl.ndarray((128, 4), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    v = t.ap([[28, 128], [7, 4]], offset=7)
    nl.store(out, nl.copy(v))
    return out


def tile_sized_by_a_view_past_the_end(x):
    """nki-library's MoE blockwise matmul sizes a tile by block_to_expert.ap(pattern).shape,
    a pattern that walks past the end of the [288] tensor (stride 4 over 128 rows); NKI builds
    it, and the kernel only asks its shape."""
    out = nl.ndarray((128, 2), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.ap(pattern=[[4, 128], [2, 2]], offset=1).shape, dtype=x.dtype,
                   buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[2, 128], [1, 2]], offset=0))
    nisa.dma_copy(dst=out, src=t)
    return out


def copies_through_a_view_past_the_end(x):
    out = nl.ndarray((128, 2), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[4, 128], [2, 2]], offset=1))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_an_ap_past_the_tensors_end_has_a_shape_and_is_an_error_where_it_is_read():
    x = RNG.standard_normal(288).astype(np.float32)
    np.testing.assert_array_equal(three_ways(tile_sized_by_a_view_past_the_end, x),
                                  x[:256].reshape(128, 2))
    for mode in ("native", "simulate", "eager"):
        with pytest.raises(neuron.NeuronError) as info:
            neuron.kernel(copies_through_a_view_past_the_end, mode=mode)(x)
        assert info.value.rule == "access-pattern"
        assert info.value.line == line_of(copies_through_a_view_past_the_end, "x.ap(")


def test_an_ap_view_that_does_not_fit_is_an_error_only_where_it_is_used():
    x = RNG.standard_normal((128, 28)).astype(np.float32)
    got = three_ways(views_per_step, x)
    np.testing.assert_array_equal(got, x.reshape(128, 4, 7).transpose(2, 0, 1))
    for mode in ("native", "simulate", "eager"):
        with pytest.raises(neuron.NeuronError) as info:
            neuron.kernel(uses_a_view_past_the_row, mode=mode)(x)
        assert info.value.rule == "access-pattern"
        assert info.value.line == line_of(uses_a_view_past_the_row, "t.ap(")
