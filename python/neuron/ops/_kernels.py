"""Launching the kernel library's registered C++ kernels (neuron.registry) on torch tensors,
for the operators in _operators.py: one neuron.Kernel per (kernel, grid), kept; shapes a
kernel rejects when it is traced (NeuronError) fall back to the operator's PyTorch reference
by DESIGN.md's rule (neuron.torch.note_fallback), remembered so the trace is not retried."""
import functools

from .. import registry
from ..errors import NeuronError
from ..torch import note_fallback


def split_rows(rows, max_programs=64, min_rows=128):
    """The number of SPMD programs a row-wise kernel splits `rows` rows into: the largest divisor
    of rows not above max_programs leaving each at least min_rows rows (1 when none does). The
    same rule as split_rows in kernels/include/neuron/kernels/tiling.hpp."""
    best = 1
    for p in range(1, max_programs + 1):
        if p * min_rows > rows:
            break
        if rows % p == 0:
            best = p
    return best


@functools.lru_cache(maxsize=None)
def kernel(name, grid):
    """Registered kernel `name` launched over `grid` (a tuple), native."""
    return registry.get(name)[grid]


strict = None  # neuron.ops.strict() sets it; None: NEURON_STRICT decides
_ready = set()  # signatures that traced and compiled
_rejected = {}  # signature -> why the kernel refused it


def launch(op, name, grid, tensors, params, reference):
    """Runs registered kernel `name` over `grid` on contiguous CPU tensors with keyword
    `params`; when the kernel rejects these shapes, counts and warns (or raises in strict mode)
    and returns reference() instead. op names the torch operator in the warning."""
    tensors = tuple(t.contiguous() for t in tensors)
    k = kernel(name, tuple(grid))
    key = (name, tuple(grid), tuple((tuple(t.shape), t.dtype) for t in tensors),
           tuple(sorted(params.items())))
    if key not in _ready:
        if key not in _rejected:
            try:
                k.compile(*tensors, **params)
                _ready.add(key)
            except NeuronError as e:
                _rejected[key] = e.message
        if key in _rejected:
            note_fallback(op, "shape", f"kernel {name} rejects these shapes: {_rejected[key]}",
                          strict=strict, hint=" (strict mode: no fallback to PyTorch)")
            return reference()
    return k(*tensors, **params)
