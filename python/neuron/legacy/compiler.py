"""neuronxcc.nki.compiler: NKI's direct-allocation API (NKI_API.md 4.11), accepted so that
kernels written for it run unmodified.

`nl.ndarray(shape, dtype, buffer=ncc.sbuf.mod_alloc(base_addr=...))` (or psum.mod_alloc,
sbuf.alloc(fn), psum.alloc(fn), *.auto_alloc()) makes an ordinary SBUF or PSUM tile here: neuron's
allocator places every tile itself, so the requested addresses are not honoured.

The modular reuse of sbuf.mod_alloc is honoured within a block tensor (dims left of
nl.par_dim): as on hardware, block index i of a dim with num_free_tiles / num_par_tiles k gets
physical tile i % k (NKI's rule: a dim past the end of the tuple, or every dim when the tuple is
empty, gets one tile), so block i overwrites block i - k and the tensor holds as many tiles as
there are distinct slots. A kernel that reads only blocks still in its window (as any correct
kernel does) gets the same values as with one tile per block; a kernel that pipelines a rolling
window across iterations (contributed/pipelined_attention.py) needs this to fit SBUF, since a
block used in two iterations keeps its own tile live from its nl.ndarray on. Legacy loops are
unrolled, so block indices are ints when the tensor is subscripted; any other index on such a
tensor is refused (rule mod-alloc, blocks.py). Tiles of different tensors never share storage,
even where the kernel's addresses overlap: that can use more memory than the kernel's layout,
never change its values. sbuf.alloc(fn) / psum.alloc(fn) are placed by neuron, one tile per
block, and so is psum.mod_alloc (num_bank_tiles is not honoured): the published PSUM layouts
share banks across tensors (attention v9 puts `qk` and `scores_psum_t` both in banks 0-6), which
tiles of one tensor cannot express; reusing tiles within each tensor would keep 7 + 2 banks
live for the whole kernel, where neuron's own placement (a block used in one unrolled iteration
lives only there, several small tiles share a bank) fits the 8 banks. A PSUM block tensor
too big for PSUM is spilled to SBUF instead (spill.py).

Scheduling directives (skip_middle_end_transformations, no_reorder, ...) are accepted and do
nothing: neuron schedules by dependencies."""
from .. import _C


def _modulo(idx, counts):
    # NKI's modulo_allocate_func: index i of a dim with k tiles uses tile i % k; an empty tuple
    # means one tile for every dim, and dims past the tuple's end (zip) do not count.
    counts = tuple(counts) if counts else (1,) * len(idx)
    return tuple(i % int(k) for i, k in zip(idx, counts))


class Allocation:
    """A buffer= value of the direct-allocation API: the memory it names, and its arguments
    (kept for messages; the placement itself is neuron's, except mod_alloc's reuse: slot())."""

    def __init__(self, memory, how, **args):
        self.memory, self.how, self.args = memory, how, args

    def slot(self, idx):
        """The physical tile block idx (a tuple of ints) uses; blocks with equal slots share
        one tile. None: a tile of its own (alloc(fn), auto_alloc(), psum.mod_alloc)."""
        if self.how != "mod_alloc" or self.memory == _C.Memory.psum:
            return None  # PSUM: see the module's docstring
        return tuple(_modulo(idx, self.args[k])
                     for k in ("num_bank_tiles", "num_par_tiles", "num_free_tiles")
                     if k in self.args)

    def tiles_along(self, dim, size, ndim):
        """How many distinct tiles block dim `dim` (of `size` blocks, of `ndim` block dims)
        cycles through: size when it is not shared."""
        if self.slot((0,) * ndim) is None:
            return size
        idx = [0] * ndim
        slots = set()
        for i in range(size):
            idx[dim] = i
            slots.add(self.slot(tuple(idx)))
        return len(slots)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"ncc.{self.memory.name}.{self.how}({args})"


class _Space:
    def __init__(self, memory):
        self.memory = memory

    def mod_alloc(self, base_addr=0, *, base_partition=0, num_par_tiles=(), num_free_tiles=(),
                  base_bank=None, num_bank_tiles=(), **kwargs):
        args = dict(base_addr=base_addr, num_par_tiles=tuple(num_par_tiles),
                    num_free_tiles=tuple(num_free_tiles))
        if self.memory == _C.Memory.psum:
            args.update(base_bank=base_bank, num_bank_tiles=tuple(num_bank_tiles))
        return Allocation(self.memory, "mod_alloc", **args)

    def alloc(self, func):
        return Allocation(self.memory, "alloc", func=func)

    def auto_alloc(self):
        return Allocation(self.memory, "auto_alloc")


sbuf = _Space(_C.Memory.sbuf)
psum = _Space(_C.Memory.psum)


def memory_of(buffer):
    """The memory a buffer= argument names (an Allocation's, or buffer itself)."""
    return buffer.memory if isinstance(buffer, Allocation) else buffer


def _decorator(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


skip_middle_end_transformations = _decorator
enable_stack_allocator = _decorator
force_auto_alloc = _decorator


class Directive:
    """A loop directive (ncc.no_reorder(), ...): accepted, no effect here."""

    def __init__(self, name, **args):
        self.name, self.args = name, args

    def __repr__(self):
        return f"ncc.{self.name}()"


def no_reorder(**kwargs):
    return Directive("no_reorder", **kwargs)


def multi_buffer(n=1, **kwargs):
    return Directive("multi_buffer", n=n)
