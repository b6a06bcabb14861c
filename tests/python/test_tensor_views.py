# The current API's tensor view methods (NKI_API.md 6.3, python/neuron/views.py): slice, select
# and squeeze_dim are views (reads and writes go through them), the inspection attributes match
# NumPy's strides of the same view, and the views neuron cannot represent on chip (reordered,
# split or merged storage dims) are refused at the user's line; broadcast is a step-0 view;
# view(dtype) of a tile reads its bytes as another dtype. Reshapes of HBM tensors: test_tensor_reshape.py.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

MODES = ("native", "simulate", "eager")
RNG = np.random.default_rng(7)
X = RNG.standard_normal((128, 16)).astype(np.float32)
Y = RNG.standard_normal((4, 128, 8)).astype(np.float32)
Z = RNG.standard_normal((128, 1, 8)).astype(np.float32)


def views_kernel(x, y, z):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, t)
    # a strided slice written through (negative bounds count from the end, as in Python)
    nl.store(out.slice(1, 2, 10, 2), nl.multiply(t.slice(1, -14, -6, 2), 2.0))
    # select on HBM drops the dim; writes through it reach the whole tensor
    out_y = nl.ndarray(y.shape, y.dtype, buffer=nl.shared_hbm)
    for i in range(4):
        nl.store(out_y.select(0, i), nl.load(y.select(0, 3 - i)))
    # select on a free dim of an on-chip tile, written through with an ISA copy
    t3 = nl.load(y.select(0, 0).slice(1, 0, 4))  # [128, 4] of y[0]
    tile = nl.ndarray((128, 2, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(tile.select(1, 0), t3)
    nisa.tensor_copy(tile.select(1, 1), nl.add(tile.select(1, 0), 1.0))
    out_t = nl.ndarray((128, 2, 4), nl.float32, buffer=nl.shared_hbm)
    nl.store(out_t, tile)
    # squeeze_dim of a size-1 dim, read and written
    out_z = nl.ndarray(z.shape, z.dtype, buffer=nl.shared_hbm)
    nl.store(out_z.squeeze_dim(1), nl.load(z.squeeze_dim(-2)))
    return out, out_y, out_t, out_z


@pytest.mark.parametrize("mode", MODES)
def test_views_read_and_write_through_to_the_storage(mode):
    out, out_y, out_t, out_z = neuron.kernel(views_kernel, mode=mode)(X, Y, Z)
    ref = X.copy()
    ref[:, 2:10:2] = X[:, 2:10:2] * 2
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(out_y, np.stack([np.take(Y, 3 - i, axis=0) for i in range(4)]))
    first = np.take(Y, 0, axis=0)[:, 0:4]
    np.testing.assert_array_equal(out_t, np.stack([first, first + 1], axis=1))
    np.testing.assert_array_equal(out_z, Z)


# ---- inspection: strides, offset, get_pattern(), is_contiguous() against NumPy ---------------

VIEWS = [  # (method calls on the 3-D HBM tensor, the same view in NumPy)
    (lambda t: t, lambda a: a),
    (lambda t: t.slice(2, 2, 10, 2), lambda a: a[:, :, 2:10:2]),
    (lambda t: t.select(0, 3), lambda a: a[3]),
    (lambda t: t.select(0, 1).slice(0, 64, 128), lambda a: a[1, 64:128]),
    (lambda t: t.slice(1, 0, 128, 4).select(2, 5), lambda a: a[:, ::4, 5]),
]


def test_inspection_matches_numpy_strides():
    a = np.zeros((4, 128, 16), np.float32)
    seen = {}

    def k(x):
        for mode_views in VIEWS:
            v = mode_views[0](x)
            seen.setdefault(mode, []).append(
                (tuple(v.shape), v.strides, v.offset, v.get_pattern(), v.is_contiguous(),
                 v.size, v.ndim))
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        v = x.select(0, 2).slice(1, 1, 16, 4)  # .ap(get_pattern(), offset) is the same view
        nl.store(out, nl.load(v.ap(v.get_pattern(), offset=v.offset)))
        return out

    for mode in ("native", "eager"):
        out = neuron.kernel(k, mode=mode)(np.arange(a.size, dtype=np.float32).reshape(a.shape))
        np.testing.assert_array_equal(out, np.arange(a.size).reshape(a.shape)[2, :, 1:16:4])
    items = a.itemsize
    for mode in ("native", "eager"):
        for got, (_, numpy_view) in zip(seen[mode], VIEWS):
            v = numpy_view(a)
            strides = tuple(s // items for s in v.strides)
            offset = (v.__array_interface__["data"][0] - a.__array_interface__["data"][0]) // items
            assert got == (v.shape, strides, offset, [list(p) for p in zip(strides, v.shape)],
                           v.flags.c_contiguous, v.size, v.ndim), mode


def test_offset_of_a_loop_indexed_or_program_id_view_is_a_number():
    offsets = []

    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):  # the loop unrolls: the offset is a number
            v = x.slice(0, i * 64, (i + 1) * 64)
            offsets.append(v.offset)
            nl.store(out.slice(0, i * 64, (i + 1) * 64), nl.load(v))
        return out

    def by_program(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        v = x.slice(0, nl.program_id(0) * 64, (nl.program_id(0) + 1) * 64)
        offsets.append(v.offset)  # a number: each program is traced with its id as an int
        nl.store(out.slice(0, v.offset // 16, v.offset // 16 + 64), nl.load(v))
        return out

    for mode in ("native", "eager"):
        offsets.clear()
        np.testing.assert_array_equal(neuron.kernel(k, mode=mode)(X), X)
        assert offsets[-2:] == [0, 64 * 16]
        offsets.clear()
        np.testing.assert_array_equal(neuron.kernel(by_program, mode=mode)[2](X), X)
        assert offsets[-2:] == [0, 64 * 16]


# ---- broadcast: a step-0 view for reading ------------------------------------------------------

def broadcasts(col, row, y):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    c = nl.load(col)                                   # [128, 1] on chip
    t = nl.ndarray((128, 64), nl.float32)
    nisa.tensor_tensor(t, c.broadcast(1, 64), nl.load(y), nl.multiply)
    nl.store(out, t)
    nl.store(out2, nl.load(row.broadcast(0, 128)) + c.broadcast(-1, 64))  # HBM dim 0 too
    return out, out2


def test_broadcast_repeats_a_size_one_dim():
    col = np.arange(128, dtype=np.float32).reshape(128, 1)
    row = np.arange(64, dtype=np.float32).reshape(1, 64) * 10
    y = np.random.default_rng(3).uniform(-1, 1, (128, 64)).astype(np.float32)
    for mode in ("native", "simulate", "eager"):
        a, b = neuron.kernel(broadcasts, mode=mode)(col, row, y)
        np.testing.assert_array_equal(a, np.broadcast_to(col, (128, 64)) * y)
        np.testing.assert_array_equal(b, np.broadcast_to(row, (128, 64)) + col)


# ---- unchanged views are the view itself; the others are refused ------------------------------

def test_calls_that_change_nothing_return_the_view():
    def k(x):
        t = nl.load(x)
        for same in (t.permute((0, 1)), t.reshape((128, 16)), t.reshape((128, -1)),
                     t.reshape_dim(1, (-1,)), t.flatten_dims(1, 1), t.view(nl.float32),
                     t.rearrange("p f", "p f"), t.broadcast(1, 16)):
            assert same is t
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    for mode in ("native", "eager"):
        np.testing.assert_array_equal(neuron.kernel(k, mode=mode)(X), X)


REFUSED = [  # each on its own line: the error points at it
    ("permute", lambda t: t.permute((1, 0))),
    ("flatten_dims", lambda t: t.flatten_dims(0, 1)),
    ("reshape", lambda t: t.reshape((64, 32))),
    ("rearrange", lambda t: t.rearrange("p (a b)", "p (b a)", {"a": 4})),
]


@pytest.mark.parametrize("method,call", REFUSED,
                         ids=[f"{m}{i}" for i, (m, _) in enumerate(REFUSED)])
@pytest.mark.parametrize("mode", ("native", "eager"))
def test_views_neuron_cannot_represent_are_refused_at_the_users_line(method, call, mode):
    def k(x):
        call(nl.load(x))

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(k, mode=mode)(X)
    assert e.value.rule == "unsupported" and e.value.line == call.__code__.co_firstlineno
    assert f"{method}(" in e.value.message
    assert "walk each storage dim once" in e.value.message


# ---- view(dtype) of a tile: its bytes read as another dtype, by any instruction ---------------

def bit_fields(x, h):
    """Exponent bits of fp32 values through an int32 view; the same bytes stored as bf16 halves;
    a write through an int32 view of part of a tile (clearing sign bits) seen by fp32 reads; a
    bf16 tile's pairs read as fp32 words."""
    exps = nl.ndarray(x.shape, nl.int32, buffer=nl.shared_hbm)
    halves = nl.ndarray((x.shape[0], 2 * x.shape[1]), nl.bfloat16, buffer=nl.shared_hbm)
    absd = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    words = nl.ndarray((h.shape[0], h.shape[1] // 2), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    bits = t.view(nl.int32)
    assert bits.dtype == nl.int32 and tuple(bits.shape) == tuple(x.shape)
    e = nl.ndarray(x.shape, nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=e, data=bits, op0=nl.right_shift, operand0=23,
                       op1=nl.bitwise_and, operand1=255)
    nl.store(exps, e)
    nl.store(halves, t.view(nl.bfloat16))
    part = t[:, 8:24].view(nl.int32)                 # a sub-view: its own offset
    nisa.tensor_scalar(dst=part, data=part, op0=nl.bitwise_and, operand0=0x7FFFFFFF)
    nl.store(absd, t)
    nl.store(words, nl.load(h).view(nl.float32))
    return exps, halves, absd, words


def test_view_dtype_of_a_tile_reads_and_writes_its_bytes():
    x = (np.random.default_rng(0).standard_normal((128, 32)) * 100).astype(np.float32)
    h = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)
    import ml_dtypes
    hb = h.astype(ml_dtypes.bfloat16)
    want_abs = x.copy()
    want_abs[:, 8:24] = np.abs(x[:, 8:24])
    for mode in ("native", "simulate", "eager"):
        exps, halves, absd, words = neuron.kernel(bit_fields, mode=mode)(x, hb)
        np.testing.assert_array_equal(exps, (x.view(np.int32) >> 23) & 255, err_msg=mode)
        np.testing.assert_array_equal(np.asarray(halves).view(np.uint16),
                                      x.view(np.uint16), err_msg=mode)
        np.testing.assert_array_equal(absd, want_abs, err_msg=mode)
        np.testing.assert_array_equal(np.asarray(words).view(np.uint32),
                                      hb.view(np.uint32), err_msg=mode)


def test_view_dtype_of_a_tile_needs_whole_elements():
    def odd_row(x):  # a partition of 3 bf16 is 6 bytes: no whole fp32 elements
        return nl.load(x).view(nl.float32)

    def odd_start(x):  # starts at bf16 element 1: half way into an fp32 word
        return nl.load(x)[:, 1:5].view(nl.float32)

    import ml_dtypes
    for fn, shape, text in ((odd_row, (8, 3), "contiguous and hold whole"),
                            (odd_start, (8, 8), "contiguous and hold whole")):
        x = np.zeros(shape, ml_dtypes.bfloat16)
        for mode in ("native", "eager"):
            with pytest.raises(neuron.NeuronError) as e:
                neuron.kernel(fn, mode=mode)(x)
            assert e.value.rule == "access-pattern" and text in e.value.message, e.value.message
            assert e.value.line == fn.__code__.co_firstlineno + 1


def regrouped_tiles(x):
    """On-chip reshapes that keep the partitions and regroup a dense run of each partition's
    free elements: views of the tile's storage seen with the new shape, taken by every
    instruction, read and written through."""
    t = nl.load(x)                                   # [128, 16]
    split = t.reshape_dim(1, (4, 4))                 # [128, 4, 4]
    grown = t.expand_dim(1)                          # [128, 1, 16]
    part = t.slice(1, 4, 12).reshape((128, 2, 4))    # a slice's dense run, regrouped
    nisa.tensor_scalar(part, part, nl.multiply, 3.0)  # writes land in t[:, 4:12]
    tile = nl.ndarray((128, 2, 8), nl.float32, buffer=nl.sbuf)
    merged = tile.flatten_dims(1, 2)                 # [128, 16] over a 3-D tile
    nisa.activation(merged, nl.exp, t)               # an ISA destination
    s = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(s, nl.add, split, axis=2)     # reduce the inner split dim
    out = nl.ndarray((4, 128, 16), nl.float32, buffer=nl.shared_hbm)
    nl.store(out[0], t)
    nl.store(out[1].reshape((128, 4, 4)), split)
    nl.store(out[2], grown.reshape((128, 16)))
    nl.store(out[3], tile.reshape((128, 16)))
    sums = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
    nl.store(sums, s)
    return out, sums, tuple(split.get_pattern()), tuple(merged.strides)


@pytest.mark.parametrize("mode", MODES)
def test_on_chip_reshapes_that_regroup_free_elements_are_views(mode):
    out, sums = neuron.kernel(lambda x: regrouped_tiles(x)[:2], mode=mode)(X)
    t = X.copy()
    t[:, 4:12] *= 3
    np.testing.assert_array_equal(out[0], t)
    np.testing.assert_array_equal(out[1], t)  # split then stored through a split HBM view
    np.testing.assert_array_equal(out[2], t)
    np.testing.assert_allclose(out[3], np.exp(t.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(sums, t.reshape(128, 4, 4).sum(axis=2), rtol=1e-6, atol=1e-5)


def test_regrouped_views_inspect_like_numpy():
    seen = []

    def k(x):
        out, sums, pattern, strides = regrouped_tiles(x)
        seen.append((pattern, strides))
        return out, sums
    neuron.kernel(k)(X)
    pattern, strides = seen[0]
    # the split view of a [128, 16] tile: its partitions, then 4 rows of 4 (NumPy's strides of
    # X.reshape(128, 4, 4), in elements)
    assert [list(p) for p in pattern] == [[16, 128], [4, 4], [1, 4]]
    assert list(strides) == [16, 1]  # the merged view of a [128, 2, 8] tile


def permuted_views(x, y):
    """permute() keeps the walk and reorders its dims (a transposing view): a tile's free dims
    after a split, reduced over the now-last axis (nki-library's cascaded max), and an HBM
    tensor's dims moved in one DMA; writes through a permuted view land in the tile."""
    t = nl.load(x)                                              # [128, 24]
    v = t.reshape_dim(1, (6, 4)).permute((0, 2, 1))             # [128, 4, 6]
    m = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(m, nl.maximum, v, axis=2)
    u = nl.ndarray((128, 4, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(u, y.permute((1, 0, 2)))                      # [4, 128, 8] -> [128, 4, 8]
    w = nl.ndarray((128, 8, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(w.permute((0, 2, 1)), u)                   # written transposed
    out_m = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
    out_w = nl.ndarray((128, 8, 4), nl.float32, buffer=nl.shared_hbm)
    nl.store(out_m, m)
    nl.store(out_w, w)
    return out_m, out_w, tuple(v.shape), tuple(v.strides)


@pytest.mark.parametrize("mode", MODES)
def test_permute_is_a_view_with_its_dims_reordered(mode):
    x = RNG.standard_normal((128, 24)).astype(np.float32)
    seen = []

    def k(x, y):
        out_m, out_w, shape, strides = permuted_views(x, y)
        seen.append((shape, strides))
        return out_m, out_w
    out_m, out_w = neuron.kernel(k, mode=mode)(x, Y)
    np.testing.assert_array_equal(out_m, x.reshape(128, 6, 4).max(axis=1))
    np.testing.assert_array_equal(out_w, Y.transpose(1, 2, 0))
    shape, strides = seen[0]
    view = x.reshape(128, 6, 4).transpose(0, 2, 1)  # NumPy's strides, in elements
    assert list(shape) == list(view.shape)
    assert list(strides) == [s // 4 for s in view.strides]


def rearranged_views(x, y, w):
    """rearrange() splits, reorders and merges dims as views: a tile's free dims split and
    swapped (string pattern), an HBM tensor's dims moved in one DMA (tuple pattern), a merge of
    dims adjacent in storage, and writes through a rearranged tile view and HBM view."""
    t = nl.load(x)                                                     # [128, 24]
    v = t.rearrange("p (h w)", "p w h", {"h": 6})                      # [128, 4, 6]
    m = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(m, nl.maximum, v, axis=2)
    u = nl.ndarray((128, 4, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(u, y.rearrange(("a", "p", "f"), ("p", "a", "f")))    # [4, 128, 8] moved
    g = nl.ndarray((128, 8, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(g.rearrange("p f a", "p a f"), u)                 # written transposed
    merged = nl.load(w.rearrange("b s h", "(b s) h"))                  # [2, 64, 8] -> [128, 8]
    out_m = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
    out_g = nl.ndarray((128, 8, 4), nl.float32, buffer=nl.shared_hbm)
    out_w = nl.ndarray((8, 128), nl.float32, buffer=nl.shared_hbm)
    nl.store(out_m, m)
    nl.store(out_g, g)
    nl.store(out_w.rearrange("h (b s)", "(b s) h", {"s": 64}), merged.rearrange(
        ("p", "h"), ("p", "h")))                                       # written transposed
    return out_m, out_g, out_w, tuple(v.shape), tuple(v.strides)


@pytest.mark.parametrize("mode", MODES)
def test_rearrange_is_a_view_split_reordered_and_merged(mode):
    x = RNG.standard_normal((128, 24)).astype(np.float32)
    w = RNG.standard_normal((2, 64, 8)).astype(np.float32)
    seen = []

    def k(x, y, w):
        out_m, out_g, out_w, shape, strides = rearranged_views(x, y, w)
        seen.append((shape, strides))
        return out_m, out_g, out_w
    out_m, out_g, out_w = neuron.kernel(k, mode=mode)(x, Y, w)
    view = x.reshape(128, 6, 4).transpose(0, 2, 1)  # NumPy's einops equivalent
    np.testing.assert_array_equal(out_m, view.max(axis=2))
    np.testing.assert_array_equal(out_g, Y.transpose(1, 2, 0))
    np.testing.assert_array_equal(out_w, w.reshape(128, 8).T)
    shape, strides = seen[0]
    assert list(shape) == list(view.shape)
    assert list(strides) == [s // 4 for s in view.strides]


REARRANGE_ERRORS = [  # each on its own line: the error points at it
    (lambda t: t.rearrange("p f", "f p"), "unsupported", "partition dim"),
    (lambda t: t.rearrange("(p q) f", "p q f", {"q": 2}), "unsupported", "partition dim"),
    (lambda t: t.rearrange("p f", "p"), "index", "once in src_pattern and once"),
    (lambda t: t.rearrange("p f g", "p f g"), "shape", "names 3 dims"),
    (lambda t: t.rearrange("p (a b)", "p a b", {"a": 5}), "shape", "cannot split"),
    (lambda t: t.rearrange("p (a b)", "p a b"), "shape", "all but one name"),
    (lambda t: t.rearrange("p (a b", "p a b"), "index", "parenthesis open"),
    (lambda t: t.rearrange(("p", 3), ("p",)), "index", "neither a dim name"),
]


@pytest.mark.parametrize("case", range(len(REARRANGE_ERRORS)))
@pytest.mark.parametrize("mode", ("native", "eager"))
def test_rearrange_errors_name_the_rule_and_the_line(case, mode):
    call, rule, text = REARRANGE_ERRORS[case]

    def k(x):
        call(nl.load(x))

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(k, mode=mode)(X)
    assert e.value.rule == rule and e.value.line == call.__code__.co_firstlineno
    assert text in e.value.message and "rearrange(" in e.value.message


@pytest.mark.parametrize("mode", MODES)
def test_select_with_a_runtime_tensor_index(mode):
    """select(dim, t) with a one-element tensor t (NKI's dynamic select): the index is read at
    run time, so one compiled kernel serves every value; on HBM and on a tile's free dim."""
    def k(y, idx):
        i = nl.load(idx)                                   # [1, 1] int32, known at run time
        row = nl.load(y.select(0, i))                      # y[i] -> [128, 8]
        tile = nl.load(y.rearrange("a p f", "p a f"))      # [128, 4, 8]
        col = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(col, tile.select(1, i))           # tile[:, i]
        out = nl.ndarray((2, 128, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out.select(0, 0), row)
        nl.store(out.select(0, 1), col)
        return out

    kern = neuron.kernel(k, mode=mode)
    for i in (0, 3, 1):
        out = kern(Y, np.array([[i]], np.int32))
        np.testing.assert_array_equal(out[0], Y[i])
        np.testing.assert_array_equal(out[1], Y[i])


def test_select_with_a_tensor_index_needs_one_element():
    def k(y, idx):
        nl.load(y.select(0, nl.load(idx)))

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(k, mode="native")(Y, np.zeros((1, 2), np.int32))
    assert e.value.rule == "index" and "one element" in e.value.message


def test_view_rules_of_on_chip_tiles():
    cases = [
        (lambda t: t.select(0, 3), "partition dim"),
        (lambda t: t.squeeze_dim(1), "has size 16, not 1"),
        (lambda t: t.select(1, 0).squeeze_dim(1), "keep at least 2"),
        (lambda t: t.broadcast(0, 4), "only a size-1 dim"),
    ]
    for call, text in cases:
        for mode in ("native", "eager"):
            def k(x):
                call(nl.load(x))
            with pytest.raises(neuron.NeuronError) as e:
                neuron.kernel(k, mode=mode)(X)
            assert e.value.rule == "index" and text in e.value.message, e.value.message
            assert e.value.line == call.__code__.co_firstlineno


# ---- vector_select: rows chosen at run time (an indirect DMA operand) --------------------------

def gather_scatter_rows(x, idx):
    out = nl.ndarray((8, 16), nl.float32, buffer=nl.shared_hbm)
    back = nl.ndarray((40, 16), nl.float32, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    v = x.vector_select(0, rows)
    assert v.is_indirect() and not x.is_indirect()
    t = nl.load(v)
    nl.store(out, t)
    nl.store(back, nl.load(x))  # then 8 of its rows overwritten at run time
    nl.store(back.vector_select(0, rows), t * 2.0)
    return out, back


def test_vector_select_reads_and_writes_rows_chosen_at_run_time():
    x = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)
    idx = np.array([[3], [0], [39], [7], [11], [12], [1], [20]], np.int32)
    want_back = x.copy()
    want_back[idx[:, 0]] = x[idx[:, 0]] * 2
    for mode in ("native", "simulate", "eager"):
        out, back = neuron.kernel(gather_scatter_rows, mode=mode)(x, idx)
        np.testing.assert_array_equal(out, x[idx[:, 0]])
        np.testing.assert_array_equal(back, want_back)


def strided_rows(x, idx):
    out = nl.ndarray((8, 16), nl.float32, buffer=nl.shared_hbm)
    back = nl.ndarray((40, 16), nl.float32, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    t = nl.load(x[3:40:3].vector_select(0, rows))  # index i is row 3 + 3 * i
    nl.store(out, t)
    nl.store(back, nl.load(x))
    nl.store(back[1:40:2].vector_select(0, rows), t * 2.0)  # row 1 + 2 * i
    return out, back


def test_vector_select_of_a_strided_slice_steps_through_its_rows():
    x = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)
    idx = np.array([[0], [12], [5], [1], [9], [2], [11], [4]], np.int32)
    want_back = x.copy()
    want_back[1 + 2 * idx[:, 0]] = x[3 + 3 * idx[:, 0]] * 2
    for mode in ("native", "simulate", "eager"):
        out, back = neuron.kernel(strided_rows, mode=mode)(x, idx)
        np.testing.assert_array_equal(out, x[3 + 3 * idx[:, 0]], err_msg=mode)
        np.testing.assert_array_equal(back, want_back, err_msg=mode)
    # x[3:40:3] has 13 rows: index 13 would read row 42 of 40, a fault in every mode.
    for mode in ("native", "simulate"):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(strided_rows, mode=mode)(x, np.full((8, 1), 13, np.int32))
        assert "13" in e.value.message, e.value.message


def test_vector_select_rules():
    def not_dim0(x, idx):
        return nl.load(x.vector_select(1, nl.load(idx)))

    def on_chip(x, idx):
        return nl.load(x).vector_select(0, nl.load(idx))

    idx = np.zeros((8, 1), np.int32)
    for fn, rule, text in ((not_dim0, "unsupported", "only dim 0"),
                           (on_chip, "indirect-dma", "HBM tensor")):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(fn)(np.zeros((40, 16), np.float32), idx)
        assert e.value.rule == rule and text in e.value.message


def uneven_shards(x):
    # nki-library's sharding: positions // cores per core, the last core takes the rest; with
    # fewer rows than cores, core 0's shard is nl.ds(0, 0), a view no instruction touches.
    rows = x.shape[0]
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    cores, core = nl.num_programs(0), nl.program_id(0)
    per = rows // cores
    mine = rows - core * per if core == cores - 1 else per
    src, dst = x[nl.ds(core * per, mine)], out[nl.ds(core * per, mine)]
    empty = x[rows:rows]  # a Python slice may be empty too
    for r in range(mine):
        nl.store(dst[r:r + 1], nl.multiply(nl.load(src[r:r + 1]), 2.0))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_an_empty_slice_is_a_view_until_an_instruction_uses_it(mode):
    x = RNG.standard_normal((1, 16)).astype(np.float32)
    got = neuron.kernel(uneven_shards, mode=mode)[2](x)
    np.testing.assert_array_equal(got, 2 * x)


def reads_an_empty_slice(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:0], src=x[nl.ds(4, 0)])
    return out


@pytest.mark.parametrize("mode", ("native", "eager"))
def test_an_instruction_on_an_empty_slice_is_an_error(mode):
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(reads_an_empty_slice, mode=mode)(X)
    assert "empty" in info.value.message and "dma_copy" in info.value.message


def ds_width_from_index_arithmetic(x):
    """nki-library's QKV projection: a tile width computed from loop indices whose terms cancel
    (end - start with both in i) is the number it equals."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        start, end = i * 32, (i + 1) * 32
        t = nl.load(x[:, nl.ds(start, end - start)])
        nl.store(out[:, nl.ds(start, end - start)], nl.multiply(t, 3.0))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_ds_size_whose_loop_terms_cancel_is_its_number(mode):
    x = np.arange(127 * 64, dtype=np.float32).reshape(127, 64)
    np.testing.assert_array_equal(neuron.kernel(ds_width_from_index_arithmetic, mode=mode)(x),
                                  x * 3)
