# Conventions of production kernels written in the current NKI API (the style of aws-neuron's
# nki-library), each in a small kernel of our own checked against NumPy: output arguments,
# kernels calling kernels, program ids used as Python values, configuration objects, the
# nc_matmul keywords, dtypes compared by name, and the modules those kernels import.
import dataclasses

import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.compat

nki = neuron.compat.install()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from helpers import line_of  # noqa: E402

RNG = np.random.default_rng(43)
MODES = ("native", "simulate", "eager")


def test_tile_size_has_the_documented_constants_in_both_generations():
    # NKI_API.md 2.3 (layernorm-style kernels size bn_stats by bn_stats_fmax); the current API
    # lacked all but five.
    import neuronxcc.nki.language as legacy
    for ts in (nl.tile_size, legacy.tile_size):
        assert (ts.pmax, ts.psum_fmax, ts.psum_bank_fmax, ts.psum_bank_fmax_bytes,
                ts.psum_num_banks, ts.gemm_stationary_fmax, ts.gemm_moving_fmax,
                ts.bn_stats_fmax, ts.psum_min_align, ts.sbuf_min_align) == \
            (128, 512, 512, 2048, 8, 128, 512, 512, 4, 1)
        # trn2's usable SBUF per partition (NKI_API.md 2.1), in bytes, fp32 elements, in all
        assert ts.sbuf_fmax_bytes == ts.total_available_sbuf_size == 212984
        assert ts.sbuf_fmax == 212984 // 4 and ts.sbuf_size_bytes == 128 * 212984


def test_the_modules_and_names_production_kernels_import():
    import nki.collectives as ncc
    import nki.isa.constants as constants
    from nki.collectives import ReplicaGroup
    from nki.language import NKIObject

    assert constants.oob_mode is nisa.oob_mode and issubclass(NKIObject, object)
    assert isinstance(nl.bfloat16, nki.dtype) and nki.tensor is nl.tensor
    assert nl.bool is nl.bool_ and list(nl.range(3)) == [0, 1, 2]
    assert ReplicaGroup([[0, 1]]).groups == ((0, 1),)
    assert callable(ncc.all_gather) and callable(nisa.core_barrier) and callable(nisa.sendrecv)
    # str() of a dtype is its NumPy-style name, as kernels compare it (`str(dtype) == "bool"`)
    assert [str(d) for d in (nl.bfloat16, nl.float32, nl.bool_)] == ["bfloat16", "float32",
                                                                      "bool"]


# ---- output arguments and kernels calling kernels ----------------------------------------------

def writes_output(a, out):
    nl.store(out, nl.multiply(nl.load(a), 2.0))


def writes_and_returns(a, out):
    t = nl.load(a)
    nl.store(out, nl.multiply(t, 2.0))
    res = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(res, nl.add(t, 1.0))
    return out, res


@pytest.mark.parametrize("mode", MODES)
def test_output_arguments_are_written_and_returned_as_the_callers_array(mode):
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    out = np.zeros_like(a)
    assert neuron.kernel(writes_output, mode=mode)(a, out) is None
    np.testing.assert_array_equal(out, 2 * a)
    wide = np.zeros((128, 16), np.float32)
    strided = wide[:, ::2]  # not contiguous: copied in, written back
    k = neuron.kernel(writes_and_returns, mode=mode)
    for _ in range(2):  # the second call takes the cached path
        got, res = k(a, strided)
        assert got is strided
        np.testing.assert_array_equal(wide[:, ::2], 2 * a)
        np.testing.assert_array_equal(wide[:, 1::2], 0)
        np.testing.assert_array_equal(res, a + 1)


def writes_nothing(a):
    nl.load(a)


def returns_its_input(dummy, shape, buffer):
    # nki-library's trace-time tests: allocate in the buffer given as a parameter, check
    # shapes, and return an input as the kernel's output (an alias NKI allows).
    t = nl.ndarray(shape, nl.float32, buffer=buffer)
    assert tuple(t.shape) == shape and t.buffer == buffer
    return dummy


@pytest.mark.parametrize("mode", ["native", "simulate", "eager"])
def test_a_kernel_may_return_an_input_it_does_not_write(mode):
    d = np.arange(6, dtype=np.float32)
    k = neuron.kernel(returns_its_input, mode=mode)
    for buffer in (nl.sbuf, nl.psum):
        out = k(d, (128, 4), buffer)
        assert out is d
        np.testing.assert_array_equal(out, np.arange(6))


def test_a_kernel_that_neither_returns_nor_writes_an_input_is_refused():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(writes_nothing)(np.zeros((128, 4), np.float32))
    assert e.value.rule == "kernel-output" and "writes none of its inputs" in e.value.message


@nki.jit
def inner_scale(a, factor: float):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), factor))
    return out


def outer_wrapper(a):
    return inner_scale(a, 3.0)  # a jit kernel called while tracing: inlined, as in NKI


@pytest.mark.parametrize("mode", MODES)
def test_a_jit_kernel_called_from_a_kernel_is_inlined(mode):
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(neuron.kernel(outer_wrapper, mode=mode)(a), 3 * a)


def test_a_jit_kernel_exposes_its_function_and_reads_nki_simulator_when_called(monkeypatch):
    # nki-autotune wraps kernels by their .func; NKI_SIMULATOR set after the decorator ran (a
    # test harness's fixture) still picks the simulator, for the kernel and its launches.
    assert inner_scale.func is inner_scale.__wrapped__
    monkeypatch.delenv("NKI_SIMULATOR", raising=False)
    assert inner_scale.mode == "native" and inner_scale[2].mode == "native"
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    assert inner_scale.mode == "simulate" and inner_scale[2].mode == "simulate"
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(inner_scale(a, 2.0), 2 * a)

    @nki.jit
    def outer(a):  # the wrapping nki-autotune does: a jit kernel calling another's function
        return inner_scale.func(a, 5.0)
    np.testing.assert_array_equal(outer(a), 5 * a)


def test_nki_jit_of_a_jit_kernel_is_the_same_kernel():
    # (an internal AttributeError: the second jit traced the first's wrapper object)
    twice = nki.jit(inner_scale)
    assert twice.func is inner_scale.func
    a = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(twice(a, 3.0), 3 * a)


def packed_index_transpose(inp):
    # nki-library's topk_reduce: the int32 token index packed into each bf16 row's last two
    # columns, read through .ap(dtype=nl.int32) and transposed by DMA into one row
    tk, hp = inp.shape
    out = nl.ndarray((1, tk), dtype=nl.int32, buffer=nl.shared_hbm)
    idx = nl.ndarray((1, tk), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_transpose(
        src=inp.ap(pattern=[[hp // 2, tk], [1, 1], [1, 1], [1, 1]], offset=hp // 2 - 1,
                   dtype=nl.int32),
        dst=idx.ap(pattern=[[tk, 1], [1, 1], [1, 1], [1, tk]], offset=0))
    nisa.dma_copy(dst=out, src=idx)
    return out


def into_packed_row(inp):
    # the other way: int32 indices transposed into a bf16 row read as int32
    tk, hp = inp.shape
    out = nl.ndarray((1, 2 * tk), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    row = nl.ndarray((1, 2 * tk), dtype=nl.bfloat16, buffer=nl.sbuf)
    col = nl.ndarray((tk, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=col, src=inp.ap(pattern=[[hp // 2, tk], [1, 1]], offset=hp // 2 - 1,
                                      dtype=nl.int32))
    nisa.dma_transpose(src=col, dst=row.ap(pattern=[[2 * tk, 1], [1, tk]], offset=0,
                                           dtype=nl.int32))
    nisa.dma_copy(dst=out, src=row)
    return out


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_dma_transpose_of_a_reinterpreting_view(mode):
    # (a TypeError: the transpose subscripted the view)
    x = RNG.standard_normal((8, 6)).astype(ml_dtypes.bfloat16)
    ids = np.arange(8, dtype=np.int32) * 3 + 1
    x[:, 4:] = ids.reshape(8, 1).view(ml_dtypes.bfloat16)
    got = neuron.kernel(packed_index_transpose, mode=mode)(x)
    np.testing.assert_array_equal(got, ids.reshape(1, 8))
    got = neuron.kernel(into_packed_row, mode=mode)(x)
    np.testing.assert_array_equal(np.asarray(got).view(np.int32), ids.reshape(1, 8))


# ---- program ids and grid sizes as Python values -----------------------------------------------

def sharded(x, out):
    # nki-library's sharding helpers: n_prgs and prg_id as ints, the work split by them
    grid_ndim = nl.program_ndim()
    n_prgs, prg_id = (nl.num_programs(0), nl.program_id(0)) if grid_ndim != 0 else (1, 0)
    assert n_prgs >= 1
    rows = x.shape[0] // n_prgs
    start = prg_id * rows
    t = nl.load(x[start:start + rows, :])
    if prg_id == n_prgs - 1:  # the last shard also adds one
        t = nl.add(t, 1.0)
    nl.store(out[start:start + rows, :], t)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_program_ids_and_grid_sizes_are_python_values_when_needed(mode):
    x = RNG.standard_normal((256, 8)).astype(np.float32)
    k = neuron.kernel(sharded, mode=mode)
    for lnc in (2, 4):
        out = np.zeros_like(x)
        k[lnc](x, out)
        ref = x.copy()
        ref[256 - 256 // lnc:] += 1
        np.testing.assert_array_equal(out, ref)
    out = np.zeros_like(x)
    nki.simulator.simulate_kernel(sharded, (x, out), {}, 2)
    np.testing.assert_array_equal(out[128:], x[128:] + 1)


def allocates_per_program(x):
    if nl.program_id(0) == 0:
        return nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((64, 4), x.dtype, buffer=nl.shared_hbm)
    return out


def test_programs_traced_one_by_one_must_allocate_the_same_outputs():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(allocates_per_program)[2](np.zeros((128, 4), np.float32))
    assert e.value.rule == "kernel-output" and "the first program allocated" in e.value.message
    assert e.value.line == line_of(allocates_per_program, "out = nl.ndarray((64, 4)")


# ---- configuration objects and nc_matmul's keywords --------------------------------------------

@dataclasses.dataclass
class Config(nl.NKIObject):
    scale: float
    tiles: dict = dataclasses.field(default_factory=dict)


def configured(x, cfg: Config):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, address=(0, 0))
    nl.store(out, nl.multiply(nl.load(x), cfg.scale * cfg.tiles.get("extra", 1)))
    return out


def test_configuration_objects_with_dict_fields_are_compile_time_parameters():
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    k = neuron.kernel(configured)
    np.testing.assert_array_equal(k(x, Config(2.0)), 2 * x)
    np.testing.assert_array_equal(k(x, Config(2.0, {"extra": 3})), 6 * x)  # a new key


def double_row(a, b):
    out = nl.ndarray((64, 96), nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(s, a)
    m = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(m, b)
    p = nl.ndarray((64, 96), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(p, s, m, perf_mode=nisa.matmul_perf_mode.double_row,
                   tile_position=(0, 0), tile_size=(128, 128))
    r = nl.ndarray((64, 96), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(r, p)
    nisa.dma_copy(out, r)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_double_row_matmul_sums_over_the_row_pairs(mode):
    a = RNG.standard_normal((128, 2, 64)).astype(ml_dtypes.float8_e5m2)
    b = RNG.standard_normal((128, 2, 96)).astype(ml_dtypes.float8_e5m2)
    ref = np.einsum("kjm,kjn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(neuron.kernel(double_row, mode=mode)(a, b), ref, rtol=1e-6,
                               atol=1e-5)
    with pytest.raises(neuron.NeuronError) as e:  # bf16 operands: FP8 only
        neuron.kernel(double_row, mode=mode)(a.astype(ml_dtypes.bfloat16),
                                             b.astype(ml_dtypes.bfloat16))
    assert e.value.rule == "matmul-dtype"


def pe_transpose(a, tile_size):
    out = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(s, a)
    p = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.psum)
    nisa.nc_matmul(p, s, s, is_transpose=True, is_moving_onezero=True,
                   tile_position=(0, 0) if tile_size else (), tile_size=tile_size)
    r = nl.ndarray(p.shape, a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(r, p)
    nisa.dma_copy(out, r)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_is_transpose_is_the_exact_transpose_and_pe_tiles_are_checked(mode):
    a = RNG.standard_normal((128, 64)).astype(np.float32)
    k = neuron.kernel(pe_transpose, mode=mode)
    np.testing.assert_array_equal(k(a, ()), a.T)
    np.testing.assert_array_equal(k(a, (128, 64)), a.T)
    with pytest.raises(neuron.NeuronError) as e:
        k(a, (128, 48))
    assert e.value.rule == "matmul-shape" and "multiples of 32" in e.value.message


class Shape(nl.NKIObject):  # no @dataclass and no __init__: fields by keyword, as in NKI
    rows: int
    shards: int = 1
    later: int  # set after construction (or never)


def divided(x, out, shape: Shape):
    n, pid = nl.num_programs(0), nl.program_id(0)
    per, rest = divmod(shape.rows, n)  # Python arithmetic on the grid's size
    start = pid * per
    t = nl.ndarray((per, x.shape[1]), x.dtype, buffer=nl.sbuf, name=None)
    nisa.dma_copy(t, x[start:start + per, :])
    r = nl.ndarray(t.shape, nl.float32, buffer=nl.sbuf, name=None)
    s = nl.ndarray((per, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(r, nl.copy, t, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(r, nl.copy, t, reduce_res=s, reduce_cmd=nisa.reduce_cmd.idle)  # s kept
    nisa.tensor_scalar(r, r, nl.add, s)
    nisa.dma_copy(out[start:start + per, :], r)
    assert rest == 0
    return out


@pytest.mark.parametrize("mode", MODES)
def test_config_classes_divmod_of_the_grid_and_activation_reduce_cmd(mode):
    x = RNG.standard_normal((256, 8)).astype(np.float32)
    out = np.zeros_like(x)
    neuron.kernel(divided, mode=mode)[2](x, out, Shape(rows=256))
    np.testing.assert_allclose(out, x + x.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-6)
    assert Shape(rows=4) == Shape(4) and Shape(4).shards == 1 and Shape(4).later is None
    assert Shape(4, 2) != Shape(4) and "rows=4" in repr(Shape(4))
    with pytest.raises(TypeError, match="unexpected keyword argument 'colums'"):
        Shape(colums=3)
    with pytest.raises(neuron.NeuronError) as e:  # a chain needs its start (test_accumulators)
        def accumulating(x, out):
            t = nl.load(x)
            s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(t, nl.copy, t, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reduce)
        neuron.kernel(accumulating, mode=mode)(x[:128], out[:128])
    if mode == "eager":  # one instruction at a time: no registers kept between them
        assert e.value.rule == "unsupported" and "eager mode" in e.value.message
    else:
        assert e.value.rule == "reduce-cmd" and "scalar engine's" in e.value.message


@dataclasses.dataclass
class Section(nl.NKIObject):  # fields as plain class attributes, as nki-library declares them
    index = None
    offset = 0

    def end(self, length):
        return self.offset + length


def sectioned(x, section: Section):
    out = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x[section.offset:section.end(32), :]))
    return out


def test_dataclass_config_fields_declared_without_annotations_take_keywords():
    s = Section(index=1, offset=64)
    assert (s.index, s.offset) == (1, 64) and Section().offset == 0 and Section(2, 32).offset == 32
    assert Section(index=1, offset=64) == s and Section(index=2, offset=64) != s
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    k = neuron.kernel(sectioned)
    np.testing.assert_array_equal(k(x, s), x[64:96])
    np.testing.assert_array_equal(k(x, Section(index=0, offset=0)), x[0:32])  # a new key
    with pytest.raises(TypeError, match="unexpected keyword argument 'ofset'"):
        Section(ofset=3)


@dataclasses.dataclass
class Dims(nl.NKIObject):
    rows: int
    spare: int  # never passed, as nki-library's MLPTKGConstantsDimensionSizes.remainderIFused
    cols: int = 8


def test_dataclass_config_fields_not_passed_are_none():
    d = Dims(rows=4)
    assert (d.rows, d.spare, d.cols) == (4, None, 8) and Dims(4, 5).spare == 5
    assert Dims(rows=4) == Dims(4, None, 8) != Dims(4, 1)


def optional_bias(x, bias=None):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    if bias:  # an HBM tensor is true, as in NKI: the test for an optional argument
        t = nl.add(t, nl.load(bias))
    nl.store(out, t)
    return out


def optional_tile(x, scale=None):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if scale:  # a tile allocated with nl.ndarray is true too (nki-library's optional tiles)
        nisa.tensor_tensor(dst=t, data1=t, data2=scale, op=nl.multiply)
    nisa.dma_copy(dst=out, src=t)
    return out


def scaled_by_itself(x):
    s = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    return optional_tile(x, s)


def branches_on_a_tile(x):
    t = nl.load(x)
    if t:
        t = nl.add(t, 1.0)
    return x


@pytest.mark.parametrize("mode", ("native", "eager"))
def test_an_hbm_tensor_or_allocated_tile_is_true_and_a_computed_tile_has_no_truth_value(mode):
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    k = neuron.kernel(optional_bias, mode=mode)
    np.testing.assert_array_equal(k(x), x)
    np.testing.assert_array_equal(k(x, x), 2 * x)
    np.testing.assert_array_equal(neuron.kernel(scaled_by_itself, mode=mode)(x), x * x)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(branches_on_a_tile, mode=mode)(x)
    assert e.value.rule == "control-flow" and "is not None" in e.value.message
    assert e.value.line == line_of(branches_on_a_tile, "if t:")


def column_broadcast(x, y):
    out = nl.ndarray((24, 8), nl.float32, buffer=nl.shared_hbm)
    c = nl.ndarray((24, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(c, x)
    t = nl.ndarray((24, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, y)
    r = nl.ndarray((24, 8), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(r, t, c.ap([[1, 24], [0, 8]]), nl.add)  # stride 0: the column repeated
    nisa.dma_copy(out, r)
    return out


def repeats_a_wide_dim(x, y):
    t = nl.ndarray((24, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, y)
    r = nl.ndarray((24, 8), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(r, t.ap([[8, 24], [0, 8]], offset=3))  # element 3 of each row, 8 times
    out = nl.ndarray((24, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, r)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_stride_zero_pattern_entry_repeats_a_size_one_dim(mode):
    x = RNG.standard_normal((24, 1)).astype(np.float32)
    y = RNG.standard_normal((24, 8)).astype(np.float32)
    np.testing.assert_array_equal(neuron.kernel(column_broadcast, mode=mode)(x, y), y + x)
    # a dim of size 8 repeats one element too: the storage seen as [24, 1, 8]
    np.testing.assert_array_equal(neuron.kernel(repeats_a_wide_dim, mode=mode)(x, y),
                                  np.repeat(y[:, 3:4], 8, axis=1))


def matmul_of_none(a):
    p = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
    s = None  # e.g. a view helper that returned nothing
    m = nl.load(a)
    nisa.nc_matmul(p, s, m)
    return a


def activation_of_a_row_view(a):
    r = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
    nisa.activation(r, nl.exp, a.reshape((128, 32)))  # an HBM view: DMA copies take it
    nl.store(a.reshape((128, 32)), r)
    return a


@pytest.mark.parametrize("fn,text,line", [
    (matmul_of_none, "'stationary' is None", "nisa.nc_matmul(p, s, m)"),
    (activation_of_a_row_view, "'data' is a Reshaped of shape [128, 32]",
     "nisa.activation(r, nl.exp, a.reshape((128, 32)))")])
def test_an_operand_an_instruction_cannot_take_is_named_at_the_users_line(fn, text, line):
    a = np.zeros((128, 32), np.float32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn)(a.reshape(128, 4, 8) if fn is activation_of_a_row_view else a)
    assert e.value.rule == "operand" and text in e.value.message, e.value.message
    assert e.value.line == line_of(fn, line)


# ---- .ap() patterns that split or merge storage dims (nki-library's TensorView) -----------------

def split_merge_patterns(x, y):
    """x [512, 8]: partition p holds rows p, p+128, ... (a split of dim 0, walked out of order);
    y [4, 6, 8]: each batch's [6, 8] merged into one row; a tile's free dim split with a step."""
    S, H = x.shape
    t = nl.ndarray((128, S // 128, H), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x.ap([[H, 128], [128 * H, S // 128], [1, H]]))
    out_x = nl.ndarray((128, S // 128 * H), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out_x, t.ap([[S // 128 * H, 128], [1, S // 128 * H]]))
    B, R, C = y.shape
    m = nl.ndarray((B, R * C), y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(m, y.ap([[R * C, B], [1, R * C]]))
    strided = nl.ndarray((B, R, C // 2), y.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(strided, m.ap([[R * C, B], [C, R], [2, C // 2]]))
    out_y = nl.ndarray((B, R * C), y.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out_y, m)
    out_s = nl.ndarray((B, R, C // 2), y.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out_s, strided)
    return out_x, out_y, out_s


@pytest.mark.parametrize("mode", ("native", "simulate"))
def test_ap_patterns_that_split_or_merge_storage_dims(mode):
    x = RNG.standard_normal((512, 8)).astype(np.float32)
    y = RNG.standard_normal((4, 6, 8)).astype(np.float32)
    out_x, out_y, out_s = neuron.kernel(split_merge_patterns, mode=mode)(x, y)
    np.testing.assert_array_equal(out_x, x.reshape(4, 128, 8).transpose(1, 0, 2).reshape(128, 32))
    np.testing.assert_array_equal(out_y, y.reshape(4, 48))
    np.testing.assert_array_equal(out_s, y[:, :, ::2])


def merge_and_split_in_order(y):
    B, R, C = y.shape
    m = nl.ndarray((B, R * C), y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(m, y.ap([[R * C, B], [1, R * C]]))
    out = nl.ndarray((B, R, C // 2), y.dtype, buffer=nl.shared_hbm)
    nisa.tensor_copy(m.ap([[R * C, B], [C, R], [2, C // 2]]),
                     m.ap([[R * C, B], [C, R], [2, C // 2]]) * 3.0)
    nisa.dma_copy(out, m.ap([[R * C, B], [C, R], [2, C // 2]]))
    return out


def test_split_and_merge_patterns_run_eagerly_too():
    y = RNG.standard_normal((4, 6, 8)).astype(np.float32)
    outs = [neuron.kernel(merge_and_split_in_order, mode=m)(y) for m in ("eager", "native")]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], 3.0 * y[:, :, ::2])


def private_scratch_per_program(x):
    """Each program of a grid its own private HBM scratch (nl.hbm / nl.private_hbm), also when
    the kernel's Python reads the program id (programs traced one by one)."""
    out = nl.ndarray((2, 128, 8), nl.float32, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    h = nl.ndarray((128, 8), nl.float32, buffer=nl.private_hbm)
    nisa.dma_copy(h, t)
    u = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(u, h)
    if pid == 1:
        nisa.tensor_scalar(u, u, nl.multiply, 2.0)
    nisa.dma_copy(out[pid], u)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_private_hbm_is_each_programs_own(mode):
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    out = neuron.kernel(private_scratch_per_program, mode=mode)[2](x)
    np.testing.assert_array_equal(out[0], x)
    np.testing.assert_array_equal(out[1], 2 * x)


def unaligned_patterns(v, inp, ea):
    """Patterns whose walk starts off the boundaries of the shape their strides make, or whose
    outer stride does not divide the tensor: the storage seen with that shape from the walk's
    first element (ir.hpp Access::origin)."""
    t = nl.ndarray((128, 6, 16), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, v.ap([[96, 128], [16, 6], [1, 16]], offset=1024 * 16 + 5 * 16))
    u = nl.ndarray((6, 67), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(u, inp.ap([[71, 6], [1, 67]], offset=40 * 58 - 6 * 71 + 3))
    w = nl.ndarray((128, 2, 2), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(w, ea.ap([[2, 128], [256, 2], [1, 2]], offset=4))
    s = nl.ndarray((128, 2, 3), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(s, t.ap([[96, 128], [16, 2], [1, 3]], offset=35))  # on chip, unaligned
    outs = [nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm) for x in (t, u, w, s)]
    for o, x in zip(outs, (t, u, w, s)):
        nisa.dma_copy(o, x)
    return tuple(outs)


@pytest.mark.parametrize("mode", MODES)
def test_ap_patterns_that_start_off_a_dim_boundary(mode):
    v = RNG.standard_normal((2, 1, 1024 + 128 * 6 + 5, 16)).astype(np.float32)
    inp = RNG.standard_normal((40, 58)).astype(np.float32)
    ea = RNG.standard_normal((300, 2)).astype(np.float32)
    t, u, w, s = neuron.kernel(unaligned_patterns, mode=mode)(v, inp, ea)
    flat_v, flat_i, flat_e = v.reshape(-1), inp.reshape(-1), ea.reshape(-1)
    np.testing.assert_array_equal(t, flat_v[1024 * 16 + 80:][:128 * 96].reshape(128, 6, 16))
    base = 40 * 58 - 6 * 71 + 3
    np.testing.assert_array_equal(u, np.stack([flat_i[base + 71 * i:][:67] for i in range(6)]))
    np.testing.assert_array_equal(w, np.array([[[flat_e[4 + 2 * p + 256 * j + c] for c in range(2)]
                                                for j in range(2)] for p in range(128)]))
    rows = t.reshape(128, 96)
    np.testing.assert_array_equal(s, np.stack([rows[:, 35 + 16 * j:][:, :3] for j in range(2)],
                                              axis=1))


def sliding_windows(img):
    """nki-library's depthwise convolution: row i of the tile is the window img[off + i + s*j]
    for j < Q (an .ap() whose entries overlap), read by DMA."""
    a = nl.ndarray((16, 40), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=img.ap(pattern=[[1, 16], [1, 40]], offset=5))
    b = nl.ndarray((8, 10), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=img.ap(pattern=[[1, 8], [3, 10]], offset=64 + 7))
    oa = nl.ndarray((16, 40), nl.float32, buffer=nl.shared_hbm)
    ob = nl.ndarray((8, 10), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=oa, src=a)
    nisa.dma_copy(dst=ob, src=b)
    return oa, ob


@pytest.mark.parametrize("mode", ("native", "simulate"))
def test_overlapping_sliding_window_patterns_are_read(mode):
    img = RNG.standard_normal((2, 64)).astype(np.float32)
    a, b = neuron.kernel(sliding_windows, mode=mode)(img)
    flat = img.reshape(-1)
    np.testing.assert_array_equal(a, np.array([[flat[5 + i + j] for j in range(40)]
                                               for i in range(16)]))
    np.testing.assert_array_equal(b, np.array([[flat[71 + i + 3 * j] for j in range(10)]
                                               for i in range(8)]))
    with pytest.raises(neuron.NeuronError, match="only in a traced kernel"):
        neuron.kernel(sliding_windows, mode="eager")(img)


def scaled_rows(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_benchmark_and_profile_of_the_current_api(tmp_path):
    import re
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    bench = nki.benchmark(warmup=2, iters=5)(scaled_rows)
    np.testing.assert_array_equal(bench(x), 3 * x)
    lat = bench.benchmark_result.nc_latency
    sim = neuron.simulate(neuron.kernel(scaled_rows))
    sim(x)
    modelled = float(re.search(r"total time\s+([0-9.]+) us", sim.profile).group(1))
    assert lat.get_latency_percentile(50) == lat.get_latency_percentile(99) == \
        pytest.approx(modelled, abs=0.01) and modelled > 0
    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="rows.ntff")(scaled_rows)
    np.testing.assert_array_equal(prof[1](x), 3 * x)
    assert "total time" in (tmp_path / "rows.txt").read_text()
    assert nisa.get_nc_sub_version() == 0 and nisa.get_nc_version() == nisa.nc_version.gen3
