"""PSUM block tensors that cannot fit PSUM are placed in SBUF, or HBM (a spill), as NKI's
compiler does.

Attention v3 of the NKI tutorials declares `qk = nl.ndarray((seqlen // 128, seqlen // 512,
nl.par_dim(128), 512), nl.float32, buffer=nl.psum)` and keeps every block live between two
loops: seqlen/128 x seqlen/512 full banks where the hardware has 8. A kernel is first traced
as written (its PSUM blocks usually live one iteration each and fit, attention v4-v11); only
when that fails with `psum-capacity` is it traced again with spilling on (legacy/__init__.py),
and then every PSUM block tensor whose blocks, all live, would need more than PSUM holds goes to
SBUF, with a warning. Nothing else changes: `dst[...] = nisa.nc_matmul(...)` into a spilled
tensor writes a fresh PSUM tile and copies it into the SBUF block (deferred.py writes directly
only into a view of its own memory), `dst[...] += nisa.nc_matmul(...)` adds the fresh tile into
the block in fp32 (the values of PSUM accumulation), and engines read SBUF as they read PSUM.

If SBUF cannot hold them either (`sbuf-capacity` on that retrace; v3 at seqlen 4096 needs
512 KiB per partition), a third trace puts them in HBM: a write stores the PSUM result (through
an SBUF copy), and subscripting a block (`qk[i, j]`) loads it into a fresh SBUF tile. Whatever
then writes that copy, whole or through a view of it (`qk[i, j] += x`, `qk[i, j][:, 0:64] = x`,
`reduce_res=qk[i, j]`, any instruction's destination), stores the part it wrote back to the same
part of the HBM block right after (written() below), so the block holds what PSUM would."""
import linecache
import math
import re
import threading
import warnings

from .. import _C
from .. import eager as _eager
from .._span import user_span
from ..dtypes import numpy_dtype
from .grid import error

# Per partition, on every target (TRAINIUM.md; base/target.hpp): 8 banks of 2 KiB, and a tile
# never straddles a bank (allocate.cpp).
PSUM_BANKS, BANK_BYTES = 8, 2048


NONE, SBUF, HBM = 0, 1, 2  # where this trace puts PSUM block tensors too big for PSUM


class _SpillState(threading.local):
    def __init__(self):
        self.level = NONE        # SBUF: a retrace after psum-capacity; HBM: after that, SBUF's
        self.candidates = 0      # PSUM block tensors this trace found too big for PSUM
        self.notes = []          # (message, file, line): warnings for this trace's spills
        self.copies = {}         # root name of an SBUF copy of an HBM block -> (copy, block view)
        self.quiet = 0           # > 0: inside a write that stores its copy back itself
        self.stored = None       # the view written() stored back last


_State = _SpillState()
_warned = set()  # (file, line, message): each warning once per process


def begin(level):
    _State.level, _State.candidates, _State.notes = level, 0, []
    _State.copies, _State.quiet, _State.stored = {}, 0, None
    if level == HBM and written not in _eager.write_hooks:
        _eager.write_hooks.append(written)  # every nl/nisa destination (eager.op's writes=)
    elif level != HBM and written in _eager.write_hooks:
        _eager.write_hooks.remove(written)


def notes():
    """The warnings of the last trace's spills: warn() them once its kernel compiled (a spill to
    SBUF that is then retraced to HBM is not worth a warning)."""
    return list(_State.notes)


def warn(notes):
    for message, file, line in notes:
        if (file, line, message) not in _warned:
            _warned.add((file, line, message))
            warnings.warn_explicit(message, UserWarning, file, line)


def next_level(level, rule):
    """The spill level to retrace with after a capacity error, or None (the error stands)."""
    if level == NONE and rule == "psum-capacity":
        return SBUF
    if level == SBUF and rule == "sbuf-capacity":
        return HBM
    return None


def candidates():
    """How many PSUM block tensors of the last trace need more than PSUM (spillable)."""
    return _State.candidates


def psum_banks(tiles, tile_shape, dtype):
    """Banks that `tiles` PSUM tiles of tile_shape need, all live (tiles packed into banks)."""
    per_partition = math.prod(tile_shape[1:]) * numpy_dtype(dtype).itemsize
    if per_partition > BANK_BYTES:
        return None  # not a PSUM tile at all: the allocator's own error says so
    return math.ceil(tiles / (BANK_BYTES // max(per_partition, 1)))


def place(memory, tiles, tile_shape, dtype, name, span):
    """The memory a block tensor of `tiles` distinct tiles goes to: SBUF instead of PSUM when
    spilling is on and the tiles cannot all be live in PSUM."""
    if memory != _C.Memory.psum:
        return memory
    banks = psum_banks(tiles, tile_shape, _C_dtype(dtype))
    if banks is None or banks <= PSUM_BANKS:
        return memory
    _State.candidates += 1
    if _State.level == NONE:
        return memory
    name = name or _assigned_name(span)
    what = f"'{name}'" if name else "a PSUM block tensor"
    place = "SBUF" if _State.level == SBUF else \
        "HBM (SBUF cannot hold it either; its blocks are read through SBUF copies)"
    _State.notes.append((
        f"{what} ({tiles} blocks of {list(tile_shape)}) needs {banks} PSUM banks with all its "
        f"blocks live, but PSUM has {PSUM_BANKS}: it is placed in {place} instead (a spill, as "
        "NKI's compiler does); matmul results are copied into it",
        span.file or "<kernel>", span.line))
    return _C.Memory.sbuf if _State.level == SBUF else _C.Memory.hbm


def _assigned_name(span):
    """`qk` in the line `qk = nl.ndarray(...)` (the tensor's name for the warning), or ""."""
    m = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", linecache.getline(span.file, span.line))
    return m.group(1) if m else ""


def _C_dtype(dtype):
    from .. import language as _nl
    return _nl.to_dtype(dtype)


# ---- writes into the SBUF copy of an HBM block -------------------------------------------------

def staged(copy, block, what):
    """Notes that SBUF tile `copy` was loaded from `block` (a view of an HBM-spilled block of
    tensor `what`): writes into it are stored back (written())."""
    ok = isinstance(block, _C.Tensor) and list(block.shape) == list(copy.shape)
    _State.copies[copy.name] = (copy, block if ok else None, what)


def watched(t):
    """Is t (a view of) the SBUF copy of an HBM-spilled block?"""
    return bool(_State.copies) and getattr(t, "name", None) in _State.copies and \
        isinstance(t, _C.Tensor) and t.buffer == _C.Memory.sbuf


def storing_back(t, region, write):
    """write() (`t[key] = v`, `t += v`, ...) into t; when t is the SBUF copy of an HBM block, the
    instructions it records store nothing back themselves and region() (the view written, t
    itself when None) is stored back after. (No context manager: the user's line that errors
    name is found by walking out of neuron's frames, and contextlib's frame is not neuron's.)"""
    if not watched(t):
        return write()
    _State.quiet += 1
    try:
        result = write()
    finally:
        _State.quiet -= 1
    view = region()
    written(t if view is None else view)
    return result


def written(view):
    """After an instruction wrote `view`: when it is (a view of) the SBUF copy of an HBM-spilled
    PSUM block, store the same elements of the HBM block (a DMA), which PSUM would have held."""
    if _State.quiet or not watched(view):
        return
    copy, block, what = _State.copies[view.name]
    target = _mirror(view, copy, block) if block is not None else None
    if target is None:
        why = f"a view {list(view.shape)} of the copy that is not a box of it" if block is \
            not None else f"a copy {list(copy.shape)} made by a subscript that drops dims"
        error("psum-spill", f"'{what}' is a PSUM block tensor spilled to HBM (too big for PSUM "
              "and SBUF): subscripting one of its blocks loads an SBUF copy, whose writes are "
              f"stored back to the block, but this write goes to {why}, which cannot be mapped "
              "back onto the block, so it would be lost; write the block with subscripts that "
              f"keep its dims (`{what}[i, j][:, a:b] = value`, `{what}[i, j, :, a:b] = value`)")
    _C.store(target, view, user_span())
    _State.stored = view


def stored(view):
    """Did written() just store this view back (`t[k] += x` then ends in t[k] = view)?"""
    return view is not None and view is _State.stored


def _mirror(view, copy, block):
    """The view of `block` that covers the elements `view` covers of `copy` (block and copy have
    one shape), or None when the view is not a plain box of copy (a permuted view)."""
    try:
        dims = _C.view_dims(view)
    except ValueError:  # a start that is a program id
        return None
    if _C.storage_shape(view) != list(copy.shape) or any(k and st <= 0 for _, _, st, k in dims):
        return None
    span = user_span()
    subs = [_C.subscript("slice", _C.Affine(s), s + (n - 1) * st + 1, st, span) if keep else
            _C.subscript("scalar", _C.Affine(s), 0, 0, span) for s, n, st, keep in dims]
    same = _C.index(copy, subs)
    if list(same.shape) != list(view.shape) or same.strides != view.strides or \
            same.offset != view.offset:
        return None
    return _C.index(block, subs)
