"""The cross-core instructions of nki.isa (`core_barrier`, `sendrecv`) and the legacy
`nl.all_reduce` between the programs of a launch grid (the cores of `kernel[2]`, `nl.nc(2)`, an
LNC of 2); the pairing of rounds also serves nki.collectives between the ranks of a run_ranks
launch (ranks.py).

How the cores meet: a kernel that reaches a core collective is traced per program ("cores" in
unroll.py), every program's body at the top level of the one kernel body. Each collective call
seals the calling program's statements so far into a segment (its "phase"); when the last
program reaches the k-th collective, the exchanges of round k are emitted (for sendrecv, one DMA
copy per receiving program: its dst from the sender's src), and when every program has ended
the body is ordered phase by phase: phase k of every program, the round-k copies, then phase
k + 1, where within a phase the programs take turns statement by statement (the top-level
statements of their bodies: a loop is one), as concurrent cores do. That is a schedule every
real execution of the barrier agrees with: whatever a core wrote before a collective is visible
to every core after it. `kernel[2]` traced per program without collectives (the two cores of an
LNC-2 NeuronCore, kernel.py `_cores`) is one such phase. The kernel compiles for all its cores'
SBUF and PSUM in one simulated core (target "trn2x2", kernel.py _target_for), each program's
tiles in its own core's part (core_scope; allocate.cpp checks each core against its own
memory). A collective inside a rolled loop unrolls the loops traced so far (unroll.py); one
inside a runtime loop or conditional (fori_loop, if_else) is refused, since its rounds could not
be paired at trace time."""
import contextlib
import math
import threading

import numpy as np

from . import _C
from . import eager as _eager
from . import unroll
from ._span import user_span
from .errors import user_error

class _Rounds(threading.local):
    """The collectives of the programs traced so far in "cores" mode (kernel._per_program); per
    thread, as threads trace concurrently."""

    def begin(self, n, ranks=None):
        self.n = n  # the programs that meet (in a run_ranks launch: ranks x programs per rank)
        # a run_ranks launch: its number of ranks (program p is rank p // (n // ranks)'s
        # program p % (n // ranks)), and the rank being traced (ranks.py); else None
        self.ranks, self.rank = ranks, None
        self.core_map = None  # while a round's exchange is emitted: its calls' programs
        self.calls = [[] for _ in range(n)]  # per program: (what, span, exchange) per round
        # per program, per phase: the segments of its statements (one each), in order
        self.phases = [[] for _ in range(n)]
        self.copies = {}  # round -> the segment of its exchange copies
        self.slots = {}  # (rank or None, round) -> the HBM tensor an all_reduce round fills

    def end_program(self, p):
        segs = _C.seal_statements()
        if segs is None:  # cannot happen: a program's body ends at the top level
            raise RuntimeError("neuron: a program's body ended inside an open block")
        self.phases[p].append(segs)

    def per_rank(self):
        """The programs of each rank of a run_ranks launch (1 outside one)."""
        return self.n // self.ranks if self.ranks else 1

    def who(self, p):
        """How errors name program p: "program p", or in a run_ranks launch "rank r" (one
        program per rank) or "rank r's program q"."""
        if not self.ranks:
            return f"program {p}"
        m = self.per_rank()
        return f"rank {p}" if m == 1 else f"rank {p // m}'s program {p % m}"

    def everyone(self):
        return "every program of every rank" if self.ranks else "every core of the grid"

    def core(self, i):
        """The core of the i-th call of the exchange being emitted (its program)."""
        return self.core_map[i] if self.core_map is not None else i

    def finish(self, span):
        counts = [len(c) for c in self.calls]
        if len(set(counts)) > 1:
            p = counts.index(min(counts))
            what = "collectives" if self.ranks else "core collectives (core_barrier, sendrecv)"
            user_error("collectives", f"{self.who(p)} reaches {counts[p]} {what} but "
                       f"{self.who(counts.index(max(counts)))} reaches {max(counts)}; "
                       f"{self.everyone()} must call the same collectives in the same order",
                       span)
        order = []
        for k in range(counts[0] + 1):
            phase = [self.phases[p][k] for p in range(self.n)]
            # Between collectives the cores run concurrently: their statements take turns, the
            # first of every program, then the second, ... A core that writes HBM its sibling
            # has just cleared (nki-library zeroes a shared output on every core, then each
            # stores its shard) sees what concurrent cores see; programs that share nothing
            # compute the same in any order. Each core's tiles are in its own memory
            # (Buffer::core), so taking turns makes no core's SBUF or PSUM fuller.
            for i in range(max(map(len, phase))):
                order += [segs[i] for segs in phase if i < len(segs)]
            if k in self.copies:
                order.append(self.copies[k])
        _C.order_segments(order, span)


_rounds = _Rounds()


def _shown(what):
    """How the user's kernel names the collective `what`."""
    if what.startswith("nki."):
        return what
    return "nl.all_reduce" if what == "all_reduce" else f"nisa.{what}"


@contextlib.contextmanager
def core_scope(core):
    """The tiles created inside are `core`'s (its SBUF and PSUM: Buffer::core, allocate.cpp)."""
    before = _C.set_core(core)
    try:
        yield
    finally:
        _C.set_core(before)


def _program_rank():
    """The calling program's index in the grid (row-major)."""
    from .language import _State
    rank = 0
    for i, g in zip(_State.program, _State.grid):
        rank = rank * g + i
    return rank


def _participant():
    """The calling program's index among those that meet: in a run_ranks launch, the rank's
    programs come after those of the ranks before it."""
    r = _rounds
    if getattr(r, "rank", None) is None:
        return _program_rank()
    return r.rank * r.per_rank() + _program_rank()


def _in_ranks():
    """Is a run_ranks launch being traced (its programs already traced one by one)?"""
    return getattr(_rounds, "rank", None) is not None


def _grid_size(what, span):
    """The number of programs of the launch grid (restarting the trace to learn it)."""
    from .language import _State
    if _eager.launching():
        user_error("collectives", f"{_shown(what)} needs a compiled kernel: eager mode runs the "
                   "programs of a grid one after another; use mode='simulate' or 'native'", span)
    _C.require_trace(span)
    if _State.grid is None:
        if unroll.grid_mode() is None and unroll.tracing():
            raise unroll.NeedsGrid("grid")
        user_error("collectives", f"{_shown(what)} is only supported in a @neuron.kernel (or "
                   "nki.jit) kernel", span)
    return math.prod(_State.grid)


def _meet(what, span, exchange=None, rank=None):
    """The calling program reaches a core collective: seal its phase; the last program pairs the
    round's exchanges. exchange: (emit, this program's arguments); when the last program arrives,
    emit(every program's arguments, span) writes the round's copies. rank: the calling rank of a
    run_ranks launch (ranks.py): a collective between ranks (nki.collectives), where program q
    of each rank meets program q of the others; without it, a core collective among the
    programs of one grid (in a run_ranks launch, of each rank's grid)."""
    if rank is None and unroll.grid_mode() != "cores" and not _in_ranks():
        raise unroll.NeedsGrid("cores")
    r, p = _rounds, _participant()
    segs = _C.seal_statements()
    if segs is None:
        unroll.need_unrolled()  # restarts when rolled loops are open around the call
        user_error("collectives", f"{_shown(what)} inside a runtime loop or conditional "
                   "(nl.fori_loop, nl.while_loop, nl.if_else): the cores' rounds are paired when "
                   "the kernel is traced; call it outside, or use a Python loop", span)
    r.phases[p].append(segs)
    k = len(r.calls[p])
    r.calls[p].append((what, span, exchange))
    if p != r.n - 1:
        return
    kind = "" if r.ranks else "core "
    for q in range(r.n - 1):
        if len(r.calls[q]) <= k:
            user_error("collectives", f"{r.who(r.n - 1)} reaches its {kind}collective #{k + 1} "
                       f"({_shown(what)}) but {r.who(q)} reached only {len(r.calls[q])}; "
                       f"{r.everyone()} must call the same collectives in the same order", span)
        other, other_span = r.calls[q][k][:2]
        if other != what:
            user_error("collectives", f"{kind}collective #{k + 1}: {r.who(q)} calls "
                       f"{_shown(other)} (line {other_span.line}) where {r.who(p)} calls "
                       f"{_shown(what)}; {r.everyone()} must call the same collectives in the "
                       "same order", span)
    if exchange is not None:
        m = r.per_rank()
        if m == 1:  # one program per rank (or a grid's cores): one exchange among all
            groups = [list(range(r.n))]
        elif rank is not None:  # nki.collectives: program q of every rank, for each q
            groups = [[x * m + q for x in range(r.ranks)] for q in range(m)]
        else:  # a core collective: the programs of each rank, among themselves
            groups = [[x * m + q for q in range(m)] for x in range(r.ranks)]
        try:
            for g in groups:
                r.core_map = g if r.ranks else None
                exchange[0]([r.calls[q][k][2][1] for q in g], span)
        finally:
            r.core_map = None
        r.copies[k] = _C.seal_segment()


def _exchange(calls, span):
    """A round of sendrecv, calls[p] = (dst, src, send_to_rank, recv_from_rank, its line) of
    program p: each program's dst receives its sender's src (one DMA copy each; through a
    temporary when some program's dst is another's src)."""
    from . import isa
    from .language import ndarray, sbuf
    n = len(calls)
    for p, (dst, src, to, frm, line) in enumerate(calls):
        for rank, role in ((to, "send_to_rank"), (frm, "recv_from_rank")):
            if not 0 <= rank < n:
                user_error("collectives", f"nisa.sendrecv on program {p}: {role}={rank} is not "
                           f"a core of the grid (0 to {n - 1})", line)
    for p, (_, _, to, _, line) in enumerate(calls):
        if calls[to][3] != p:
            user_error("collectives", f"nisa.sendrecv: program {p} sends to program {to}, which "
                       f"receives from program {calls[to][3]}; sender and receiver must name "
                       "each other", line)
    dst_names = {getattr(c[0], "name", None) for c in calls}
    srcs = []
    for p, (dst, src, _, _, _) in enumerate(calls):
        if getattr(src, "name", None) in dst_names:  # copy it out before any dst is written
            with core_scope(_rounds.core(p)):  # in the sender's SBUF
                tmp = ndarray(list(src.shape), src.dtype, buffer=sbuf)
            isa.dma_copy(dst=tmp, src=src)
            src = tmp
        srcs.append(src)
    for p, (dst, _, _, frm, _) in enumerate(calls):
        isa.dma_copy(dst=dst, src=srcs[frm])


def core_barrier(data=None, cores=None, engine=None, name=None):
    """nisa.core_barrier(data, cores): every core of `cores` (default: the grid's) waits until
    all of them reach it, so what each wrote to `data` before is visible to all after."""
    span = user_span()
    n = _grid_size("core_barrier", span)
    if cores is not None:
        cores = sorted({int(c) for c in (cores if isinstance(cores, (tuple, list)) else [cores])})
        bad = [c for c in cores if not 0 <= c < n]
        if bad:
            user_error("collectives", f"nisa.core_barrier: cores={tuple(cores)} names core "
                       f"{bad[0]}, but the grid has {n} program(s) (cores 0 to {n - 1})", span)
        if len(cores) == 1:
            return  # one core waits for itself
        if len(cores) != n:
            user_error("collectives", f"nisa.core_barrier: cores={tuple(cores)} is part of a "
                       f"grid of {n} programs; neuron synchronizes all the grid's cores or one",
                       span)
    if n > 1:
        _meet("core_barrier", span)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=None, name=None):
    """nisa.sendrecv: sends src to core send_to_rank and receives dst from core recv_from_rank
    (a DMA copy between the cores' SBUF or HBM)."""
    span = user_span()
    n = _grid_size("sendrecv", span)
    to, frm = int(send_to_rank), int(recv_from_rank)
    if n == 1:
        if to != 0 or frm != 0:
            user_error("collectives", f"nisa.sendrecv: send_to_rank={to}, recv_from_rank={frm} "
                       "but the grid has one program (core 0); launch the kernel on a grid of "
                       "cores (kernel[2], nl.nc(2))", span)
        from . import isa
        isa.dma_copy(dst=dst, src=src)
        return
    _meet("sendrecv", span, (_exchange, (dst, src, to, frm, span)))


def all_reduce(x, op, program_axes, dtype=None, span=None):
    """The legacy nl.all_reduce: `op` over the tiles x of the programs that differ only along
    `program_axes`, returned to each of them (x's shape, `dtype` or x's). Each program writes x
    into its slot of an HBM tensor the grid shares, the programs meet at a barrier, and each
    reads its group's slots and combines them in program order, in fp32: so every program of a
    group gets the same bits."""
    from . import isa
    from .language import _State, float32, ndarray, psum, sbuf, shared_hbm
    span = span or user_span()
    n = _grid_size("all_reduce", span)
    if n > 1 and unroll.grid_mode() != "cores" and not _in_ranks():
        raise unroll.NeedsGrid("cores")
    grid = tuple(_State.grid)
    axes = program_axes if isinstance(program_axes, (tuple, list)) else (program_axes,)
    try:
        axes = sorted({int(a) for a in axes})
    except (TypeError, ValueError):
        user_error("collectives", f"nl.all_reduce: program_axes={program_axes!r} must be grid "
                   "axes (ints)", span)
    bad = [a for a in axes if not 0 <= a < len(grid)]
    if bad:
        user_error("collectives", f"nl.all_reduce: program_axes={tuple(axes)} names axis "
                   f"{bad[0]}, but the grid {grid} has axes 0 to {len(grid) - 1}", span)
    out = ndarray(list(x.shape), dtype or x.dtype, buffer=sbuf)
    if n == 1:
        isa.tensor_copy(dst=out, src=x)
        return out
    if x.buffer == psum:  # DMA reads SBUF
        t = ndarray(list(x.shape), x.dtype, buffer=sbuf)
        isa.tensor_copy(dst=t, src=x)
        x = t
    me = tuple(_State.program)
    r, rank = _rounds, _program_rank()
    k = len(r.calls[_participant()])
    slots = r.slots.get((r.rank, k))  # per rank of a run_ranks launch: its own HBM
    if slots is None:
        slots = r.slots[r.rank, k] = ndarray([n] + list(x.shape), x.dtype, buffer=shared_hbm)
    elif list(slots.shape[1:]) != list(x.shape) or slots.dtype != x.dtype:
        user_error("collectives", f"nl.all_reduce: program {rank} reduces a tile of shape "
                   f"{list(x.shape)} ({x.dtype}) where another program's is "
                   f"{list(slots.shape[1:])} ({slots.dtype}); every program of the grid must "
                   "pass the same shape and dtype", span)
    isa.dma_copy(dst=slots[rank], src=x)
    _meet("all_reduce", span)
    def group_tiles():  # loaded one at a time, in row-major rank order (_program_rank's)
        for q in range(n):
            ids = np.unravel_index(q, grid)
            if all(ids[a] == me[a] for a in range(len(grid)) if a not in axes):
                t = ndarray(list(x.shape), x.dtype, buffer=sbuf)
                isa.dma_copy(dst=t, src=slots[q])
                yield t
    acc = ndarray(list(x.shape), float32, buffer=sbuf)
    fold(acc, group_tiles(), op)
    isa.tensor_copy(dst=out, src=acc)
    return out


def fold(acc, tiles, op):
    """acc (fp32) = op over the on-chip tiles in the order given: the first copied, the others
    combined into it, so every program or rank that folds the same tiles gets the same bits
    (nl.all_reduce here, nki.collectives' reductions in ranks.py)."""
    from . import isa
    for i, t in enumerate(tiles):
        if i == 0:
            isa.tensor_copy(dst=acc, src=t)
        else:
            isa.tensor_tensor(dst=acc, data1=acc, data2=t, op=op)
