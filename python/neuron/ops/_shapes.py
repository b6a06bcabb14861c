"""Sizes that change from call to call: a decode loop's key count grows by one a step, a server
meets a new prompt length per request. Each new size is a new kernel (0.1-0.5 s to compile,
docs/kernels.md), so such a loop would compile every step. As torch.compile's automatic dynamic
shapes: the first size of a dim compiles exactly; once another size of the same dim shows up in
an otherwise equal call, the dim is dynamic and its sizes round up to buckets (bucket()), the
caller masking or dropping the padding. A key count growing from 600 to 32768 then compiles 48
kernels instead of 32169."""
import torch

from .. import lru

_DYNAMIC = object()
_seen = lru.Lru(4096)  # (what, the call's other sizes) -> the first size seen, or _DYNAMIC


def dynamic(key, size):
    """Whether the dim `key` names (the op, the dim and every other size of the call) is dynamic
    with this call's `size`: True once two different sizes have been seen."""
    first = _seen.get(key)
    if first is _DYNAMIC:
        return True
    if first is None or first == size:
        if first is None:
            _seen[key] = size
        return False
    _seen[key] = _DYNAMIC
    return True


def size(key, n):
    """The size to compile for size n of the dim `key` names: n, or bucket(n) once the dim is
    dynamic. Never bucketed while torch.compile traces (its own dynamic shapes decide)."""
    if torch.compiler.is_compiling() or not dynamic(key, n):
        return n
    return bucket(n)


def bucket(n):
    """n rounded up to a multiple of an eighth of the power of two at or below it: 8 buckets
    per doubling, at most 12.5% padding, sizes up to 16 exact (a decode step's one query stays
    one)."""
    granule = 1 << max(0, n.bit_length() - 4)
    return -(-n // granule) * granule


def reset():
    """Forgets every size seen (tests)."""
    _seen.clear()
