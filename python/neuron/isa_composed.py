"""nki.isa instructions (current API, destination first) that neuron composes from the ones it
has: each is a short sequence of existing instructions with NKI's semantics (NKI_API.md 4.10,
6.5). They record several instructions where NKI records one, so the timing model sees more
work; the values are NKI's. The Vector engine's accumulator registers, which reduce_cmd chains
instructions through, are accumulators.py's."""
import itertools
import math

import numpy as np

from . import _C
from . import accumulators as _acc
from . import eager as _eager
from ._span import user_span
from .dma_rmw import dma_compute  # noqa: F401 (nisa.dma_compute)
from .errors import user_error
from .isa import _activation_op, _op, activation, reduce_cmd, tensor_copy, tensor_reduce, \
    tensor_scalar, tensor_tensor
from .isa_utilities import nonzero_with_count, sequence_bounds, topk  # noqa: F401 (nisa.*)
from .language import _operand, fp32

_cmd_set = reduce_cmd  # the functions' reduce_cmd parameter hides the enum's name

_FREE_REDUCE = {"add", "subtract", "multiply", "maximum", "minimum", "max", "min", "sum",
                "logical_and", "logical_or", "bitwise_and", "bitwise_or"}


def _free_axes(t):
    return list(range(1, len(t.shape)))


def _reduce_op(op, fn, span):
    name = _op(op)
    name = {"max": "maximum", "min": "minimum", "sum": "add"}.get(name, name)
    if name not in _FREE_REDUCE:
        user_error("reduce-op", f"{fn}: reduce_op={name!r} is not a reduction (use nl.add, "
                   "nl.multiply, nl.maximum or nl.minimum)", span)
    return name


def _cmd(cmd, fn, allowed, span):
    """reduce_cmd as a reduce_cmd member; the ones this composition cannot honour are errors."""
    try:
        c = reduce_cmd(int(cmd))
    except (TypeError, ValueError):
        user_error("unknown-arg", f"{fn}: reduce_cmd={cmd!r} is not a nisa.reduce_cmd", span)
    if c not in allowed:
        user_error("unsupported", f"{fn}: reduce_cmd=reduce_cmd.{c.name} is not supported (the "
                   "accumulator registers are not kept between instructions); use "
                   f"{' or '.join('reduce_cmd.' + a.name for a in allowed)}", span)
    return c


def _fp32_like(t, span):
    return _C.ndarray(list(t.shape), _C.DType.float32, _C.Memory.sbuf, "", span)


def _column_fp32(t, span):
    return _C.ndarray([t.shape[0], 1], _C.DType.float32, _C.Memory.sbuf, "", span)


def _finish_reduce(reduce_res, partial, op, init, negate, span):
    """reduce_res = [-](init op partial) (init None: partial) for a [P, 1] fp32 partial."""
    if init is not None:
        tensor_scalar(partial, partial, op, init)
    if negate:
        tensor_scalar(partial, partial, "multiply", -1.0)
    tensor_copy(reduce_res, partial)


@_eager.op(writes=("dst", "reduce_res"))
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, reduce_cmd=reduce_cmd.reset_reduce, reduce_op=None,
                         reduce_res=None, name=None):
    """dst = (data op0 operand0) op1 operand1: operand0 a number or [P, 1] tile, operand1 a
    tile of data's shape; the intermediate is fp32 (reverse0/1 swap an op's operands). With
    reduce_res ([P, 1]): reduce_op (default add) of the fp32 result over the free dims."""
    span = user_span()
    tmp = _fp32_like(data, span)
    tensor_scalar(tmp, data, op0, operand0, reverse0)
    a, b = (operand1, tmp) if reverse1 else (tmp, operand1)
    if reduce_res is None:
        tensor_tensor(dst, a, b, op1)
        return
    _cmd(reduce_cmd, "scalar_tensor_tensor", (_cmd_set.idle, _cmd_set.reset_reduce), span)
    op = _reduce_op("add" if reduce_op is None else reduce_op, "scalar_tensor_tensor", span)
    tensor_tensor(tmp, a, b, op1)
    tensor_reduce(reduce_res, op, tmp, _free_axes(tmp))
    tensor_copy(dst, tmp)


_SCAN_OPS = ("add", "subtract", "multiply", "maximum", "minimum")


@_eager.op(writes=("dst",))
def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None,
                             reduce_cmd=reduce_cmd.reset_reduce, reverse0=False, name=None):
    """Per partition along the free dims: reg = op1(src[i] op0 imm0, reg), dst[i] = reg, from
    reg = op1's identity (reset_reduce, reset, idle), imm1 (load_reduce) or the Vector
    engine's registers (reduce: where the previous instruction left them); op1 add, subtract,
    multiply, maximum or minimum. The registers then hold each partition's last value."""
    span = user_span()
    cmd = _cmd(reduce_cmd, "tensor_scalar_cumulative", tuple(_cmd_set), span)
    scan = _reduce_op(op1, "tensor_scalar_cumulative", span)
    if scan not in _SCAN_OPS:
        user_error("reduce-op", f"tensor_scalar_cumulative: op1={scan!r} is not one of add, "
                   "subtract, multiply, maximum, minimum", span)
    if cmd == _cmd_set.load_reduce and imm1 is None:
        user_error("unknown-arg", "tensor_scalar_cumulative: reduce_cmd=load_reduce starts from "
                   "imm1; pass imm1 (a number or [P, 1] tile)", span)
    y = _fp32_like(src, span)
    tensor_scalar(y, src, op0, imm0, reverse0)
    zeros = _C.zeros(list(src.shape), _C.DType.float32, _C.Memory.sbuf, "", span)
    start = _acc.start("vector", cmd, _acc.IDENTITY[scan], imm1, src.shape[0],
                       "tensor_scalar_cumulative", span)
    # the registers keep fp32 values: a narrower dst gets the scan's values converted
    out = dst if dst.dtype == _C.DType.float32 or cmd == _cmd_set.idle else _fp32_like(src, span)
    _C.tensor_tensor_scan(out, y, zeros, _operand(start), scan, "add", False, False, span)
    _acc.finish_scan("vector", cmd, out, span)
    if out is not dst:
        tensor_copy(dst, out)


@_eager.op(writes=("dst", "reduce_res"))
def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None,
                         reduce_res_negate=False, name=None):
    """dst = data op0 operand0; reduce_res ([P, 1]) = reduce_op over the free dims of the fp32
    result, chained through the Vector engine's registers by reduce_cmd (load_reduce starts
    from reduce_init; reduce_res_negate negates it)."""
    span = user_span()
    cmd = _cmd(reduce_cmd, "tensor_scalar_reduce", tuple(_cmd_set), span)
    op = _reduce_op(reduce_op, "tensor_scalar_reduce", span)
    if reduce_res is None and cmd == _cmd_set.idle:
        tensor_scalar(dst, data, op0, operand0, reverse0)
        return
    if cmd == _cmd_set.load_reduce and reduce_init is None:
        user_error("unknown-arg", "tensor_scalar_reduce: reduce_cmd=load_reduce needs "
                   "reduce_init (a number or a [P, 1] tile)", span)
    tmp = dst if dst.dtype == _C.DType.float32 else _fp32_like(data, span)
    tensor_scalar(tmp, data, op0, operand0, reverse0)
    partial = _column_fp32(data, span)
    tensor_reduce(partial, op, tmp, _free_axes(tmp))
    value = _acc.chain("vector", cmd, op, "tensor_scalar_reduce", span, own=partial,
                       init=reduce_init, wanted=reduce_res is not None)
    if reduce_res is not None:
        _finish_reduce(reduce_res, value, op, None, reduce_res_negate, span)
    if tmp is not dst:
        tensor_copy(dst, tmp)


@_eager.op(writes=("dst", "reduce_res"))
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """dst = op(data * scale + bias) and reduce_res ([P, 1]) = reduce_op over its free dims."""
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
               reduce_res=reduce_res)


# activate2's stage ops: (op0, op1) pairs NKI allows, after the aliases below.
_ACT2_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"),
               ("add", "bypass"), ("subtract", "bypass"), ("bypass", "bypass")}
_ACT2_ALIAS = {"mul": "multiply", "sub": "subtract", "copy": "bypass", "None": "bypass"}
_ACT2_REDUCE = {"add", "sum", "maximum", "max", "minimum", "min", "abs_max", "abs_min"}


@_eager.op(writes=("dst", "reduce_res"))
def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False,
              reverse1=False, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
              name=None):
    """dst = op((data op0 imm0) op1 imm1) (imm0/imm1 numbers or [P, 1] tiles; the stages in
    fp32; (op0, op1) one of NKI's pairs, nl.bypass skipping a stage); op nl.prelu is
    max(t, 0) + relu_param * min(t, 0). reduce_op (add, max, min, abs_max, abs_min) over the
    free dims of the result, in fp32, goes through the Scalar engine's registers as
    activation's (reset_reduce, reduce, reset); reduce_res ([P, 1]) receives them."""
    span = user_span()
    cmd = _cmd(reduce_cmd, "activate2", (_cmd_set.idle, _cmd_set.reset, _cmd_set.reduce,
                                         _cmd_set.reset_reduce), span)
    names = []
    for what, o in (("op0", op0), ("op1", op1)):
        n = "bypass" if o is None else _op(o)
        names.append(_ACT2_ALIAS.get(n, n))
    if tuple(names) not in _ACT2_PAIRS:
        user_error("unsupported", f"activate2: (op0, op1) = ({names[0]}, {names[1]}) is not one "
                   "of NKI's pairs (multiply, add), (multiply, subtract), (multiply, bypass), "
                   "(add, bypass), (subtract, bypass), (bypass, bypass)", span)
    if reduce_res is not None and cmd == _cmd_set.idle:
        user_error("unsupported", "activate2(reduce_res=...) with reduce_cmd=idle: idle leaves "
                   "the accumulator registers alone, so reduce_res would get nothing of this "
                   "instruction; use reduce_cmd=reduce_cmd.reset_reduce (or reduce)", span)
    rop = None
    if cmd != _cmd_set.idle:
        rop = "add" if reduce_op is None else _op(reduce_op)
        if rop not in _ACT2_REDUCE:
            user_error("reduce-op", f"activate2: reduce_op={rop!r} is not supported (add, "
                       "maximum, minimum, abs_max or abs_min)", span)
    stages = [(n, v, r) for n, v, r in zip(names, (imm0, imm1), (reverse0, reverse1))
              if n != "bypass"]
    t = _fp32_like(data, span)
    if not stages:
        tensor_copy(t, data)
    else:
        (n0, v0, r0), rest = stages[0], stages[1:]
        n1, v1, r1 = rest[0] if rest else (None, None, False)
        tensor_scalar(t, data, n0, v0, r0, n1, v1, r1)
    fn = _op(op)
    if fn == "prelu":  # max(t, 0) + relu_param * min(t, 0)
        neg = _fp32_like(data, span)
        tensor_scalar(neg, t, "minimum", 0.0, False, "multiply", float(relu_param))
        tensor_scalar(t, t, "maximum", 0.0)
        tensor_tensor(t, t, neg, "add")
        fn = "copy"
    if cmd == _cmd_set.idle:
        activation(dst, fn, t)
        return
    partial = _column_fp32(data, span)
    out = dst if dst.dtype == _C.DType.float32 else _fp32_like(data, span)
    if cmd == _cmd_set.reset:  # the registers cleared; this instruction's data not added
        activation(out, fn, t)
    elif rop in ("abs_max", "abs_min"):
        activation(out, fn, t)
        _magnitude_reduce(partial, rop, out, span)
    else:  # (not the public activation: a reduce_res there sets the registers)
        _activation_op(out, fn, t, None, 1.0, rop, partial, span)
    value = _acc.chain("scalar", cmd, rop, "activate2", span, own=partial, wanted=True)
    if reduce_res is not None:
        tensor_copy(reduce_res, value)
    if out is not dst:
        tensor_copy(dst, out)


def _magnitude_reduce(partial, rop, x, span):
    """partial ([P, 1] fp32) = the element of x (fp32) of largest (abs_max) or smallest
    (abs_min) magnitude over the free dims: the larger by magnitude of the max and the min, or
    the smallest magnitude m, positive when +m occurs."""
    axes = _free_axes(x)
    other = _column_fp32(x, span)
    if rop == "abs_max":
        tensor_reduce(partial, "maximum", x, axes)
        tensor_reduce(other, "minimum", x, axes)
        tensor_tensor(partial, partial, other, "abs_max")
        return
    mag = _fp32_like(x, span)
    tensor_scalar(mag, x, "abs", 0.0)
    tensor_reduce(partial, "minimum", mag, axes)
    tensor_scalar(mag, x, "equal", partial)  # 1 where the element is +m
    tensor_reduce(other, "maximum", mag, axes)
    tensor_scalar(other, other, "multiply", 2.0, False, "subtract", 1.0)  # +1 or -1
    tensor_tensor(partial, partial, other, "multiply")


@_eager.op(writes=("dst",))
def reciprocal(dst, data, name=None):
    """dst = 1 / data, computed in fp32 (Vector engine)."""
    tensor_scalar(dst, data, "reciprocal", 0.0)


@_eager.op(writes=("dst", "reduce_res"))
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                reduce_init=0.0, name=None):
    """dst = exp(src - max_value) (a number or [P, 1] tile); with reduce_cmd other than idle,
    the sum over the free dims goes through the Vector engine's registers (load_reduce starts
    from reduce_init, reduce adds onto the previous instruction's) into reduce_res ([P, 1])."""
    span = user_span()
    cmd = _cmd(reduce_cmd, "exponential", tuple(_cmd_set), span)
    if cmd == _cmd_set.idle and reduce_res is not None:
        user_error("unsupported", "exponential(reduce_res=...) with reduce_cmd=idle: the sum is "
                   "only kept with reduce_cmd=reduce_cmd.reset_reduce (or load_reduce)", span)
    if cmd != _cmd_set.load_reduce and isinstance(reduce_init, (int, float)) and reduce_init:
        user_error("unknown-arg", f"exponential: reduce_init={reduce_init} applies only with "
                   "reduce_cmd=load_reduce", span)
    if isinstance(max_value, _C.Tensor):
        bias = _column_fp32(src, span)
        tensor_scalar(bias, max_value, "multiply", -1.0)
    else:
        m = float(_operand(max_value))
        bias = None if m == 0.0 else _C.full([src.shape[0], 1], -m, _C.DType.float32,
                                             _C.Memory.sbuf, "", span)
    if cmd == _cmd_set.idle:
        activation(dst, "exp", src, bias=bias)
        return
    partial = _column_fp32(src, span)
    activation(dst, "exp", src, bias=bias, reduce_op="add", reduce_res=partial)
    value = _acc.chain("vector", cmd, "add", "exponential", span, own=partial,
                       init=reduce_init, wanted=reduce_res is not None)
    if reduce_res is not None:
        tensor_copy(reduce_res, value)


def _select_reduce_res(reduce_res, selected, reduce_op, cmd, fn, span):
    """reduce_res and the Vector engine's registers after a selection (`selected`: the fp32
    tile of ours the instruction wrote)."""
    if reduce_res is None and cmd == _cmd_set.idle:
        return
    op = _reduce_op(reduce_op, fn, span)
    if cmd == _cmd_set.load_reduce:
        user_error("unsupported", f"{fn}: reduce_cmd=load_reduce needs an initial value, which "
                   f"{fn} does not take; use reduce_cmd.reset_reduce", span)
    if reduce_res is not None and cmd in (_cmd_set.idle, _cmd_set.reset_reduce):
        tensor_reduce(reduce_res, op, selected, _free_axes(selected))  # one instruction
        if cmd == _cmd_set.idle:
            return
    value = _acc.chain("vector", cmd, op, fn, span, src=selected,
                       wanted=reduce_res is not None and cmd != _cmd_set.reset_reduce)
    if reduce_res is not None and cmd != _cmd_set.reset_reduce:
        tensor_copy(reduce_res, value)


@_eager.op(writes=("dst", "reduce_res"))
def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=None, reverse_pred=False, name=None):
    """dst = on_true where predicate != 0 (== 0 with reverse_pred), else on_false (a number or
    [P, 1] tile); reduce_res ([P, 1]) = reduce_op (default max) over the free dims of dst."""
    span = user_span()
    cmd = _cmd(reduce_cmd, "select_reduce", tuple(_cmd_set), span)
    if not isinstance(predicate, _C.Tensor):
        raise TypeError(f"select_reduce: predicate must be a tile, got {type(predicate).__name__}")
    a, b = (on_false, on_true) if reverse_pred else (on_true, on_false)
    chosen = _C.where(predicate, _operand(a), _operand(b), _C.DType.float32, span)
    tensor_copy(dst, chosen)
    _select_reduce_res(reduce_res, chosen, "maximum" if reduce_op is None else reduce_op, cmd,
                       "select_reduce", span)


_RANGE_CMP = {"equal", "less", "less_equal", "greater", "greater_equal", "not_equal"}


@_eager.op(writes=("dst", "reduce_res"))
def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=reduce_cmd.reset_reduce, reduce_res=None, reduce_op=None,
                 range_start=0, on_false_value=fp32.min, name=None):
    """dst = on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1) for i = range_start
    + the element's flat free index (bounds numbers or [P, 1] tiles), else on_false_value;
    reduce_res ([P, 1]) = reduce_op (default max) over the free dims, in fp32."""
    span = user_span()
    cmd = _cmd(reduce_cmd, "range_select", tuple(_cmd_set), span)
    if np.float32(on_false_value) != np.float32(fp32.min):
        # NKI 0.3: "Due to hardware constraints, this must be FP32_MIN" (NKI 0.2 silently
        # overrode it; the legacy API's range_select passes fp32.min). Compared as float32: a
        # kernel writes the constant as the decimal -3.4028235e38, which rounds to it.
        user_error("operand", f"range_select: on_false_value={on_false_value!r}; the hardware "
                   f"writes fp32 min ({fp32.min:.8g}) where the range excludes an element, "
                   "so NKI requires on_false_value=nl.fp32.min (select another value "
                   "afterwards, e.g. with nisa.affine_select or tensor_scalar)", span)
    for what, op in (("comp_op0", comp_op0), ("comp_op1", comp_op1)):
        if _op(op) not in _RANGE_CMP:
            user_error("unknown-arg", f"range_select: {what}={_op(op)!r} is not a comparison "
                       "(nl.equal, nl.less, nl.less_equal, nl.greater, nl.greater_equal)", span)
    x = on_true_tile
    shape = list(x.shape)
    idx = _fp32_like(x, span)
    strides = [math.prod(shape[d + 1:]) for d in range(1, len(shape))]
    start = float(range_start)
    _C.iota(idx, [(s, n) for s, n in zip(strides, shape[1:])] or [(0, 1)],
            int(start) if start.is_integer() else 0, 0, span)
    if not start.is_integer():
        tensor_scalar(idx, idx, "add", start)
    keep = _fp32_like(x, span)
    tensor_scalar(keep, idx, comp_op0, bound0)
    tensor_scalar(idx, idx, comp_op1, bound1)
    tensor_tensor(keep, keep, idx, "multiply")
    chosen = _C.where(keep, x, float(on_false_value), _C.DType.float32, span)
    tensor_copy(dst, chosen)
    _select_reduce_res(reduce_res, chosen, "maximum" if reduce_op is None else reduce_op, cmd,
                       "range_select", span)


# NKI's documented permutations: dst dim i is src dim axes[i].
_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def transpose_by_dma(dst, src, axes, fn, span, oob_mode=None):
    """dst = src with its dims permuted (dst dim i = src dim axes[i]): one DMA copy from the
    transposing view of src (ir.hpp Access::order). An on-chip src goes through HBM scratch
    first (a view on chip keeps its partition dim first, a DMA engine does not need to); rows
    chosen at run time (t.ap(..., vector_offset=rows)) are gathered into SBUF before that."""
    from .access import BitcastView, IndirectView
    from .views import permute
    if isinstance(dst, BitcastView):  # t.ap(dtype=...): transposed into a tile, then its bytes
        tile = _C.ndarray(list(dst.shape), dst.dtype, _C.Memory.sbuf, "", span)
        transpose_by_dma(tile, src, axes, fn, span, oob_mode)
        _C.dma_copy_bitcast(dst.view, tile, span)
        return
    if isinstance(src, BitcastView):  # its bytes as src.dtype elements first (nki-library's
        # topk_reduce reads int32 indices packed into bf16 rows)
        scratch = _C.ndarray(list(src.shape), src.dtype, _C.Memory.hbm, "", span)
        _C.dma_copy_bitcast(scratch, src.view, span)
        src = scratch
    shape = list(src.shape)
    rank = len(shape)
    if rank not in _TRANSPOSE_AXES:
        user_error("shape", f"{fn}: src has {rank} dims {shape}; a DMA transpose takes 2 to 4",
                   span)
    axes = _TRANSPOSE_AXES[rank] if axes is None else tuple(int(a) for a in axes)
    if axes != _TRANSPOSE_AXES[rank]:
        user_error("unsupported", f"{fn}: axes={axes} is not supported for a {rank}-D src; "
                   f"NKI's DMA transpose takes axes={_TRANSPOSE_AXES[rank]}", span)
    want = [shape[a] for a in axes]
    if list(dst.shape) != want:
        user_error("shape", f"{fn}: dst has shape {list(dst.shape)} but src {shape} transposed "
                   f"by axes={axes} has shape {want}", span)
    if dst.dtype != src.dtype:
        user_error("dtype", f"{fn}: dst is {dst.dtype.name_} but src is {src.dtype.name_} (a "
                   "DMA transpose does not cast)", span)
    if isinstance(src, IndirectView):
        rows = _C.ndarray(shape, src.dtype, _C.Memory.sbuf, "", span)
        mode = _C.oob_mode.error if oob_mode is None else _C.oob_mode(int(oob_mode))
        _C.dma_copy_rows(rows, src.view, src.rows, True, mode, span)
        src = rows
    if not isinstance(src, _C.Tensor):  # a reshaped view: a copy per run of its longest dim
        run = max(range(rank), key=lambda d: shape[d])
        others = [d for d in range(rank) if d != run]
        for pos in itertools.product(*(range(shape[d]) for d in others)):
            at = dict(zip(others, pos))
            s_key = tuple(slice(None) if d == run else slice(at[d], at[d] + 1)
                          for d in range(rank))
            d_key = tuple(slice(None) if a == run else slice(at[a], at[a] + 1) for a in axes)
            _C.dma_copy(dst[d_key], src[s_key], span)
        return
    if src.buffer in (_C.Memory.sbuf, _C.Memory.psum):
        scratch = _C.ndarray(shape, src.dtype, _C.Memory.hbm, "", span)
        _C.dma_copy(scratch, src, span)
        src = scratch
    _C.dma_copy(dst, permute(src, axes), span)


@_eager.op(writes=("dst",))
def dma_transpose(dst, src, axes=None, dge_mode=None, oob_mode=None, priority=None, name=None):
    """dst (SBUF) = src (HBM or SBUF) with dims permuted: axes (1, 0), (2, 1, 0) or
    (3, 1, 2, 0) (the default for src's rank); dst dim i is src dim axes[i]."""
    span = user_span()
    if dst.buffer != _C.Memory.sbuf:
        user_error("memory", f"dma_transpose: dst '{dst.name}' is in {dst.buffer.name}; a DMA "
                   "transpose writes SBUF", span)
    transpose_by_dma(dst, src, axes, "dma_transpose", span, oob_mode)


__all__ = ["scalar_tensor_tensor", "tensor_scalar_cumulative", "tensor_scalar_reduce",
           "activation_reduce", "activate2", "reciprocal",
           "exponential", "select_reduce", "range_select", "dma_compute", "dma_transpose",
           "sequence_bounds",
           "nonzero_with_count", "topk"]
