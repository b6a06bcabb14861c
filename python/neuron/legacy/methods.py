"""The neuron tensor methods the legacy API needs, installed when neuron.legacy is imported:
__getitem__ / __setitem__ / __iadd__ wrappers that take index grids, `...`, operand masks and
partial (masked) values and hand every other key to the previous method (so the current API
behaves as before), plus the legacy tensor methods `reshape` (HBM, in legacy kernels;
../reshape.py), `broadcast_to`, `astype` (on chip), `expand_dims` (on chip, a copy) and
`assert_shape`, where the tensor class has none of that name."""
import math

import numpy as np

from .. import _C
from .._span import user_span
from .. import language as _nl
from .. import views as _views
from ..access import IndirectView
from . import dynamic
from .loop_reduce import LoopReduce
from .split import SplitView
from . import deferred
from . import spill
from .grid import Cmp, Grid, Mask, error
from .mask import rectangle
from .views import (ON_CHIP, GridView, MaskedOperand, Reshaped, _State, as_gridview, concrete,
                    grid_view, index_rect, partial_rect)

_prev_getitem = _C.Tensor.__getitem__
_prev_setitem = _C.Tensor.__setitem__
_prev_iadd = getattr(_C.Tensor, "__iadd__", None)
_prev_add = _C.Tensor.__add__
_prev_radd = _C.Tensor.__radd__


def _is_legacy(keys):
    # `...` is not: neuron's own subscripts take it.
    return any(isinstance(k, (Grid, Cmp, Mask)) for k in keys)


def legacy_getitem(self, key):
    keys = key if isinstance(key, tuple) else (key,)
    if dynamic.is_runtime_key(keys):  # index tiles and one-element offset tiles
        return dynamic.subscript(self, keys, _prev_getitem)
    if not _is_legacy(keys):
        return _prev_getitem(self, key)
    if len(keys) == 1 and isinstance(keys[0], (Cmp, Mask)):
        rect = rectangle(keys[0], list(self.shape))
        if rect is None:
            error("mask", "this operand mask excludes every element")
        return MaskedOperand(self, rect)
    return _nl.remember_view(self, key, grid_view(self, keys))


def store_view(view, value):
    """Writes tile `value` into the HBM view (an nl.store; a DMA when only the element order
    matches, as for reshaped views)."""
    same = list(value.shape) == list(view.shape)
    if len(value.shape) == len(view.shape) and (same or math.prod(value.shape) !=
                                                math.prod(view.shape)):
        _nl.store(view, value)
        return
    from .. import isa
    if value.buffer == _C.Memory.psum:
        value = _nl.copy(value)
    isa.dma_copy(view, value)


def assign(view, value):
    """view[...] = value, with NKI's broadcasting of the value and partial-tile rectangles."""
    known, rect = partial_rect(value)
    if known and rect is None:
        return  # a fully masked value: nothing to write
    if isinstance(view, SplitView):  # dims walked by several grid axes: piece by piece
        if rect is not None:
            error("mask", "a masked value cannot be assigned to a subscript that combines grid "
                  "axes in one dim")
        view.assign(value, assign)
        return
    view = as_gridview(view)
    if rect is not None:
        value = index_rect(value, rect)
    if isinstance(view, GridView):
        if view.entries is None:
            if rect is not None:
                error("mask", "a masked value cannot be assigned to a reshaped tensor")
            store_view(view.base, concrete(value))
            return
        view = view.resolve(rect)
    elif rect is not None:
        view = index_rect(view, rect)
    if isinstance(value, (_C.Tensor, GridView, Reshaped)):
        value = concrete(value)
    elif view.buffer not in ON_CHIP and len(view.shape) >= 2:
        _nl._fill_hbm(view, float(value), user_span())  # a filled tile, 128 rows at a time
        return
    elif view.buffer not in ON_CHIP:  # 1-D: a [1, n] filled tile, stored
        shape = list(view.shape)
        value = _nl.full(shape if len(shape) >= 2 else [1] + shape, float(value), view.dtype)
    if view.buffer not in ON_CHIP:
        store_view(view, value)
        return
    if isinstance(value, _C.Tensor) and list(value.shape) != list(view.shape):
        value = _nl.broadcast_to(value, list(view.shape))
    if rect is not None and view.buffer == _nl.sbuf and getattr(value, "buffer", None) == \
            _nl.sbuf and not _engine_start_ok(rect[0][0], rect[0][1] - rect[0][0]):
        # A masked value's rows where no engine may start (`acc[...] = nl.load(x, mask=(i_p >=
        # 100))`): a DMA writes them, as the compiler's masked load does.
        from .. import isa
        isa.dma_copy(view, value)
        return
    if not _filled_by_dma(view, value):
        _prev_setitem(view, tuple(slice(None) for _ in view.shape), value)


def _filled_by_dma(view, value):
    """A number written into SBUF partitions no engine may start at (`idx[i, j] = j * 5` in a
    static_range over i): a tile of it at partition 0 is copied there by DMA, as NKI's
    compiler does. False (nothing written) otherwise."""
    if isinstance(value, (_C.Tensor, GridView, Reshaped)) or not isinstance(view, _C.Tensor) \
            or view.buffer != _nl.sbuf:
        return False
    start, count = _C.view_dims(view)[0][:2]
    if _engine_start_ok(start, count):
        return False
    from .. import isa
    isa.dma_copy(view, _nl.full(list(view.shape), value, view.dtype))
    return True


def _engine_start_ok(start, count):
    """Whether an engine instruction may cover `count` partitions from `start` (TRAINIUM.md:
    over 64 start at 0; 33 to 64 at 0 or 64; 32 or fewer at 0, 32, 64 or 96)."""
    if count > 64:
        return start == 0
    return start in (0, 64) if count > 32 else start % 32 == 0


def legacy_setitem(self, key, value):
    if spill.watched(self):  # the SBUF copy of an HBM-spilled PSUM block: store the write back
        if _nl.updated_in_place(self, key, value) and spill.stored(value):
            return _setitem(self, key, value)  # `t[k] += x`: the += stored t[k] back already
        return spill.storing_back(self, lambda: _region(self, key),
                                  lambda: _setitem(self, key, value))
    return _setitem(self, key, value)


def _region(self, key):
    """The view `self[key]` writes, when the key is a plain one (ints, slices), else None."""
    keys = key if isinstance(key, tuple) else (key,)
    if _is_legacy(keys) or dynamic.is_runtime_key(keys):
        return None
    return _prev_getitem(self, key)


def _setitem(self, key, value):
    if _nl.updated_in_place(self, key, value):
        return  # `t[i_p, i_f] += x`: the grid's view was updated in place (no copy onto itself)
    keys = key if isinstance(key, tuple) else (key,)
    if isinstance(value, deferred.Deferred):  # `t[k] = nisa.nc_matmul(...)`: write t[k] directly
        view = legacy_getitem(self, key) if _is_legacy(keys) else _prev_getitem(self, key)
        if value.into(view):
            return
        value = value.tile()
    deferred.flush()
    value = deferred.resolve(value)  # a pending sum (lincomb.py), evaluated by the flush
    if isinstance(value, LoopReduce):  # dst[...] = nl.loop_reduce(x, op, ...): dst op= x
        value.apply(concrete(legacy_getitem(self, key)))
        return
    if dynamic.is_runtime_key(keys):
        view = legacy_getitem(self, key)
        if isinstance(view, IndirectView):  # rows chosen at run time
            from .language import store
            store(view, value)
        else:
            assign(view, value)
        return
    # `t[a:b] += x` ends in t.__setitem__(key, view): neuron's own __setitem__ recognises it
    # (legacy_iadd marks the view as updated in place) and records nothing more.
    if not _is_legacy(keys) and not partial_rect(value)[0] and \
            not isinstance(value, (GridView, Reshaped)) and not _broadcasts(self, key, value):
        if isinstance(value, (int, float, np.number)) and self.buffer == _nl.sbuf and \
                _filled_by_dma(_prev_getitem(self, key), value):
            return
        return _prev_setitem(self, key, value)
    view = legacy_getitem(self, key) if _is_legacy(keys) else _prev_getitem(self, key)
    assign(view, value)


def _broadcasts(self, key, value):
    """Whether `self[key] = value` in a legacy kernel writes an on-chip view from a tile of
    another shape, which NKI broadcasts (`t[...] = nl.sum(t, axis=1)`; assign() does it)."""
    return (_State.active and isinstance(value, _C.Tensor) and self.buffer in ON_CHIP
            and list(value.shape) != list(_prev_getitem(self, key).shape))


def legacy_iadd(self, other):
    return spill.storing_back(self, lambda: None, lambda: _iadd(self, other))


def _inplace(prev):
    def op(self, other):
        return spill.storing_back(self, lambda: None, lambda: prev(self, other))
    op._neuron_legacy = True
    return op


def _iadd(self, other):
    if isinstance(other, deferred.Deferred) and other.add_into(self):
        _nl._State.last_inplace = self  # `psum[...] += nisa.nc_matmul(...)`: one matmul
        return self
    deferred.flush()
    other = deferred.resolve(other)
    known, rect = partial_rect(other)
    if known:
        if rect is not None:
            _prev_iadd(index_rect(self, rect), index_rect(other, rect))
    else:
        _prev_iadd(self, concrete(other) if isinstance(other, (GridView, Reshaped)) else other)
    _nl._State.last_inplace = self  # the whole view was updated in place (see legacy_setitem)
    return self


def legacy_add(self, other):
    # off_tile[0, k] + i_f: an index grid moved by a runtime value (legacy dynamic offsets).
    if isinstance(other, Grid):
        return dynamic.plus_grid(self, other)
    if _is_index_expr(other):  # start_tile + pid * 32: a runtime offset (NxD's kernels)
        return dynamic.register_of(self) + other
    return _prev_add(self, other)


def legacy_radd(self, other):
    if isinstance(other, Grid):
        return dynamic.plus_grid(self, other)
    if _is_index_expr(other):
        return other + dynamic.register_of(self)
    return _prev_radd(self, other)


def _is_index_expr(v):
    """A symbolic index (a program id or rolled loop index expression), which a tile cannot
    take as an operand: a one-element tile plus one is an offset read at run time."""
    return isinstance(v, _C.Affine) and not v.is_constant()


def _reshape(self, shape, *more):
    shape = tuple(shape) if not more else (shape,) + more
    if not _State.active or self.buffer in ON_CHIP or _views.reshape_unchanged(self, shape):
        # the current API's (views.py): outside legacy kernels, and for on-chip tiles
        return _views.reshape(self, shape)
    return Reshaped(self, shape)


def _broadcast_to(self, shape):
    return _nl.broadcast_to(self, list(shape))


def _astype(self, dtype):
    if self.buffer not in ON_CHIP:
        error("unsupported", "astype of an HBM tensor is not supported; load it with "
              "nl.load(t, dtype=...)")
    return _nl.copy(self, _nl.to_dtype(dtype))


def _expand_dims(self, axis):
    return _nl.expand_dims(self, axis)


def _assert_shape(self, shape):
    if list(self.shape) != [int(n) for n in shape]:
        error("shape", f"'{self.name}' has shape {list(self.shape)}, expected {list(shape)}")
    return self


def install():
    """Installs the legacy subscripts (chained: other keys go to the previous methods)."""
    if getattr(_C.Tensor.__getitem__, "_neuron_legacy", False):
        return
    legacy_getitem._neuron_legacy = True
    _C.Tensor.__getitem__ = legacy_getitem
    _C.Tensor.__setitem__ = legacy_setitem
    if _prev_iadd is not None:
        _C.Tensor.__iadd__ = legacy_iadd
    for name in ("__isub__", "__imul__", "__itruediv__"):  # `t -= x` on a spilled block's copy
        prev = getattr(_C.Tensor, name, None)
        if prev is not None and not getattr(prev, "_neuron_legacy", False):
            setattr(_C.Tensor, name, _inplace(prev))
    _C.Tensor.__add__ = legacy_add
    _C.Tensor.__radd__ = legacy_radd
    for name, fn in (("reshape", _reshape), ("broadcast_to", _broadcast_to),
                     ("astype", _astype), ("expand_dims", _expand_dims),
                     ("assert_shape", _assert_shape)):
        # reshape: the legacy layer's (HBM tensors reshaped, legacy/views.py) replaces the
        # current API's (python/neuron/views.py), to which it passes on-chip tiles
        if not hasattr(_C.Tensor, name) or name == "reshape":
            setattr(_C.Tensor, name, fn)
    if not hasattr(_C.Tensor, "itemsize"):
        _C.Tensor.itemsize = property(lambda self: self.dtype.itemsize)
