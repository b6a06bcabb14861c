"""neuron.isa (import as nisa): NKI `nki.isa` instructions, current generation: the destination
comes first and nothing is returned; the output dtype is the destination's. `name=` (a
scheduling label) and `engine=` are accepted and ignored: the compiler picks the engine."""
from . import _C
from . import eager as _eager
from . import eager_dynamic as _eager_dynamic
from . import unroll as _unroll
from ._span import user_span
from .collectives import core_barrier, sendrecv  # noqa: F401 (refused when called)
from .access import BitcastView, IndirectView, OutOfRange, SplitView, as_index as _as_index, \
    copy_split
from .errors import user_error
from .reshaped import dma_operand
from .language import _Fn, _int, _operand

# What an indirect DMA (.ap(vector_offset=...)) does with a row index outside the tensor: a
# NeuronError naming the index (error), or leave that row alone (skip).
oob_mode = _C.oob_mode

from . import isa_constants as constants  # noqa: E402 (nki.isa.constants)
from .isa_constants import (dge_mode, dma_engine, engine, get_nc_sub_version,  # noqa: E402,F401
                            get_nc_version, gpsimd_engine, matmul_perf_mode, nc_version, reduce_cmd,
                            scalar_engine, sync_engine, tensor_engine, unknown_engine,
                            vector_engine)


def _op(f):
    if isinstance(f, _Fn):
        return f.name
    if isinstance(f, str):
        return f
    name = getattr(f, "__name__", None)  # numpy ufuncs (np.add) and the like
    if isinstance(name, str):
        return "mod" if name == "remainder" else name  # np.mod is np.remainder
    raise TypeError(f"expected an nl function as the operator, got {f!r}")


def _pattern(pattern):
    if not isinstance(pattern, (list, tuple)) or \
            not all(isinstance(p, (list, tuple)) for p in pattern):
        raise TypeError(f"an access pattern is a list of [stride, count] pairs, got {pattern!r:.60}")
    return [tuple(_int(v, "a pattern [stride, count] entry") for v in p) for p in pattern]


def _number(v, what):
    """float(v), or a TypeError naming the argument when v is not a number."""
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a number, got {type(v).__name__} {v!r:.40}") from None


_FP8 = (_C.DType.float8_e4m3, _C.DType.float8_e5m2, _C.DType.float8_e4m3fn)


@_eager.op(writes=("dst",))
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=None, name=None):
    """dst[M,N] (PSUM) = stationary[K,M].T @ moving[K,N] in fp32; accumulate None (or -1) lets
    the compiler decide (first write overwrites, later ones add), False overwrites, True adds.
    is_transpose=True (moving an identity): dst = stationary.T exactly (the PE transpose).
    perf_mode double_row (FP8): stationary [K, 2, M], moving [K, 2, N], dst = the sum over
    both K and the pair dim. The onezero flags and the PE tiling (tile_position, tile_size)
    are placement hints: checked, the result is the same."""
    span = user_span()
    _check_pe_tiling(tile_position, tile_size, span)
    acc = -1 if accumulate is None else int(accumulate)
    if is_transpose:
        _C.nc_transpose(dst, stationary, span)
        return
    mode = getattr(perf_mode, "value", perf_mode)
    if mode in (None, "", "none"):
        _C.nc_matmul(dst, stationary, moving, acc, span)
        return
    if mode != "double_row":
        user_error("unknown-arg", f"nc_matmul: perf_mode must be matmul_perf_mode.none or "
                   f".double_row, got {perf_mode!r}", span)
    if tile_size and isinstance(tile_size[1], int) and tile_size[1] < 128:
        user_error("matmul-shape", f"nc_matmul: perf_mode=double_row cannot be combined with PE "
                   f"column tiling (tile_size {tuple(tile_size)})", span)
    for what, t in (("stationary", stationary), ("moving", moving)):
        if len(t.shape) != 3 or t.shape[1] != 2:
            user_error("matmul-shape", f"nc_matmul(perf_mode=double_row): {what} must be "
                       f"[K, 2, free] (the row pairs), got {list(t.shape)}", span)
        if t.dtype not in _FP8:
            user_error("matmul-dtype", f"nc_matmul(perf_mode=double_row) takes FP8 operands; "
                       f"{what} is {t.dtype}; use perf_mode=none for other dtypes", span)
    # The two rows of each pair are two K chunks accumulated into dst: the same sum.
    _C.nc_matmul(dst, stationary[:, 0, :], moving[:, 0, :], acc, span)
    _C.nc_matmul(dst, stationary[:, 1, :], moving[:, 1, :], 1, span)


def _check_pe_tiling(position, size, span):
    """nc_matmul's PE tiling hint: tile_position (row, col) and tile_size (rows, cols), both or
    neither, multiples of 32 within the 128 x 128 array."""
    position, size = tuple(position or ()), tuple(size or ())
    if not position and not size:
        return
    if len(position) != 2 or len(size) != 2:
        user_error("matmul-shape", f"nc_matmul: tile_position and tile_size are given together, "
                   f"as (row, col) pairs; got tile_position={position}, tile_size={size}", span)
    for p, n in zip(position, size):
        if not all(isinstance(v, int) for v in (p, n)):
            continue  # a position from a rolled loop's index: a hint, left unchecked
        if p % 32 or n % 32 or n <= 0 or p < 0 or p + n > 128:
            user_error("matmul-shape", f"nc_matmul: tile_position {position} and tile_size "
                       f"{size} must be multiples of 32 inside the 128 x 128 PE array", span)


@_eager.op(writes=("dst",))
def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
                 tile_size=None, accumulate=None, name=None):
    """NeuronCore-v4 MX matmul (docs/mx.md): dst[M, N] (PSUM fp32/bf16) = stationary[K, M].T @
    moving[K, N] over x4 data, every value times 2^(scale - 127) of its block of 8 partitions
    (float8_e8m0fnu or uint8 scales, block g on partition (g // 4) * 32 + g % 4 of the scale
    tile). tile_position / tile_size (row tiling) place the matmul on the PE array: accepted,
    the result is the same."""
    _C.nc_matmul_mx(dst, stationary, moving, stationary_scale,
                    moving_scale, -1 if accumulate is None else int(accumulate),
                    user_span())


@_eager.op(writes=("dst", "dst_scale"))
def quantize_mx(dst, src, dst_scale, name=None):
    """NeuronCore-v4 MXFP8 quantization (docs/mx.md): src [P, F] bf16/fp16 -> dst [P, F/4]
    float8_e5m2_x4 / float8_e4m3fn_x4 and one scale (float8_e8m0fnu or uint8) per block of 8
    partitions x 4 values."""
    _C.quantize_mx(dst, src, dst_scale, user_span())


@_eager.op(writes=("dst",))
def nc_transpose(dst, data, engine=None, name=None):
    """dst[F, P] = data[P, F].T: on the Tensor engine into PSUM, or on the Vector engine (at
    most 32 x 32, SBUF or PSUM) when engine=nisa.engine.vector or, by default, when dst is in
    SBUF (NKI's rule: the engine follows dst's buffer)."""
    from .isa_constants import engine as _engine
    if engine is not None and engine not in (_engine.unknown, _engine.tensor, _engine.vector):
        user_error("unknown-arg", f"nc_transpose: engine {engine!r} does not transpose; use "
                   "nisa.engine.tensor (PE array, dst in PSUM) or nisa.engine.vector (32 x 32)",
                   user_span())
    if engine == _engine.vector:
        _C.nc_transpose_vector(dst, data, user_span())
    elif engine == _engine.tensor:
        _C.nc_transpose_tensor(dst, data, user_span())
    else:
        _C.nc_transpose(dst, data, user_span())


@_eager.op(writes=("dst", "reduce_res"))
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=None, name=None):
    """dst = op(data * scale + bias) (bias a [P, 1] tile or a number); with reduce_res, its
    reduce_op (add in one instruction; max, min, ... by a reduction after it) over the free
    dims. reduce_cmd chains the Scalar engine's accumulator registers (NKI_API.md 5.3,
    accumulators.py): reset_reduce (the default with reduce_res) starts a chain with this
    instruction's reduction, reduce adds it onto what the previous one left, reset clears them
    (this data not added), idle leaves them alone (reduce_res is then left alone too);
    reduce_res receives the registers' value."""
    span = user_span()
    cmd = None
    if reduce_cmd is not None:
        from .isa_composed import _cmd, _cmd_set
        cmd = _cmd(reduce_cmd, "activation", (_cmd_set.idle, _cmd_set.reset, _cmd_set.reduce,
                                              _cmd_set.reset_reduce), span)
        if cmd == _cmd_set.idle:
            cmd = reduce_res = None
    if not hasattr(data, "shape"):
        raise TypeError(f"nisa.activation: data must be a tile (an SBUF or PSUM tensor), got "
                        f"{type(data).__name__} {data!r:.40}")
    bias = None if bias is None else _operand(bias)
    if bias is not None and not isinstance(bias, _C.Tensor):  # a number: a [P, 1] tile of it
        bias = None if bias == 0.0 else _C.full([data.shape[0], 1], bias, _C.DType.float32,
                                                _C.Memory.sbuf, "", span)
    rop = None if reduce_op is None else _op(reduce_op)
    if cmd is not None and (cmd != _cmd_enum.reset_reduce or reduce_res is None or
                            _unroll.keep_registers()):
        return _activation_chained(dst, op, data, bias, scale, rop, reduce_res, cmd, span)
    _activation_op(dst, op, data, bias, _operand(scale), rop, reduce_res, span)
    if reduce_res is not None:  # a chain may continue from it (the default is reset_reduce)
        from . import accumulators
        accumulators.alias("scalar", reduce_res)


_cmd_enum = reduce_cmd  # (activation's parameter hides the enum's name)


def _activation_op(dst, op, data, bias, scale, rop, reduce_res, span):
    """The activation instruction, with reduce_res its reduction rop over the free dims (add in
    the instruction, others by a reduction after it); the registers untouched."""
    if reduce_res is not None and rop not in (None, "add", "sum"):
        _C.activation(dst, _op(op), data, bias, scale, None, None, span)
        _C.tensor_reduce(reduce_res, rop, dst, list(range(1, len(dst.shape))), False, span)
    else:
        _C.activation(dst, _op(op), data, bias, scale, rop, reduce_res, span)


def _activation_chained(dst, op, data, bias, scale, rop, reduce_res, cmd, span):
    """activation whose reduction goes through the Scalar engine's registers (reset, reduce,
    or reset_reduce keeping them in a tile of their own): the instruction's own reduction into
    a [P, 1] fp32 tile, combined with the registers (accumulators.chain), copied to
    reduce_res."""
    from . import accumulators
    rop = "add" if rop in (None, "sum") else rop
    scale = _operand(scale)
    if cmd == _cmd_enum.reset:
        _C.activation(dst, _op(op), data, bias, scale, None, None, span)
        value = accumulators.chain("scalar", cmd, rop, "activation", span, src=dst,
                                   wanted=True)
    else:
        own = _C.ndarray([data.shape[0], 1], _C.DType.float32, _C.Memory.sbuf, "", span)
        _activation_op(dst, op, data, bias, scale, rop, own, span)
        value = accumulators.chain("scalar", cmd, rop, "activation", span, own=own,
                                   wanted=True)
    if reduce_res is not None:
        _C.tensor_copy(reduce_res, value, span)


# NeuronCore-v4's magnitude operators (NKI_API.md 5.1: the signed operand with the larger /
# smaller magnitude, y on ties), composed of a comparison and a select (nl.abs_max / abs_min).
_BY_MAGNITUDE = ("abs_max", "abs_min")


def _by_magnitude(dst, name, x, y, span):
    from . import language_composed as composed
    _C.tensor_copy(dst, getattr(composed, name)(x, y, dtype=dst.dtype), span)


@_eager.op(writes=("dst",))
def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    op = _op(op)
    if op in _BY_MAGNITUDE:
        return _by_magnitude(dst, op, data1, data2, user_span())
    _C.tensor_tensor(dst, data1, data2, op, user_span())


@_eager.op(writes=("dst",))
def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       name=None):
    """Per partition along the free dims: r = initial (a number or [P, 1] tile), then
    r = op1(op0(data0[i], r), data1[i]), dst[i] = r (reverse0/1 swap an op's operands)."""
    _C.tensor_tensor_scan(dst, data0, data1, _operand(initial), _op(op0), _op(op1),
                          bool(reverse0), bool(reverse1), user_span())


# The ALU operators of one operand (ops.hpp NEURON_ALU_OPS, arity 1): their operand is ignored,
# and NKI lets it be None.
_UNARY_ALU = ("bypass", "abs", "rsqrt", "reciprocal", "logical_not")


def _stage_operand(fn, which, op, operand, span):
    if operand is not None:
        return operand
    if _op(op) in _UNARY_ALU:
        return 0.0
    user_error("operand", f"{fn}: {which} is None, but {which.replace('operand', 'op')}="
               f"{_op(op)} takes an operand (a number or a [P, 1] tile)", span)


@_eager.op(writes=("dst",))
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, name=None):
    span = user_span()
    operand0 = _stage_operand("tensor_scalar", "operand0", op0, operand0, span)
    if op1 is not None:
        operand1 = _stage_operand("tensor_scalar", "operand1", op1, operand1, span)
    if _op(op0) in _BY_MAGNITUDE or (op1 is not None and _op(op1) in _BY_MAGNITUDE):
        # One step at a time (an fp32 tile between them, as the engine's fp32 arithmetic).
        t = data
        for op, operand, rev in ((op0, operand0, reverse0), (op1, operand1, reverse1)):
            if op is None or _op(op) == "bypass":
                continue
            out = _C.ndarray(list(dst.shape), _C.DType.float32, _C.Memory.sbuf, "", span)
            c = _operand(operand)
            if _op(op) in _BY_MAGNITUDE:
                _by_magnitude(out, _op(op), c if rev else t, t if rev else c, span)
            else:
                _C.tensor_scalar(out, t, _op(op), c, bool(rev), None, None, False, span)
            t = out
        _C.tensor_copy(dst, t, span)
        return
    _C.tensor_scalar(dst, data, _op(op0), _operand(operand0), bool(reverse0),
                     None if op1 is None else _op(op1),
                     None if operand1 is None else _operand(operand1), bool(reverse1), span)


@_eager.op(writes=("dst",))
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    # dst keeps the reduced dims as size 1 either way: keepdims only shapes NKI's result view.
    if not isinstance(axis, (int, tuple, list)):
        raise TypeError(f"nisa.tensor_reduce: axis must be an int or a tuple of ints, got "
                        f"{axis!r:.40}")
    axes = [axis] if isinstance(axis, int) else list(axis)
    _C.tensor_reduce(dst, _op(op), data, axes, bool(negate), user_span())


@_eager.op(writes=("dst",))
def tensor_copy(dst, src, engine=None, name=None, dtype=None):
    """dst = src (with a cast to dst's dtype). dtype= (the NKI 0.2 beta form) is accepted: the
    destination's dtype decides, as in the current API. engine=nisa.engine.scalar copies
    through fp32, as that engine does (NKI_API.md 3.2: int32 above 2**24 rounds); otherwise
    a copy within one dtype is bit-exact."""
    span = user_span()
    if engine == constants.engine.scalar:  # (the IntEnum of either API generation)
        copy = lambda d, s: _C.activation(d, "copy", s, None, 1.0, None, None, span)  # noqa: E731
    else:
        copy = lambda d, s: _C.tensor_copy(d, s, span)  # noqa: E731
    # A transposing .ap() pattern on one side (access.py SplitView): one copy per part.
    copy_split(copy, dst, src)


@_eager.op(writes=("dst",))
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """dst = src where predicate != 0 (where it is 0 with reverse_pred); the rest of dst is
    kept. src is a tile or a number (copied to the chosen elements)."""
    span = user_span()
    src = _operand(src)
    if not isinstance(src, _C.Tensor):  # a number: a tile of it, in dst's dtype
        src = _C.full(list(dst.shape), float(src), dst.dtype, _C.Memory.sbuf, "", span)
    if reverse_pred:  # the inverted predicate, in the predicate's dtype
        if not isinstance(predicate, _C.Tensor):
            raise TypeError("nisa.tensor_copy_predicated: predicate must be a tile (an SBUF or "
                            f"PSUM tensor of integers), got {type(predicate).__name__} "
                            f"{predicate!r:.40}")
        predicate = _C.binary("equal", predicate, 0.0, predicate.dtype, span)
    _C.tensor_copy_predicated(dst, src, predicate, span)


@_eager.op(writes=("dst",))
def memset(dst, value, engine=None, name=None):
    _C.memset(dst, float(value), user_span())


# ---- random numbers (a counter-based generator with a per-kernel state: docs/random.md) -------

def _state():
    return _eager.rng_state(lambda st: _set_rng_seed(0.0, st))


@_eager.op(writes=("dst", "state"))
def _rng(dst, state):
    _C.rng(dst, state, user_span())


@_eager.op(writes=("dst", "state"))
def _rand2(dst, low, high, state):
    _C.rand2(dst, float(low), float(high), state, user_span())


@_eager.op(writes=("dst", "state"))
def _dropout(dst, data, prob, state):
    _C.dropout(dst, data, _operand(prob), state, user_span())


@_eager.op(writes=("state",))
def _set_rng_seed(seeds, state):
    _C.set_rng_seed(_operand(seeds), state, user_span())


@_eager.op(writes=("dst",))
def _rand_get_state(dst, state):
    _C.rand_get_state(dst, state, user_span())


@_eager.op(writes=("state",))
def _rand_set_state(src, state):
    _C.rand_set_state(src, state, user_span())


def rng(dst, engine=None, name=None):
    """dst = 32 random bits per element (integer dst) or uniform values in [0, 1) (float)."""
    _rng(dst, _state())


def rand2(dst, min, max, engine=None, name=None):
    """dst (float) = uniform values in [min, max)."""
    _rand2(dst, min, max, _state())


def dropout(dst, data, prob, engine=None, name=None):
    """dst = 0 where a uniform draw is below prob (a number or [P, 1] tile), else data (the
    kept values are not rescaled)."""
    _dropout(dst, data, prob, _state())


def set_rng_seed(src_seeds, engine=None, name=None):
    """Seeds the generator from a number, a [1, 1] tile (all partitions) or a [P, 1] tile (one
    seed per partition); the same seed gives the same draws."""
    _set_rng_seed(src_seeds, _state())


def rand_get_state(dst, engine=None, name=None):
    """dst ([P, 4] uint32) = the generator state of partitions 0..P-1."""
    _rand_get_state(dst, _state())


def rand_set_state(src_seeds, engine=None, name=None):
    """The generator state of partitions 0..P-1 = src_seeds ([P, 4] uint32, from
    rand_get_state)."""
    _rand_set_state(src_seeds, _state())


@_eager.op(writes=("dst",))
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """dst[p, f...] = offset + p * channel_multiplier + sum(stride_i * f_i); pattern is
    [[stride, count], ...] over the free dims."""
    _C.iota(dst, _pattern(pattern), _int(offset, "iota offset"),
            _int(channel_multiplier, "iota channel_multiplier"), user_span())


@_eager.op(writes=("dst",))
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
                  offset=0, name=None):
    _C.affine_select(dst, _pattern(pattern), _int(channel_multiplier, "channel_multiplier"),
                     on_true_tile,
                     _number(on_false_value, "affine_select: on_false_value"),
                     "equal" if cmp_op is None else _op(cmp_op),
                     _int(offset, "affine_select offset"), user_span())


@_eager.op(writes=("dst",))
def dma_copy(dst, src, oob_mode=oob_mode.error, dge_mode=None, priority=None, engine=None,
             name=None):
    """DMA copy between HBM and SBUF (either way, or SBUF to SBUF) with a cast; one side may
    be t.ap(..., vector_offset=rows) (rows chosen at run time, oob_mode for bad rows)."""
    span = user_span()
    oob_mode = _oob_mode(oob_mode)

    def rows_of(x):  # an IndirectView, or a split one (access.py rows_view)
        return isinstance(x, IndirectView) or (
            isinstance(x, SplitView) and isinstance(x.parts[0][1], IndirectView))
    if rows_of(src) and rows_of(dst):
        user_error("indirect-dma", "dma_copy: only one side may select rows with vector_offset",
                   span)
    # oob_mode skip: a copy whose HBM side a register or runtime loop index (.ap's
    # scalar_offset) moves out of its tensor is skipped when it runs; constant indices are
    # checked when the kernel compiles.
    skip = oob_mode == _C.oob_mode.skip

    def copy(d, s):
        if isinstance(s, BitcastView) or isinstance(d, BitcastView):
            # t.ap(dtype=...) on either side: the bytes move unchanged (access.py BitcastView).
            def raw(t):
                return t.view if isinstance(t, BitcastView) else t
            _C.dma_copy_bitcast(raw(d), raw(s), span)
        elif isinstance(s, IndirectView) and _in_hbm(d):
            # HBM to HBM (the NKI docs' gather_rows): through an SBUF tile of the rows, which
            # starts as dst's rows so that rows oob_mode skips keep dst's values
            t = _C.ndarray(list(s.shape), s.dtype, _C.Memory.sbuf, "", span)
            d = dma_operand(d, t, "dma_copy", span)
            if skip:
                _C.dma_copy(t, d, span)
            _C.dma_copy_rows(t, s.view, s.rows, True, oob_mode, span)
            _C.dma_copy(d, t, span)
        elif isinstance(d, IndirectView) and _in_hbm(s):
            t = _C.ndarray(list(d.shape), s.dtype, _C.Memory.sbuf, "", span)
            _C.dma_copy(t, dma_operand(s, t, "dma_copy", span), span)
            _C.dma_copy_rows(d.view, t, d.rows, False, oob_mode, span)
        elif isinstance(s, IndirectView):
            _C.dma_copy_rows(d, s.view, s.rows, True, oob_mode, span)
        elif isinstance(d, IndirectView):
            _C.dma_copy_rows(d.view, s, d.rows, False, oob_mode, span)
        else:
            # A reshaped HBM tensor (reshaped.py): its base view, same elements in the same order
            d, s = dma_operand(d, s, "dma_copy", span), dma_operand(s, d, "dma_copy", span)
            if skip:
                _C.dma_copy_oob(d, s, oob_mode, span)
            else:
                _C.dma_copy(d, s, span)
    # A pattern no one view walks (access.py SplitView: a transposing .ap(), or indirect rows
    # whose window reaches past the next rows): one copy per part.
    copy_split(copy, dst, src)


_dma_copy = dma_copy


def _in_hbm(x):
    return getattr(x, "buffer", None) in (_C.Memory.hbm, _C.Memory.shared_hbm)


def _oob_mode(v):
    """nisa.oob_mode.error / skip (or the legacy API's 0 / 1); anything else a TypeError."""
    if isinstance(v, _C.oob_mode):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and int(v) in (0, 1):
        return _C.oob_mode(int(v))
    raise TypeError(f"nisa.dma_copy: oob_mode must be nisa.oob_mode.error or "
                    f"nisa.oob_mode.skip, got {type(v).__name__} {v!r:.40}")


def dma_copy(dst, src, oob_mode=oob_mode.error, dge_mode=None, priority=None, engine=None,
             name=None):
    """DMA copy between HBM and SBUF (either way, or SBUF to SBUF) with a cast; one side may
    be t.ap(..., vector_offset=rows) (rows chosen at run time, oob_mode for bad rows), or
    t.ap(..., scalar_offset=r) (a copy r moves out of t is skipped with oob_mode skip)."""
    oob_mode = _oob_mode(oob_mode)
    for side in (dst, src):
        if isinstance(side, OutOfRange):  # eager mode: the offset's value is known now
            if oob_mode == _C.oob_mode.skip:
                return None
            raise side.error
    return _dma_copy(dst, src, oob_mode, dge_mode, priority, engine, name)


dma_copy.__wrapped__ = _dma_copy.__wrapped__  # the traced body, for callers already in an op


# ---- gathers ---------------------------------------------------------------------------------

@_eager.op(writes=("dst",))
def nc_n_gather(dst, data, indices, name=None):
    """dst[p, j] = data[p, indices[p, j]] over data's flattened free dims (integer indices in
    0 .. elements per partition - 1)."""
    _C.nc_n_gather(dst, data, indices, user_span())


@_eager.op(writes=("dst",))
def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Per group of 16 partitions: the group's indices (index's 16 rows read partition-first,
    the first num_valid_indices of them) each select num_elem_per_idx consecutive elements of
    every partition's own row of src_buffer; dst is [P, num_valid_indices * num_elem_per_idx]."""
    _C.local_gather(dst, src_buffer, index, _int(num_elem_per_idx, "num_elem_per_idx"),
                    -1 if num_valid_indices is None else
                    _int(num_valid_indices, "num_valid_indices"), user_span())


# ---- partition reduction, selection and statistics ---------------------------------------------

@_eager.op(writes=("dst",))
def tensor_partition_reduce(dst, op, data, name=None):
    """dst[0, j] = op over the partitions of data[:, j] (GpSimd): nl.add, nl.average (the sum
    divided by the partition count), nl.maximum, nl.minimum; nl.bitwise_and and nl.bitwise_or
    on integer tiles."""
    span = user_span()
    if _op(op) == "average":  # the fp32 sum over the partitions, divided by their count
        total = _C.ndarray(list(dst.shape), _C.DType.float32, _C.Memory.sbuf, "", span)
        _C.tensor_partition_reduce(total, "add", data, span)
        _C.tensor_scalar(dst, total, "divide", float(data.shape[0]), False, None, None, False,
                         span)
        return
    _C.tensor_partition_reduce(dst, _op(op), data, span)


@_eager.op(writes=("dst",))
def max8(dst, src, name=None):
    """dst[p, 0:8] = the 8 largest values of src[p, :] (8 to 16384 elements), descending."""
    _C.max8(dst, src, user_span())


@_eager.op(writes=("dst",))
def nc_find_index8(dst, data, vals, name=None):
    """dst[p, k] (uint32) = the index in data[p, :] of vals[p, k] (a value repeated in vals takes
    the next occurrence); 0xFFFFFFFF when it does not occur."""
    _C.nc_find_index8(dst, data, vals, user_span())


@_eager.op(writes=("dst", "dst_idx"))
def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """dst = data with the elements nc_find_index8 would find replaced by imm; dst_idx, when
    given, receives those indices, a value repeated in vals pairing with its occurrences from
    the last slot down (NKI's order, the opposite of nc_find_index8's)."""
    _C.nc_match_replace8(dst, data, vals, float(imm), user_span(), dst_idx)


@_eager.op(writes=("dst",))
def bn_stats(dst, data, name=None):
    """dst[p, 0:6] = count, mean and count * variance of the even-indexed elements of data[p, :]
    (at most nl.tile_size.bn_stats_fmax), then of the odd-indexed ones."""
    _C.bn_stats(dst, data, user_span())


@_eager.op(writes=("dst",))
def bn_aggr(dst, data, name=None):
    """dst[p, 0:2] = mean and variance of data[p, :]'s (count, mean, count * variance) triples
    combined: several bn_stats results side by side give the statistics of the whole row."""
    _C.bn_aggr(dst, data, user_span())


@_eager.op(writes=("dst",))
def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """In every group of 32 partitions, dst partition i = src partition shuffle_mask[i]
    (32 entries; 255 leaves dst partition i unchanged)."""
    mask = [_int(v, "a shuffle_mask entry") for v in shuffle_mask]
    _C.nc_stream_shuffle(dst, src, mask, user_span())


# ---- registers: runtime integers (offsets and loop bounds) -------------------------------------

def _register(r, fn):
    if not isinstance(r, _C.Affine):
        raise TypeError(f"nisa.{fn}: expected a register (from nisa.register_alloc), got {r!r} "
                        f"({type(r).__name__})")
    return r


@_eager_dynamic.register_op("alloc")
def register_alloc(x=None):
    """A new register (a 32-bit integer known at run time), set to x (default 0). Use it in
    index expressions (t[nl.ds(r * 128, 128)], .ap(scalar_offset=r)) and as a loop bound."""
    return _C.register_alloc(0 if x is None else _int(x, "register_alloc x"), user_span())


@_eager_dynamic.register_op("move")
def register_move(dst, src):
    """dst = src, an int or another register."""
    _C.register_move(_register(dst, "register_move"), _as_index(src, "register_move src"),
                     user_span())


@_eager_dynamic.register_op("load")
def register_load(dst, src):
    """dst = the one element of src (a [1, 1] or [1] SBUF or HBM tensor; floats rounded)."""
    _C.register_load(_register(dst, "register_load"), src, user_span())


@_eager_dynamic.register_op("store")
def register_store(dst, src):
    """The one element of dst (SBUF or HBM) = register src."""
    _C.register_store(dst, _register(src, "register_store"), user_span())


# ---- composed from the instructions above (isa_composed.py, isa_utilities.py) --------------

_COMPOSED = ("activate2", "activation_reduce", "dma_compute", "dma_transpose", "exponential",
             "nonzero_with_count",
             "range_select", "reciprocal", "scalar_tensor_tensor", "select_reduce",
             "sequence_bounds", "tensor_scalar_cumulative", "tensor_scalar_reduce", "topk")


def __getattr__(name):
    # The composed instructions live in isa_composed.py, which imports this module: reached on
    # first use (PEP 562), so the modules do not import each other.
    if name in _COMPOSED:
        from . import isa_composed
        return getattr(isa_composed, name)  # not cached in globals(): `all` would shadow the builtin
    raise AttributeError(f"module 'neuron.isa' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_COMPOSED))
