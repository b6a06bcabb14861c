"""The engines' accumulator registers (NKI_API.md 5.3): 128 fp32 registers per engine, one per
partition, through which `reduce_cmd` chains instructions. An instruction with
`reduce_cmd.reduce` adds its own reduction onto what the engine's previous instruction left
(`reset_reduce` starts a chain, `load_reduce` starts it from a given value, `reset` clears it,
`idle` leaves it alone); its `reduce_res`, if given, receives the registers' value.

neuron keeps the registers as data flow, not as hidden state: an engine's registers are the
[P, 1] fp32 tile holding their value (or, after a `reset_reduce` whose `reduce_res` nobody asked
for, the reduction not computed yet), and a `reduce` combines its own reduction with that tile
into a new one. So a kernel that never chains pays nothing. Reading them across a rolled loop's
boundary (a chain started before `nl.affine_range` and continued inside it) unrolls the loops
(unroll.need_unrolled), so each iteration reads its predecessor's value. Eager mode runs one
instruction at a time and keeps no registers: a `reduce` there is an error that says so.

Engines: "vector" (tensor_scalar_reduce, tensor_scalar_cumulative, exponential, range_select,
select_reduce) and "scalar" (activation, activation_reduce, activate2). A Scalar-engine
`activation(..., reduce_res=r)` that starts a chain writes r only (an Alias): continuing from it
restarts the trace with the registers kept in a tile of their own (unroll.need_registers)."""
import threading

from . import _C, eager as _eager, unroll as _unroll
from .errors import user_error
from .isa_constants import reduce_cmd

# The identity of each reduction: a `reset` sets the registers to it, and a scan without
# registers (isa_composed.tensor_scalar_cumulative) starts from it.
IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": float("-inf"),
             "minimum": float("inf"), "bitwise_or": 0.0, "logical_or": 0.0, "abs_max": 0.0,
             "abs_min": float("inf")}


class Alias:
    """Registers whose value an instruction wrote only to its reduce_res tile (the Scalar
    engine's common `activation(..., reduce_cmd=reset_reduce, reduce_res=r)`, which should cost
    no extra instruction): a chain that continues from it restarts the trace keeping a copy
    of their own (unroll.need_registers), since the kernel may write r in between."""

    def __init__(self, tile):
        self.tile = tile


class _Registers(threading.local):
    serial = None  # the trace (_C.trace_serial()) the values belong to
    values = None  # engine -> (value, the loops traced when it was made)


_regs = _Registers()


def _values():
    serial = _C.trace_serial()
    if _regs.serial != serial:
        _regs.serial, _regs.values = serial, {}
    return _regs.values


def _column(p, span):
    return _C.ndarray([p, 1], _C.DType.float32, _C.Memory.sbuf, "", span)


def _reduced(op, src, span):
    """A new [P, 1] fp32 tile: op over the free dims of src."""
    t = _column(src.shape[0], span)
    _C.tensor_reduce(t, op, src, list(range(1, len(src.shape))), False, span)
    return t


def _materialized(value, span):
    return _reduced(*value, span) if isinstance(value, tuple) else value


def _previous(engine, p, fn, span):
    """The registers' value before this instruction, a [p, 1] fp32 tile (reduce_cmd.reduce)."""
    if _eager.one_op():
        user_error("unsupported", f"{fn}: reduce_cmd=reduce_cmd.reduce in eager mode: eager "
                   "mode runs one instruction at a time and keeps no accumulator registers "
                   "between them; run the kernel traced (mode='simulate' or 'native')", span)
    entry = _values().get(engine)
    if entry is None:
        user_error("reduce-cmd", f"{fn}: reduce_cmd=reduce_cmd.reduce adds onto the {engine} "
                   "engine's accumulator registers, and no earlier instruction of this kernel "
                   "set them; start the chain with reduce_cmd.reset_reduce (or load_reduce)",
                   span)
    value, loops = entry
    if loops != _unroll.loops_seen():  # set on the other side of a rolled loop's boundary
        _unroll.need_unrolled()
    if isinstance(value, Alias):
        _unroll.need_registers()
        value = value.tile  # no restart possible: its reduce_res as it is now
    value = _materialized(value, span)
    if value.shape[0] != p:
        user_error("reduce-cmd", f"{fn}: reduce_cmd=reduce_cmd.reduce on {p} partitions, but "
                   f"the {engine} engine's registers were set by an instruction on "
                   f"{value.shape[0]}", span)
    return value


def _set(engine, value):
    _values()[engine] = (value, _unroll.loops_seen())


def alias(engine, tile):
    """An instruction set the registers of `engine` and wrote their value to `tile` (its
    reduce_res) only (see Alias)."""
    _set(engine, Alias(tile))


def chain(engine, cmd, op, fn, span, src=None, own=None, init=None, wanted=False):
    """The registers of `engine` after an instruction with reduce_cmd `cmd` whose own reduction
    is `op` over the free dims of `src` (an fp32 tile of the instruction's own, never written
    again), or is `own` (that reduction already made, [P, 1] fp32, the instruction's own).
    Returns the [P, 1] fp32 tile its reduce_res receives when `wanted`: the registers' value,
    or with `idle` (registers untouched) the instruction's own reduction."""
    cmd = reduce_cmd(int(cmd))
    p = (own if own is not None else src).shape[0]
    if cmd == reduce_cmd.idle:
        return (own if own is not None else _reduced(op, src, span)) if wanted else None
    if cmd == reduce_cmd.reset:
        value = _C.full([p, 1], IDENTITY.get(op, 0.0), _C.DType.float32, _C.Memory.sbuf, "",
                        span)
    elif cmd == reduce_cmd.reset_reduce and not wanted and own is None:
        _set(engine, (op, src))  # computed only if a later instruction reads it
        return None
    else:
        value = own if own is not None else _reduced(op, src, span)
        if cmd == reduce_cmd.reduce:
            previous = _previous(engine, p, fn, span)
            if op in ("abs_max", "abs_min"):  # activate2's magnitude reductions
                from .isa import _by_magnitude
                _by_magnitude(value, op, previous, value, span)
            else:
                _C.tensor_tensor(value, previous, value, op, span)
        elif cmd == reduce_cmd.load_reduce:
            from .isa import tensor_scalar
            tensor_scalar(value, value, op, init)
    _set(engine, value)
    return value


def start(engine, cmd, identity, init, p, fn, span):
    """The value a scan (tensor_scalar_cumulative) starts from: the identity (idle,
    reset_reduce, reset), `init` (load_reduce) or the registers (reduce)."""
    cmd = reduce_cmd(int(cmd))
    if cmd == reduce_cmd.reduce:
        return _previous(engine, p, fn, span)
    return init if cmd == reduce_cmd.load_reduce else identity


def finish_scan(engine, cmd, dst, span):
    """After a scan into dst (fp32): the registers hold each partition's last value."""
    if reduce_cmd(int(cmd)) == reduce_cmd.idle:
        return
    shape = list(dst.shape)
    last = dst[(slice(None),) + tuple(slice(n - 1, n) for n in shape[1:])]
    value = _column(shape[0], span)
    _C.tensor_copy(value, last, span)
    _set(engine, value)
