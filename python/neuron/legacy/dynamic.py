"""Runtime values in legacy subscripts (NKI_API.md 4.3, 4.9):

- an SBUF index tile in the row subscript of an HBM tensor, `t[idx_tile[i_p, 0], i_f]`: rows
  chosen at run time (an indirect DMA), which nl.load / nl.store / nisa.dma_copy move row by row;
- a one-element tile in a subscript, alone or added to an index grid,
  `src[i_p, off_tile[0, k] + i_f]`: a dynamic offset, read into a register (the form
  nisa.tensor_copy_dynamic_src / _dst take).

Both become what the current API builds from .ap(): an IndirectView, or a view whose start is a
register."""
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
