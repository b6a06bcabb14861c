"""Rolled loops unrolled where the kernel's Python needs an index value (docs/python.md, "Loops").

nl.affine_range / nl.sequential_range are traced once, with a symbolic index: the fast path, and
all most kernels need. In NKI 0.3+ they are Python ranges, so published kernels also use the
index as a number: `tiles[k]` (a Python list of tiles), `range(k)`, `if k == 0`, `min(k, n)`.
When that happens the trace restarts with that loop unrolled (its index is an int then), and
with it every rolled loop that had already run to its end: their bodies may have built what the
value is used on (a list filled by `tiles.append(t)` must hold one tile per iteration). The
loops still open around the use stay rolled: their bodies are traced once either way. A trace
that fails with an IndexError while loops were rolled (say, a list built across iterations of
an enclosing loop) is retried with every loop unrolled. Program ids, registers and runtime loop
indices have no value at trace time and are never unrolled."""
import re
import threading

from . import _C


class NeedsValue(Exception):
    """The running trace needs the value of a rolled loop's index: restart (trace() catches
    it; it never reaches the user)."""


class NeedsGrid(Exception):
    """The running trace needs the launch grid's size ("grid": nl.num_programs as ints), the
    program ids' values ("programs": each program traced with its ids as ints) or the cores to
    meet at collectives ("cores": per program, interleaved at them, collectives.py): restart in
    that mode (trace() catches it)."""


class NeedsRegisters(Exception):
    """The running trace continues a Scalar-engine reduce_cmd chain from an instruction that
    left the registers' value only in its reduce_res tile (which the kernel may have written
    since): restart keeping the registers' own copy (accumulators.py; trace() catches it)."""


_GRID_MODES = (None, "grid", "programs", "cores")  # each one knows more than the one before


class _Sites(threading.local):
    active = False      # tracing under trace() (restarts possible)
    unroll = frozenset()  # loop sites to unroll in this trace ("*": all)
    opened = ()         # sites of the rolled loops opened so far
    closed = frozenset()  # sites of the rolled loops that have run to their end
    loops = None        # loop variable -> its site
    partly = False      # the last trace unrolled loops for values and kept others rolled
    rolled = False      # the last trace kept loops rolled
    grid_mode = None    # None (program ids and grid size symbolic), "grid" or "programs"
    keep_registers = False  # Scalar-engine reduce_res values copied into registers of their own


_state = _Sites()


def site(span):
    return (span.file, span.line, span.column)


def unrolled(span):
    """Should the loop at span be unrolled in this trace?"""
    return _state.active and ("*" in _state.unroll or site(span) in _state.unroll)


def opened(var, span):
    """A rolled loop (variable var) was opened at span."""
    if _state.active:
        _state.loops[var] = site(span)
        _state.opened = _state.opened + (site(span),)


def closed(span):
    """The rolled loop opened at span has run to its end."""
    if _state.active:
        _state.closed = _state.closed | {site(span)}


def need_value(a):
    """Kernel Python needs the value of Affine a: restart with the loops it depends on, and
    the rolled loops already closed, unrolled. Returns when a depends on no rolled loop (the
    caller then raises its own error)."""
    if not _state.active:
        return
    names = re.findall(r"[A-Za-z_]\w*", str(a))
    mine = frozenset(_state.loops[n] for n in names if n in _state.loops)
    if mine:
        raise NeedsValue(mine | _state.closed)
    if any(re.fullmatch(r"pid\d", n) for n in names) and not per_program():
        raise NeedsGrid("programs")
    if any(re.fullmatch(r"npid\d", n) for n in names) and _state.grid_mode is None:
        raise NeedsGrid("grid")


def grid_mode():
    """How the running (or last) trace sees the grid: None, "grid", "programs" or "cores"."""
    return _state.grid_mode


def per_program():
    """Is each program traced on its own (its ids ints) in the running (or last) trace?"""
    return _state.grid_mode in ("programs", "cores")


def tracing():
    """Is a trace running under trace() (so that it can restart)?"""
    return _state.active


def loops_seen():
    """The rolled loops opened and closed so far in the running trace: two places in a trace
    that see the same are inside the same loop bodies (the same iteration)."""
    return (_state.opened, _state.closed) if _state.active else None


def need_unrolled():
    """The kernel's Python needs to be outside every rolled loop (a core collective): restart
    with the loops traced so far unrolled. Returns when they already are."""
    if not _state.active:
        return
    sites = frozenset(_state.opened) | _state.closed
    if not sites <= _state.unroll and "*" not in _state.unroll:
        raise NeedsValue(sites)


def keep_registers():
    """Does the running trace keep the Scalar engine's registers in a tile of their own even
    where an instruction also writes them to its reduce_res (a kernel that chains them)?"""
    return _state.active and _state.keep_registers


def need_registers():
    """A reduce_cmd chain reads registers whose value is only in a reduce_res tile: restart
    keeping copies of their own. Returns when that cannot help (no restart possible)."""
    if _state.active and not _state.keep_registers:
        raise NeedsRegisters()


def trace(run, unroll_all=False):
    """run() (one trace), restarted with more loops unrolled while it needs index values
    (unroll_all: every loop unrolled from the start)."""
    saved = (_state.active, _state.unroll, _state.opened, _state.closed, _state.loops,
             _state.keep_registers)
    unroll = frozenset(["*"]) if unroll_all else frozenset()
    _state.partly, _state.grid_mode, _state.keep_registers = False, None, False
    try:
        while True:
            _state.active, _state.unroll, _state.opened = True, unroll, ()
            _state.closed, _state.loops = frozenset(), {}
            try:
                result = run()
                _state.partly = bool(unroll) and "*" not in unroll and bool(_state.opened)
                _state.rolled = "*" not in unroll and bool(_state.opened)
                return result
            except NeedsValue as e:
                if e.args[0] <= unroll:  # cannot happen: an unrolled loop's index is an int
                    raise RuntimeError("neuron: a loop index needed a value after unrolling")
                unroll = unroll | e.args[0]
            except NeedsGrid as e:
                if _GRID_MODES.index(e.args[0]) <= _GRID_MODES.index(_state.grid_mode):
                    raise RuntimeError("neuron: a program id needed a value after tracing "
                                       "per program")
                _state.grid_mode = e.args[0]
            except NeedsRegisters:
                if _state.keep_registers:
                    raise RuntimeError("neuron: registers needed after keeping them")
                _state.keep_registers = True
            except IndexError:
                if not _state.opened or "*" in unroll:
                    raise
                unroll = frozenset(["*"])
    finally:
        (_state.active, _state.unroll, _state.opened, _state.closed, _state.loops,
         _state.keep_registers) = saved


def partly_unrolled():
    """Did the last trace unroll some loops for their values and keep others rolled?"""
    return _state.partly


def kept_rolled_loops():
    """Did the last trace keep any loop rolled?"""
    return _state.rolled


def _index(self):
    if self.is_constant():
        return self.constant
    need_value(self)
    raise TypeError(f"'{self}' (a program id or register) has no value at trace time; it can "
                    "index tensors, not Python lists")


_C.Affine.__index__ = _index
_C.Affine.__int__ = _index
