"""nl.par_dim and block dims: `nl.ndarray((4, nl.par_dim(128), 512), ...)` is a Python-level
array of 4 independent [128, 512] tiles, indexed away with ints (`t[i]`, `t[i, i_p, i_f]`).
With buffer=ncc.sbuf.mod_alloc(num_free_tiles=(2,)) blocks i and i + 2 are one tile, as on
hardware (compiler.py)."""
from .. import _C
from .grid import error
from .views import same_key


class par_dim:
    """Marks the partition dim in a legacy shape; dims to its left are block dims."""

    def __init__(self, size):
        self.size = int(size)

    def __index__(self):
        return self.size

    __int__ = __index__

    def __repr__(self):
        return f"nl.par_dim({self.size})"

    def __eq__(self, other):
        return int(other) == self.size if isinstance(other, (int, par_dim)) else NotImplemented

    def __hash__(self):
        return hash(self.size)


def split_shape(shape):
    """(block dims, tile shape) of a legacy shape."""
    shape = list(shape) if isinstance(shape, (tuple, list)) else [shape]
    marks = [i for i, n in enumerate(shape) if isinstance(n, par_dim)]
    if len(marks) > 1:
        error("shape", "a shape has at most one nl.par_dim")
    k = marks[0] if marks else 0
    return [int(n) for n in shape[:k]], [int(n) for n in shape[k:]]


class Blocks:
    """Independent tiles addressed by block indices (ints; loops are unrolled)."""

    def __init__(self, bshape, make, alloc=None):
        self.bshape = list(bshape)
        # alloc: a direct allocation (compiler.Allocation) whose slot() may give several
        # blocks one tile; modular: (dim, tiles it cycles through) for the dims it shares.
        self.alloc, slots = alloc, {}
        n = len(self.bshape)
        self.modular = [] if alloc is None else \
            [(d, alloc.tiles_along(d, size, n)) for d, size in enumerate(self.bshape)
             if alloc.tiles_along(d, size, n) < size]
        self.tiles = self._build(self.bshape, make, (), slots)
        first = self._at([0] * len(self.bshape))
        self.tile_shape, self.dtype, self.buffer = list(first.shape), first.dtype, first.buffer
        self.physical = len(slots) if slots else None  # tiles allocated, when shared
        self.staged = False  # tiles in HBM (a PSUM spill, spill.py): read through SBUF copies
        self.name = ""  # the tensor's name, for errors

    def _build(self, dims, make, prefix, slots):
        if not dims:
            key = None if self.alloc is None else self.alloc.slot(prefix)
            if key is None:
                return make(prefix)
            if key not in slots:
                slots[key] = make(prefix)
            return slots[key]
        return [self._build(dims[1:], make, prefix + (i,), slots) for i in range(dims[0])]

    @property
    def shape(self):
        return tuple(self.bshape + self.tile_shape)

    ndim = property(lambda self: len(self.shape))

    def __len__(self):
        return self.bshape[0]

    def __iter__(self):
        return (self[i] for i in range(self.bshape[0]))

    def __repr__(self):
        return f"<nl blocks {self.bshape} of tiles {self.tile_shape} {self.dtype}>"

    def _at(self, idx):
        node = self.tiles
        for i in idx:
            node = node[i]
        return node

    def _split(self, key):
        keys = list(key) if isinstance(key, tuple) else [key]
        idx = []
        while keys and len(idx) < len(self.bshape):
            k = keys.pop(0)
            d = len(idx)
            if self._shared(d) and not _is_index(k):
                k_ = self._shared(d)
                error("mod-alloc", f"block dim {d} of this tensor is allocated modulo {k_} "
                      f"({self.alloc!r}): block i uses the tile of block i % {k_}, so its index "
                      f"must be an int known when the kernel is traced (loops are unrolled), "
                      f"got {k!r}")
            if isinstance(k, _C.Affine):
                if not k.is_constant():
                    error("index", f"block dims are indexed with ints; '{k}' is a program id "
                          "(use it in the tile's own subscripts instead)")
                k = k.constant
            if isinstance(k, bool) or not isinstance(k, int) and not hasattr(k, "__index__"):
                error("index", f"block dims (left of nl.par_dim) are indexed with ints, got "
                      f"{k!r}")
            k = int(k)
            n = self.bshape[len(idx)]
            if not -n <= k < n:
                error("index", f"block index {k} is out of range for {n} blocks")
            idx.append(k % n)
        return idx, tuple(keys)

    def _shared(self, dim):
        """The number of tiles block dim `dim` cycles through when mod_alloc shares them."""
        return next((k for d, k in getattr(self, "modular", ()) if d == dim), None)

    def __getitem__(self, key):
        idx, rest = self._split(key)
        self._last = (key, None)
        if len(idx) < len(self.bshape):
            sub = Blocks.__new__(Blocks)
            sub.bshape, sub.tiles = self.bshape[len(idx):], self._at(idx)
            sub.tile_shape, sub.dtype, sub.buffer = self.tile_shape, self.dtype, self.buffer
            sub.alloc, sub.modular = self.alloc, [(d - len(idx), k) for d, k in self.modular
                                                  if d >= len(idx)]
            sub.staged, sub.name = self.staged, self.name
            return sub
        tile = self._at(idx)
        view = tile[rest] if rest else tile
        if self.staged:  # an HBM block: engines read an SBUF copy; writes into it go back
            from .language import load
            from . import spill
            block, view = view, load(view)
            spill.staged(view, block, self.name)
        self._last = (key, view)
        return view

    def __setitem__(self, key, value):
        last_key, last_view = getattr(self, "_last", (None, None))
        if value is last_view and same_key(key, last_key):
            from . import spill
            if not self.staged or spill.stored(value):
                return  # `t[i, ...] += x` already updated that view in place (and its block)
        idx, rest = self._split(key)
        if len(idx) < len(self.bshape):
            error("index", "assign to one block at a time (t[i] = value)")
        tile = self._at(idx)
        tile[rest if rest else ...] = value


def _is_index(k):
    return isinstance(k, int) or isinstance(k, _C.Affine) and k.is_constant() or \
        not isinstance(k, _C.Affine) and hasattr(k, "__index__")


def allocate(shape, make_tile, alloc=None):
    """A tile, or Blocks when the shape has block dims; make_tile(tile_shape, suffix). alloc:
    the buffer= direct allocation (compiler.Allocation), or None."""
    bshape, tshape = split_shape(shape)
    if not bshape:
        return make_tile(tshape, "")
    return Blocks(bshape, lambda idx: make_tile(tshape, "_" + "_".join(map(str, idx))), alloc)


def check_tile(x, what="this call"):
    if isinstance(x, Blocks):
        error("index", f"{what} takes a tile; index the block dims away first (t[i])")
    return x

