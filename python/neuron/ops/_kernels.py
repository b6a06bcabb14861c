"""Launching the kernel library's registered C++ kernels (neuron.registry) on torch tensors,
for the operators in _operators.py: each signature compiled once and kept; shapes a kernel
rejects when it is traced (NeuronError) fall back to the operator's PyTorch reference by
DESIGN.md's rule (neuron.torch.note_fallback), remembered so the trace is not retried."""
import functools

from .. import lru, registry, runtime
from ..errors import NeuronError
from ..torch import note_fallback


@functools.lru_cache(maxsize=1024)  # on every call of a row-wise operator: a loop of up to 64
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


strict = None  # neuron.ops.strict() sets it; None: NEURON_STRICT decides
# The executor of every launch: "native" (LLVM JIT), or "simulate" (the NeuronCore simulator,
# far slower; scripts/op_coverage.py runs the ops on both).
mode = "native"
profiles = None  # ops.profiled() sets a list: (kernel name, runtime.NativeProfile) per launch
_compiled = lru.Lru()  # signature -> the compiled kernel (bounded: shapes vary without end)
_rejected = lru.Lru()  # signature -> why the kernel refused it


def launch(op, name, grid, tensors, params, reference):
    """Runs registered kernel `name` natively over `grid` on CPU tensors with keyword `params`
    and returns its outputs as torch tensors; when the kernel rejects these shapes, counts and
    warns (or raises in strict mode) and returns reference() instead. op names the torch
    operator in the warning. A signature is traced and compiled once; later calls go straight
    to the runtime (no binding of arguments: the cost of a call is the copy-free conversion of
    the tensors)."""
    tensors = [t.contiguous() for t in tensors]
    key = (name, tuple((tuple(t.shape), t.dtype) for t in tensors), tuple(params.items()))
    compiled = _compiled.get(key)
    if compiled is None:
        why = _rejected.get(key)
        if why is None:
            try:
                compiled = _compiled[key] = registry.get(name).compile(*tensors, **params)
            except NeuronError as e:
                why = _rejected[key] = e.message
        if compiled is None:
            note_fallback(op, "shape", f"kernel {name} rejects these shapes: {why}",
                          strict=strict, hint=" (strict mode: no fallback to PyTorch)")
            return reference()
    if mode == "native":
        outs = runtime.run_torch(compiled, tensors, grid)
        if profiles is not None:
            profiles.append((name, runtime.native_profile(
                compiled, runtime.torch_host_tensors(tensors), grid)))
    else:
        outs, _ = runtime.run(compiled, [runtime.to_numpy(t) for t in tensors], grid, mode)
        outs = [runtime.from_numpy(o, True) for o in outs]
    return outs[0] if len(outs) == 1 else tuple(outs)
