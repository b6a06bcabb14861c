"""nki.collectives: collectives between ranks (NeuronCores that each run the kernel with their own
inputs and HBM), and `neuron.run_ranks`, the launch that runs one kernel on several ranks.

On hardware each rank is a separate launch of the kernel, on its own NeuronCore, with its own
tensors; the ranks meet at every collective (`all_reduce`, `all_gather`, `reduce_scatter`,
`all_to_all`, `collective_permute`) of a ReplicaGroup. neuron runs the n ranks of a launch as one
kernel: each rank traced in turn with its own inputs (its tensors are kernel inputs of their own,
the HBM tensors it allocates its own, its tiles in its own core's SBUF and PSUM: target
"trn2x<n>", Buffer::core), the ranks' statements taking turns between collectives as the cores
of a grid do (collectives.py `_Rounds`), and at each collective, once every rank has reached it,
the exchange: DMA copies between the ranks' tensors, and for the reductions an fp32 sum (max,
min) over the rank-list in rank order, so every rank of a list gets the same bits.
`rank_id()` is a register holding the rank. What is not here: the ring-pipelined
`collective_permute_implicit*` and the variable-length `all_to_all_v` / `all_gather_v`, which are
refused at the calling line."""
import enum
import inspect
import itertools
import math
import threading

import numpy as np

from . import _C
from . import collectives
from ._span import function_span, user_span
from .errors import user_error


class rg_partition_op(enum.Enum):
    """How ReplicaGroup.from_partition_op groups ranks: rank-list id = op(rank, operand)."""
    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


class ReplicaGroup:
    """The ranks a collective runs on, as a list of rank-lists: the collective runs within each
    list, independently (`ReplicaGroup([[0, 1], [2, 3]])`)."""

    def __init__(self, replica_groups=None, **kwargs):
        groups = replica_groups if replica_groups is not None else kwargs.pop("groups", [])
        self.groups = tuple(tuple(int(r) for r in g) for g in groups)
        self.options = kwargs

    @staticmethod
    def from_partition_op(world_size, op, operand):
        """Ranks 0 .. world_size - 1, those with the same op(rank, operand) in one list."""
        name = op.value if isinstance(op, rg_partition_op) else str(op)
        f = {"bitwise_and": lambda r: r & operand, "div": lambda r: r // operand,
             "mod": lambda r: r % operand}[name]
        lists = {}
        for r in range(int(world_size)):
            lists.setdefault(f(r), []).append(r)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def __eq__(self, other):
        return isinstance(other, ReplicaGroup) and self.groups == other.groups

    def __hash__(self):
        return hash(self.groups)

    def __repr__(self):
        return f"ReplicaGroup({[list(g) for g in self.groups]!r})"


class _Launch(threading.local):
    rank = None  # the rank being traced in a run_ranks launch (collectives._rounds.ranks ranks)


_launch = _Launch()


def _rank(what, span):
    if _launch.rank is None:
        user_error("collectives", f"nki.collectives.{what} needs the ranks it exchanges with: run "
                   "the kernel on several ranks with neuron.run_ranks(kernel, [args of rank 0, "
                   "args of rank 1, ...]) (a single launch is one rank; the cores of one launch's "
                   "grid meet with nisa.sendrecv and nisa.core_barrier)", span)
    return _launch.rank


def _rank_list(group, rank, what, span):
    """The rank-list of `group` that holds `rank`."""
    if not isinstance(group, ReplicaGroup):
        group = ReplicaGroup(group)
    n = collectives._rounds.ranks
    for g in group.groups:
        for r in g:
            if not 0 <= r < n:
                user_error("collectives", f"nki.collectives.{what}: replica_group {group!r} "
                           f"names rank {r}, but the launch has {n} ranks (0 to {n - 1})", span)
    mine = [g for g in group.groups if rank in g]
    if len(mine) != 1:
        user_error("collectives", f"nki.collectives.{what}: rank {rank} is in "
                   f"{len(mine)} rank-lists of {group!r}; every rank of the launch takes part in "
                   "each collective, in exactly one rank-list", span)
    return mine[0]


def _pairs(srcs, dsts, what, span):
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    dsts = list(dsts) if isinstance(dsts, (list, tuple)) else [dsts]
    if len(srcs) != len(dsts) or not srcs:
        user_error("collectives", f"nki.collectives.{what}: srcs and dsts must be lists of the "
                   f"same length (got {len(srcs)} and {len(dsts)})", span)
    return list(zip(srcs, dsts))


def _meet(what, span, rank, emit, args):
    """This rank reaches a collective; when the last rank does, emit(args of every rank, span)
    writes the exchange (collectives.py pairs the rounds and orders the statements)."""
    collectives._meet(f"nki.collectives.{what}", span, (emit, args), rank=rank)


# ---- the exchanges -------------------------------------------------------------------------

def _along(t, dim, start, size):
    return t[tuple([slice(None)] * dim + [slice(start, start + size)])]


def _on_chip(t):
    from .language import sbuf, psum
    return getattr(t, "buffer", None) in (sbuf, psum)


def _reduce(srcs, dsts, op, owner):
    """dsts[i] = op over srcs (same shapes), in fp32, in the order given."""
    from . import isa
    from .language import float32, ndarray, sbuf
    shape = list(srcs[0].shape)
    with collectives.core_scope(collectives._rounds.core(owner)):
        if _on_chip(srcs[0]):
            acc = ndarray(shape, float32, buffer=sbuf)
            collectives.fold(acc, srcs, op)
            for d in dsts:
                isa.tensor_copy(dst=d, src=acc)
            return
        # HBM: [rows, cols] blocks of at most 128 x 2048 through SBUF, per leading index
        lead, (rows, cols) = shape[:-2], (shape[-2:] if len(shape) > 1 else [1] + shape)
        for idx in np.ndindex(*lead):
            def at(t):
                t = t[idx] if idx else t
                return t if len(shape) > 1 else t.reshape([1, cols])
            for r0 in range(0, rows, 128):
                for c0 in range(0, cols, 2048):
                    nr, nc = min(128, rows - r0), min(2048, cols - c0)
                    acc = ndarray([nr, nc], float32, buffer=sbuf)
                    for i, s in enumerate(srcs):
                        t = acc if i == 0 else ndarray([nr, nc], s.dtype, buffer=sbuf)
                        isa.dma_copy(dst=t, src=at(s)[r0:r0 + nr, c0:c0 + nc])
                        if i:
                            isa.tensor_tensor(dst=acc, data1=acc, data2=t, op=op)
                    for d in dsts:
                        isa.dma_copy(dst=at(d)[r0:r0 + nr, c0:c0 + nc], src=acc)


def _staged(calls, span):
    """Each rank's sources, copied out first when some rank's destination is one of them (an
    in-place exchange must read every source before writing any destination)."""
    from . import isa
    from .language import ndarray, sbuf, shared_hbm
    dst_names = {getattr(d, "name", None) for c in calls for _, d in c["pairs"]}
    out = []
    for rank, c in enumerate(calls):
        srcs = []
        for s, _ in c["pairs"]:
            if getattr(s, "name", None) in dst_names:
                with collectives.core_scope(collectives._rounds.core(rank)):
                    # (an HBM copy of the launch's own, not one of the programs' shared
                    # allocations, which nl.ndarray pairs up program by program)
                    t = ndarray(list(s.shape), s.dtype, buffer=sbuf) if _on_chip(s) else \
                        _C.ndarray(list(s.shape), s.dtype, shared_hbm, "", span)
                isa.dma_copy(dst=t, src=s)
                s = t
            srcs.append(s)
        out.append(srcs)
    return out


def _check_shapes(what, calls, span, dst_shape):
    """Every rank passes sources of one shape and dtype per position, and destinations of the
    shape dst_shape(source shape, rank-list size) gives."""
    for i, (s0, _) in enumerate(calls[0]["pairs"]):
        for rank, c in enumerate(calls):
            s, d = c["pairs"][i]
            if list(s.shape) != list(s0.shape) or s.dtype != s0.dtype:
                user_error("collectives", f"nki.collectives.{what}: rank {rank} passes a source "
                           f"of shape {list(s.shape)} ({s.dtype}) where rank 0 passes "
                           f"{list(s0.shape)} ({s0.dtype}); every rank's must match", c["span"])
            want = dst_shape(list(s.shape), len(c["list"] or ()))
            if want is None or list(d.shape) != want:
                user_error("collectives", f"nki.collectives.{what}: rank {rank}'s destination has "
                           f"shape {list(d.shape)}, but its source {list(s.shape)} over "
                           f"{len(c['list'] or ())} ranks needs {want}", c["span"])


def _split(shape, n, dim):
    if dim >= len(shape) or shape[dim] % n:
        return None
    return shape[:dim] + [shape[dim] // n] + shape[dim + 1:]


def _joined(shape, n, dim):
    if dim >= len(shape):
        return None
    return shape[:dim] + [shape[dim] * n] + shape[dim + 1:]


def _emit_all_reduce(calls, span):
    _check_shapes("all_reduce", calls, span, lambda s, n: s)
    srcs = _staged(calls, span)
    done = set()
    for rank, c in enumerate(calls):
        if c["list"] in done:
            continue
        done.add(c["list"])
        for i in range(len(c["pairs"])):
            _reduce([srcs[q][i] for q in c["list"]],
                    [calls[q]["pairs"][i][1] for q in c["list"]], c["op"], rank)


def _emit_reduce_scatter(calls, span):
    dim = calls[0]["dim"]
    _check_shapes("reduce_scatter", calls, span, lambda s, n: _split(s, n, dim))
    srcs = _staged(calls, span)
    for rank, c in enumerate(calls):
        pos, n = c["list"].index(rank), len(c["list"])
        for i, (s, d) in enumerate(c["pairs"]):
            size = s.shape[dim] // n
            _reduce([_along(srcs[q][i], dim, pos * size, size) for q in c["list"]], [d], c["op"],
                    rank)


def _emit_all_gather(calls, span):
    from . import isa
    dim = calls[0]["dim"]
    _check_shapes("all_gather", calls, span, lambda s, n: _joined(s, n, dim))
    srcs = _staged(calls, span)
    for rank, c in enumerate(calls):
        for i, (s, d) in enumerate(c["pairs"]):
            size = s.shape[dim]
            for pos, q in enumerate(c["list"]):
                isa.dma_copy(dst=_along(d, dim, pos * size, size), src=srcs[q][i])


def _emit_all_to_all(calls, span):
    from . import isa
    dim = calls[0]["dim"]
    _check_shapes("all_to_all", calls, span, lambda s, n: s if _split(s, n, dim) else None)
    srcs = _staged(calls, span)
    for rank, c in enumerate(calls):
        pos, n = c["list"].index(rank), len(c["list"])
        for i, (s, d) in enumerate(c["pairs"]):
            size = s.shape[dim] // n
            for j, q in enumerate(c["list"]):
                isa.dma_copy(dst=_along(d, dim, j * size, size),
                             src=_along(srcs[q][i], dim, pos * size, size))


def _emit_permute(calls, span):
    from . import isa
    _check_shapes("collective_permute", calls, span, lambda s, n: s)
    srcs = _staged(calls, span)
    targets = {}
    for s, t in calls[0]["pairs_st"]:
        if not (0 <= s < len(calls) and 0 <= t < len(calls)):
            user_error("collectives", f"nki.collectives.collective_permute: the pair ({s}, {t}) "
                       f"names a rank outside the launch's {len(calls)} ranks", calls[0]["span"])
        if t in targets:
            user_error("collectives", f"nki.collectives.collective_permute: rank {t} is the "
                       f"target of both rank {targets[t]} and rank {s}", calls[0]["span"])
        targets[t] = s
    for t, s in sorted(targets.items()):
        for i, (_, d) in enumerate(calls[t]["pairs"]):
            isa.dma_copy(dst=d, src=srcs[s][i])


# ---- nki.collectives -----------------------------------------------------------------------

def _collective(what, emit, srcs, dsts, replica_group=None, **info):
    span = user_span()
    rank = _rank(what, span)
    _C.require_trace(span)
    call = dict(info, pairs=_pairs(srcs, dsts, what, span), span=span,
                list=_rank_list(replica_group, rank, what, span)
                if replica_group is not None else None)
    _meet(what, span, rank, emit, call)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """dsts = op (nl.add, nl.maximum, nl.minimum) over the srcs of the ranks of this rank's
    rank-list, element-wise, in fp32 in rank-list order (every rank gets the same bits)."""
    _collective("all_reduce", _emit_all_reduce, srcs, dsts, replica_group, op=op)


def all_gather(srcs, dsts, replica_group, collective_dim=0, priority=None, name=None):
    """dsts = the srcs of the rank-list's ranks, concatenated along collective_dim in list
    order."""
    _collective("all_gather", _emit_all_gather, srcs, dsts, replica_group,
                dim=int(collective_dim))


def reduce_scatter(srcs, dsts, replica_group, collective_dim=0, op=None, priority=None,
                   name=None):
    """The all_reduce of srcs, split into as many chunks along collective_dim as the rank-list
    has ranks: the rank at position i of the list gets chunk i."""
    if op is None:
        user_error("collectives", "nki.collectives.reduce_scatter: op= is required (nl.add, "
                   "nl.maximum or nl.minimum)", user_span())
    _collective("reduce_scatter", _emit_reduce_scatter, srcs, dsts, replica_group,
                dim=int(collective_dim), op=op)


def all_to_all(srcs, dsts, replica_group, collective_dim=0, priority=None, name=None):
    """Each src split into as many chunks along collective_dim as the rank-list has ranks: chunk
    j goes to the list's j-th rank, which stores the chunk from the list's i-th rank at chunk i
    of its dst."""
    _collective("all_to_all", _emit_all_to_all, srcs, dsts, replica_group,
                dim=int(collective_dim))


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """For each (source, target) pair, the target rank's dsts = the source rank's srcs; a rank
    that is no target keeps its dsts."""
    pairs = tuple((int(s), int(t)) for s, t in source_target_pairs)
    _collective("collective_permute", _emit_permute, srcs, dsts, None, pairs_st=pairs)


def rank_id(name=None):
    """This rank's id, in a register (as on hardware: use it as .ap(scalar_offset=...), an index
    or a loop bound)."""
    from . import isa
    span = user_span()
    rank = _rank("rank_id", span)
    _C.require_trace(span)
    return isa.register_alloc(rank)


def _refused(qualified):
    def call(*args, **kwargs):
        user_error("collectives", f"{qualified} is not supported: neuron runs the ranks of a "
                   "launch in lock step and pairs their collectives when the kernel is traced; "
                   "the ring-pipelined and variable-length collectives depend on run-time order",
                   user_span())
    call.__name__ = qualified.rsplit(".", 1)[-1]
    call.__qualname__ = call.__name__
    call.__doc__ = f"{qualified}: refused when called (neuron.ranks)."
    return call


REFUSED = ("collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id", "all_to_all_v",
           "all_gather_v", "send", "recv", "broadcast")
for _name in REFUSED:
    globals()[_name] = _refused(f"nki.collectives.{_name}")


# ---- the launch ----------------------------------------------------------------------------

# (fn, ranks, mode, target, tensor names, parameters) -> (the launch's Kernel, its counts)
_combined = {}


def run_ranks(kernel, per_rank, mode=None):
    """Runs `kernel` (a @neuron.kernel / nki.jit kernel, or a function) on len(per_rank) ranks,
    rank r with the arguments per_rank[r] (a dict of keyword arguments, or a tuple of positional
    ones); returns the list of the ranks' results. The ranks' tensors may differ in value, not in
    shape or dtype; their other arguments (replica groups, sizes) must be equal. mode: the
    kernel's ("native", "simulate"), or this one.

    A kernel launched on a grid, `run_ranks(kernel[2], per_rank)`, runs that grid on every rank
    (an LNC of 2: two programs per rank, its cores): the programs of a rank share its tensors
    and its shared HBM, meet each other at nisa.core_barrier / nisa.sendrecv, and at each
    nki.collectives call program q of every rank exchanges with program q of the others (each
    core issues its own collective on its own data); rank_id() is the rank on each of its
    programs. A rank's result is what its first program returns."""
    from .kernel import Kernel, _is_tensor as is_tensor_arg, kernel as make_kernel
    k = kernel if isinstance(kernel, Kernel) else make_kernel(kernel)
    programs = math.prod(k.grid)
    n = len(per_rank)
    if n < 1:
        raise ValueError("run_ranks: per_rank must hold the arguments of at least one rank")
    if n * programs > 64:
        raise ValueError(f"run_ranks: {n} ranks of {programs} program(s) each (kernel "
                         f"{k.fn.__name__} launched on the grid {k.grid}) are {n * programs} "
                         "cores, and a launch simulates at most 64; use fewer ranks or a "
                         "smaller grid")
    sig = inspect.signature(k.fn)
    bound = []
    for r, a in enumerate(per_rank):
        try:
            b = sig.bind(**a) if isinstance(a, dict) else sig.bind(*a)
        except TypeError as e:
            raise TypeError(f"run_ranks: rank {r}'s arguments do not fit kernel "
                            f"{k.fn.__name__}{sig}: {e}") from None
        b.apply_defaults()
        bound.append(b.arguments)
    names = list(bound[0])
    tensors = [nm for nm in names if is_tensor_arg(bound[0][nm])]
    params = {nm: bound[0][nm] for nm in names if nm not in tensors}
    for r, b in enumerate(bound[1:], 1):
        for nm in names:
            if (nm in tensors) != is_tensor_arg(b[nm]):
                raise ValueError(f"run_ranks: argument '{nm}' is a tensor on one rank and not "
                                 f"on rank {r}")
            if nm in params and repr(b[nm]) != repr(params[nm]):
                raise ValueError(f"run_ranks: argument '{nm}' is {b[nm]!r} on rank {r} but "
                                 f"{params[nm]!r} on rank 0; non-tensor arguments are compile-"
                                 "time constants, the same on every rank")
            if nm in tensors and _spec(b[nm]) != _spec(bound[0][nm]):
                raise ValueError(f"run_ranks: tensor '{nm}' is {_spec(b[nm])} on rank {r} but "
                                 f"{_spec(bound[0][nm])} on rank 0; every rank runs the one "
                                 "kernel, so the ranks' tensors differ in value only (pad or "
                                 "split them to one shape and dtype)")
    mode = mode or k.mode
    if mode == "eager":
        raise ValueError("run_ranks: the ranks meet at their collectives in a compiled kernel; "
                         "use mode='native' or mode='simulate' (eager mode runs one op at a "
                         "time)")
    key = (k.fn, n, k.grid, mode, k.target, tuple(tensors),
           tuple((nm, repr(v)) for nm, v in params.items()))
    if key not in _combined:
        counts = [None] * n  # filled when the launch is traced
        cores = n * programs
        _combined[key] = (make_kernel(_ranks_body(k.fn, n, k.grid, tensors, params, counts),
                                      target=k.target if cores == 1 else f"{k.target}x{cores}",
                                      mode=mode), counts)
    combined, counts = _combined[key]
    outs = combined(*[b[nm] for b in bound for nm in tensors])
    outs = outs if isinstance(outs, tuple) else (outs,) if outs is not None else ()
    results, at = [], 0
    for c in counts:
        if c is None:
            results.append(None)
            continue
        shapes, many = c
        part = [o if s is None else o.reshape(s) for o, s in zip(outs[at:at + len(shapes)],
                                                               shapes)]
        at += len(shapes)
        results.append(tuple(part) if many else part[0])
    return results


def _spec(t):
    """A tensor argument's shape and dtype, as errors show them."""
    from .dtypes import to_dtype
    return f"{to_dtype(t.dtype)}{list(t.shape)}"


def _ranks_body(fn, n, grid, tensors, params, counts):
    """The kernel of a launch: fn traced once per program of the grid of each rank, on that
    rank's tensors, meeting at its collectives. counts[r]: (how many outputs rank r's first
    program returned, whether as a tuple), or None."""
    from .kernel import whole_of_reshape
    from .language import _State
    span = function_span(fn)
    programs = list(itertools.product(*(range(g) for g in grid)))
    m = len(programs)

    def body(*flat):
        rounds = collectives._rounds
        rounds.begin(n * m, ranks=n)
        outer = (_State.grid, _State.grid_ndim, _State.program, _State.shared,
                 _State.shared_next)
        # each program traced with its ids as ints (nl.program_id, nl.num_programs)
        _State.grid, _State.grid_ndim = tuple(grid), len(grid)
        outs = []
        try:
            for r in range(n):
                mine = flat[r * len(tensors):(r + 1) * len(tensors)]
                _State.shared = []  # the rank's shared HBM: its programs share it
                first = None
                for q, pid in enumerate(programs):
                    _launch.rank = rounds.rank = r
                    _State.program, _State.shared_next = pid, 0
                    try:
                        with collectives.core_scope(r * m + q):  # its tiles are its core's
                            res = fn(**dict(zip(tensors, mine)), **params)
                    finally:
                        _launch.rank = rounds.rank = None
                    rounds.end_program(r * m + q)
                    if q == 0:
                        first = res
                if first is None:
                    counts[r] = None
                else:
                    many = isinstance(first, (tuple, list))
                    # a whole output returned reshaped: the tensor, reshaped on the way out
                    res = [whole_of_reshape(t) for t in (first if many else [first])]
                    counts[r] = ([shape for _, shape in res], many)
                    outs += [t for t, _ in res]
            rounds.finish(span)
        finally:
            _launch.rank = rounds.rank = None
            (_State.grid, _State.grid_ndim, _State.program, _State.shared,
             _State.shared_next) = outer
        return tuple(outs) if outs else None
    names = ", ".join(f"r{r}_{t}" for r in range(n) for t in tensors)
    scope = {"body": body}
    exec(f"def ranks_{fn.__name__}({names}):\n    return body({names})\n", scope)
    f = scope[f"ranks_{fn.__name__}"]
    f.__module__ = fn.__module__
    # errors about the launch as a whole name the user's kernel, not this generated function
    f.__code__ = f.__code__.replace(co_filename=fn.__code__.co_filename,
                                    co_firstlineno=fn.__code__.co_firstlineno)
    return f
