"""Runtime values in legacy subscripts (NKI_API.md 4.3, 4.9):

- an SBUF index tile in the row subscript of an HBM tensor, `t[idx_tile[i_p, 0], i_f]`: rows
  chosen at run time (an indirect DMA), which nl.load / nl.store / nisa.dma_copy move row by row;
- a one-element tile in a subscript, alone or added to an index grid,
  `src[i_p, off_tile[0, k] + i_f]`: a dynamic offset, read into a register (the form
  nisa.tensor_copy_dynamic_src / _dst take).

Both become what the current API builds from .ap(): an IndirectView, or a view whose start is a
register."""
import numpy as np

from .. import _C
from .._span import user_span
from ..access import IndirectView
from .grid import Grid, error
from .views import ON_CHIP, GridView, concrete, grid_view


def _tile(k):
    """k as an on-chip tile (a GridView of one resolved), or None."""
    if isinstance(k, GridView) and k.base.buffer in ON_CHIP:
        k = concrete(k)
    return k if isinstance(k, _C.Tensor) and k.buffer in ON_CHIP else None


def is_runtime_key(keys):
    return any(_tile(k) is not None for k in keys)


def register_of(tile):
    """A fresh register holding the one element of tile (a runtime scalar)."""
    span = user_span()
    if [n for n in tile.shape if n != 1]:
        error("index", f"a tile used as a runtime offset must hold one element (a [1, 1] read "
              f"such as off_tile[0, k]), got shape {list(tile.shape)}; a [P, 1] index tile "
              "selects rows of an HBM tensor in its first subscript")
    r = _C.register_alloc(0, span)
    _C.register_load(r, tile, span)
    return r


def plus_grid(tile, grid):
    """off_tile[0, k] + grid: the grid moved by the tile's value at run time."""
    return Grid(grid.shape, grid.coef, grid.const + register_of(tile))


def subscript(t, keys, previous_getitem):
    """t[keys] where some keys are tiles (see the module doc)."""
    keys = list(keys)
    rows = [d for d, k in enumerate(keys) if _tile(k) is not None and
            [n for n in _tile(k).shape if n != 1]]
    for d, k in enumerate(keys):
        if d not in rows and _tile(k) is not None:
            keys[d] = register_of(_tile(k))
    if not rows:
        if any(isinstance(k, Grid) for k in keys):
            return grid_view(t, tuple(keys))
        return previous_getitem(t, tuple(keys))
    if len(rows) > 1:
        error("indirect-dma", "only one subscript may be an index tile (rows chosen at run time)")
    d, idx = rows[0], _tile(keys[rows[0]])
    if t.buffer in ON_CHIP:
        error("indirect-dma", f"an index tile selects rows of an HBM tensor; '{t.name}' is in "
              f"{t.buffer.name} (on chip, select with nisa.nc_n_gather / nl.gather_flattened)")
    if any(not isinstance(k, int) for k in keys[:d]):
        error("indirect-dma", "the index tile must be the first subscript that is not an int "
              "(it selects the rows of that dim)")
    if len(idx.shape) != 2 or idx.shape[1] != 1:
        error("indirect-dma", f"an index tile is [P, 1] (one row per partition, such as "
              f"idx_tile[i_p, 0]), got shape {list(idx.shape)}")
    # The row dim is taken from row 0 (as many rows as the index tile has, or all); the index
    # tile's P rows replace it when the DMA runs.
    keys[d] = Grid((min(idx.shape[0], t.shape[d]), 1), (1, 0), 0)
    view = grid_view(t, tuple(keys)) if any(isinstance(k, Grid) for k in keys[d + 1:]) else \
        previous_getitem(t, tuple(slice(None) if i == d else k for i, k in enumerate(keys)))
    return IndirectView(concrete(view), idx)


def reshaped_rows(r, keys):
    """r[ints..., idx_tile[i_p, 0], grids...] of a reshaped HBM tensor r (legacy views.Reshaped):
    vLLM's paged attention reads `kv_cache.reshape((2, blocks, F))[0, block_ids[i_p, 0], i_f]`.
    The rows of the index tile's dim, moved by the leading ints, as a current-API .ap() with a
    vector_offset over the reshaped storage (the reshape keeps the row-major element order)."""
    from ..access import ap_over
    keys = list(keys) + [0] * (len(r.shape) - len(keys))
    tiles = [d for d, k in enumerate(keys) if _tile(k) is not None]
    if len(tiles) != 1 or [n for n in _tile(keys[tiles[0]]).shape if n != 1] == []:
        error("indirect-dma", f"a subscript of the reshaped tensor '{r.name}' may hold one [P, 1] "
              "index tile (rows chosen at run time); a one-element offset tile is supported on "
              "tensors that are not reshaped")
    d, idx = tiles[0], _tile(keys[tiles[0]])
    if len(idx.shape) != 2 or idx.shape[1] != 1:
        error("indirect-dma", f"an index tile is [P, 1] (one row per partition, such as "
              f"idx_tile[i_p, 0]), got shape {list(idx.shape)}")
    keys = [int(k) if isinstance(k, np.integer) else k for k in keys]
    if any(not isinstance(k, int) for k in keys[:d]):
        error("indirect-dma", "the index tile must be the first subscript that is not an int "
              "(it selects the rows of that dim)")
    base_elements = 1
    for n in _C.storage_shape(r.base):
        base_elements *= n
    strides, step = [], 1
    for n in reversed(r.shape):
        strides.insert(0, step)
        step *= n
    if base_elements != step:
        error("indirect-dma", f"index tiles select rows of a reshape of a whole tensor; "
              f"'{r.name}' reshapes part of one")
    offset = sum(k * strides[i] for i, k in enumerate(keys[:d]))
    grids = [k for k in keys[d + 1:] if isinstance(k, Grid)]
    S = None
    if grids:
        from .grid import broadcast_shapes
        S = broadcast_shapes([g.shape for g in grids])
    pattern, last_axis = [[strides[d], idx.shape[0]]], 0
    for j in range(d + 1, len(keys)):
        k = keys[j]
        if isinstance(k, int):
            offset += k * strides[j]
            continue
        if not isinstance(k, Grid) or not isinstance(k.const, int):
            error("indirect-dma", f"after the index tile, subscript '{r.name}' with index grids "
                  f"and ints, got {k!r}")
        coef = k.coefs_in(S)
        varying = [a for a, c in enumerate(coef) if c != 0 and S[a] > 1]
        if len(varying) != 1 or varying[0] <= last_axis or coef[varying[0]] < 0:
            error("indirect-dma", f"after the index tile, each subscript of '{r.name}' walks one "
                  "free grid axis, in order, forwards (such as i_f = nl.arange(F)[None, :])")
        last_axis = varying[0]
        pattern.append([coef[last_axis] * strides[j], S[last_axis]])
        offset += k.const * strides[j]
    # Rows are counted in the storage seen as [rows of dim d and before, the rest]: an index
    # past dim d's size but inside the tensor reads the next block, as the flat DMA would.
    rows = step // strides[d]
    return ap_over(r.base, [rows, strides[d]], pattern, offset, None, idx, 0, None)
