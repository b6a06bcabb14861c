"""neuronxcc.nki.compiler: NKI's direct-allocation API (NKI_API.md 4.11), accepted so that
kernels written for it run unmodified.

`nl.ndarray(shape, dtype, buffer=ncc.sbuf.mod_alloc(base_addr=...))` (or psum.mod_alloc,
sbuf.alloc(fn), psum.alloc(fn), *.auto_alloc()) makes an ordinary SBUF or PSUM tile here: neuron's
allocator places every tile itself, so the requested addresses and the modular reuse of
num_free_tiles / num_bank_tiles are not honoured (a tile never shares storage with another live
one, which can only use more memory than the kernel's own layout, never change its values).
Scheduling directives (skip_middle_end_transformations, no_reorder, ...) are accepted and do
nothing: neuron schedules by dependencies."""
from .. import _C


class Allocation:
    """A buffer= value of the direct-allocation API: the memory it names, and its arguments
    (kept for messages; the placement itself is neuron's)."""

    def __init__(self, memory, how, **args):
        self.memory, self.how, self.args = memory, how, args

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"ncc.{self.memory.name}.{self.how}({args})"


class _Space:
    def __init__(self, memory):
        self.memory = memory

    def mod_alloc(self, base_addr=0, *, base_partition=0, num_par_tiles=(), num_free_tiles=(),
                  base_bank=None, num_bank_tiles=(), **kwargs):
        return Allocation(self.memory, "mod_alloc", base_addr=base_addr, base_bank=base_bank,
                          num_free_tiles=num_free_tiles, num_bank_tiles=num_bank_tiles)

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
