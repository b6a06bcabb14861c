"""Calling kernels: NumPy / torch arguments to host tensors (zero-copy when contiguous), the
simulator, and outputs back as the caller's array kind."""
import os
import sys

import numpy as np

from . import _C
from . import lru
from .dtypes import from_ml_dtypes, numpy_dtype, to_dtype, torch_dtype


def _torch():
    # torch is never imported here: a torch tensor argument means the caller already has it.
    return sys.modules.get("torch")


def torch_tensor_type():
    """torch.Tensor when torch is imported, else None."""
    torch = _torch()
    return torch.Tensor if torch is not None else None


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x):
    """A NumPy view of an argument (torch CPU tensors share memory; bf16 via ml_dtypes)."""
    if is_torch(x):
        torch = _torch()
        if x.device.type != "cpu":
            raise TypeError(f"neuron kernels take CPU tensors; got a tensor on {x.device}")
        t = x.detach()  # shares memory; a non-contiguous tensor gives a strided view
        if t.is_floating_point() and from_ml_dtypes(to_dtype(t.dtype)):
            # NumPy has no such dtype: view the bits as ints, then as ml_dtypes'.
            bits = torch.uint8 if t.element_size() == 1 else torch.int16
            return t.view(bits).numpy().view(numpy_dtype(to_dtype(t.dtype)))
        return t.numpy()
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"kernel arguments are NumPy arrays or torch tensors, got {type(x).__name__}")


def host_arrays(args):
    """Contiguous NumPy arrays of the kernel arguments (the caller's memory when contiguous,
    else copies), and a function to call after the run that copies what the kernel wrote into a
    copy back into the caller's array or tensor, so in-place writes are never lost."""
    views = [to_numpy(a) for a in args]
    # A read-only array is copied too, so a kernel that writes it fails below, not silently.
    arrays = [np.ascontiguousarray(v) if v.flags.writeable else np.array(v, order="C")
              for v in views]

    def write_back():
        for i, (v, a) in enumerate(zip(views, arrays)):
            if a is v or np.shares_memory(a, v):
                continue
            bits = np.dtype(f"u{v.dtype.itemsize}")  # compare bits: NaN == NaN, -0 != +0
            if np.array_equal(v.view(bits), a.view(bits)):
                continue
            if not v.flags.writeable:
                raise ValueError(f"the kernel writes argument {i}, a read-only array")
            np.copyto(v, a)
    return arrays, write_back


_as_torch = {}  # NumPy dtype -> (torch dtype, NumPy dtype of its bits or None)


def from_numpy(a, like_torch):
    if not like_torch:
        return a
    torch = _torch()
    how = _as_torch.get(a.dtype)
    if how is None:
        d = to_dtype(a.dtype)
        # torch cannot read ml_dtypes arrays: through their bits
        bits = (np.uint8 if a.itemsize == 1 else np.int16) if from_ml_dtypes(d) else None
        how = _as_torch.setdefault(a.dtype, (torch_dtype(d, torch), bits))
    if how[1] is not None:
        return torch.from_numpy(a.view(how[1])).view(how[0])
    return torch.from_numpy(a)


def spec_of(a, name):
    return _C.TensorSpec(list(a.shape), to_dtype(a.dtype), name)


# Loaded native kernels by compiled kernel: id(compiled) -> (compiled, kernels mode, kernel,
# the report of a reuse, {grid: how run_torch allocates the outputs}).
# The entry holds `compiled`, so its id is not reused while the entry lives; least recently used
# entries go first (lru.py; the C++ caches below keep what is evicted here).
_loaded = lru.Lru()


def _loaded_entry(compiled):
    """(compiled, mode, kernel, reuse report, outputs by grid) of the loaded native kernel of
    `compiled`, and whether it was loaded before: compiled (or found in the compile cache) on
    the first call, then reused without a cache lookup, which prints and hashes the IR (~100-300
    us a call)."""
    # The variables that select other machine code for the same compiled kernel.
    mode = _C.native_code_env()
    hit = _loaded.get(id(compiled))
    if hit is not None and hit[0] is compiled and hit[1] == mode:
        return hit, True
    kernel = _C.compile_native(compiled)  # the compile cache serves concurrent callers
    entry = (compiled, mode, kernel, kernel.reuse_report, {})
    _loaded[id(compiled)] = entry
    return entry, False


def native_kernel(compiled):
    """The loaded native kernel of `compiled` and its report text (the compile's the first
    time, then the reuse's)."""
    entry, reused = _loaded_entry(compiled)
    return entry[2], (entry[3] if reused else entry[2].report)


def clear_loaded():
    """Forgets the loaded kernels (neuron.cache.clear)."""
    _loaded.clear()


def host_tensors(arrays):
    """Host tensors borrowing C-contiguous NumPy arrays' memory (the caller keeps the arrays
    alive while they are used)."""
    return [_C.HostTensor.borrow_array(a, to_dtype(a.dtype)) for a in arrays]


def _run_native(compiled, host, grid):
    """(outputs as host tensors, compile report text) of a native run; device_print output
    goes to stdout."""
    kernel, report = native_kernel(compiled)
    outs, printed = _C.run_native_kernel(kernel, host, list(grid))
    if printed:
        sys.stdout.write(printed)
    return outs, report


def torch_host_tensors(tensors):
    """Host tensors borrowing contiguous CPU torch tensors' memory (no NumPy on the way; the
    caller keeps the tensors alive while they are used)."""
    host = []
    for t in tensors:
        if not t.is_cpu:  # (not t.device.type: it builds a device object on every call)
            raise TypeError(f"neuron kernels take CPU tensors; got a tensor on {t.device}")
        host.append(_C.HostTensor.borrow(t.data_ptr(), list(t.shape), to_dtype(t.dtype)))
    return host


def _torch_outputs(entry, grid):
    """[(shape, torch dtype, zeroed)] of the outputs of a loaded kernel's runs over `grid`."""
    outs = entry[4].get(grid)
    if outs is None:
        torch = _torch()
        outs = entry[4][grid] = [(tuple(shape), torch_dtype(d, torch), zero)
                                 for shape, d, zero in _C.native_outputs(entry[2], list(grid))]
    return outs


def _torch_threads(torch):
    """The worker threads of a launch from the torch operators: torch's own count
    (torch.set_num_threads caps ours too), unless NEURON_THREADS says otherwise (0: it
    decides)."""
    return 0 if os.environ.get("NEURON_THREADS") else torch.get_num_threads()


def torch_launch_threads(torch):
    """How many worker threads a launch from the torch operators runs on (_torch_threads, or
    NEURON_THREADS as the native runtime parses it, config().threads: 0 is every core)."""
    return _torch_threads(torch) or _C.config().threads or os.cpu_count() or 1


def run_torch(compiled, tensors, grid):
    """Runs natively on CPU torch tensors (each contiguous, with the shape and dtype
    `compiled` was traced for), borrowing their memory; returns the outputs as torch tensors.
    The cheap path of the torch operators: the outputs are torch's own (torch.empty, or
    torch.zeros where the kernel may read them before writing), and the kernel takes the
    tensors' addresses, with no host tensor objects or NumPy arrays on the way (~5 us a call)."""
    grid = tuple(grid)
    entry, _ = _loaded_entry(compiled)
    torch = _torch()
    outs = [(torch.zeros if zero else torch.empty)(shape, dtype=dtype)
            for shape, dtype, zero in _torch_outputs(entry, grid)]
    data = []
    for t in (*tensors, *outs):
        if not t.is_cpu:  # (not t.device.type: it builds a device object on every call)
            raise TypeError(f"neuron kernels take CPU tensors; got a tensor on {t.device}")
        data.append(t.data_ptr())
    printed = _C.run_native_at(entry[2], data, list(grid), _torch_threads(torch))
    if printed:
        sys.stdout.write(printed)
    return outs


def run_native_host(compiled, host, grid):
    """(NumPy outputs, compile report text) of a native run on host tensors."""
    outs, report = _run_native(compiled, host, grid)
    return [o.to_numpy(numpy_dtype(o.dtype)) for o in outs], report


class NativeProfile:
    """Where a native run's time goes, per engine instruction: `rows` (dicts with id, op, line,
    calls and ms per run, summed over the worker threads; slowest first), `lines` (the same
    summed per source line and opcode, with the number of instructions: an unrolled loop
    gives many instructions one line), `wall_ms` (per run) and `runs`. str() is the table of
    `lines`. Timing brackets every instruction call (with partition blocks, every block's
    call), so the instruction times add up to a little less than the threads' time; the rest is
    the runtime's (per-program setup, clearing memories), and the two clock reads per call add
    tens of nanoseconds to each."""

    def __init__(self, rows, wall_ns, runs):
        self.runs = runs
        self.wall_ms = wall_ns / runs / 1e6
        self.rows = sorted(({"id": i, "op": op, "line": line, "calls": calls / runs,
                             "ms": ns / runs / 1e6} for i, op, line, calls, ns in rows),
                           key=lambda r: -r["ms"])
        lines = {}
        for r in self.rows:
            agg = lines.setdefault((r["line"], r["op"]), {"line": r["line"], "op": r["op"],
                                                          "instructions": 0, "calls": 0,
                                                          "ms": 0.0})
            agg["instructions"] += 1
            agg["calls"] += r["calls"]
            agg["ms"] += r["ms"]
        self.lines = sorted(lines.values(), key=lambda r: -r["ms"])

    def __str__(self):
        total = sum(r["ms"] for r in self.lines) or 1.0
        out = [f"native profile: {self.wall_ms:.3f} ms per run (wall, mean of {self.runs}); "
               f"instructions {total:.3f} ms (summed over threads)",
               f"{'instruction':<24} {'count':>5} {'calls':>9} {'ms':>9} {'%':>6}  line"]
        for r in self.lines:
            out.append(f"{r['op']:<24} {r['instructions']:>5} {r['calls']:>9g} {r['ms']:>9.3f} "
                       f"{100 * r['ms'] / total:>5.1f}%  {r['line']}")
        return "\n".join(out)

    __repr__ = __str__


def native_profile(compiled, host, grid, runs=3):
    """NativeProfile of `runs` native runs of a compiled kernel on host tensors, compiled with
    every instruction call timed (a separately cached variant of the same machine code)."""
    if runs < 1:
        raise ValueError(f"native_profile: runs={runs} must be at least 1")
    rows, wall_ns = _C.native_profile(compiled, host, list(grid), runs)
    return NativeProfile(rows, wall_ns, runs)


def run(compiled, arrays, grid, mode="native", profile=False, dtypes=None):
    """Runs natively (LLVM JIT) or on the simulator; returns (NumPy outputs, report: the
    native compile report text, or the simulator's profile summary when profiling; profiling
    natively, a NativeProfile of one more run). dtypes: the tensors' neuron dtypes when an
    array's own would be another (a tfloat32 tile held as float32)."""
    keep = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
    host = host_tensors(keep) if dtypes is None else \
        [_C.HostTensor.borrow_array(a, d) for a, d in zip(keep, dtypes)]
    if mode == "native":
        outs, summary = _run_native(compiled, host, grid)
        if profile:
            summary = native_profile(compiled, host, grid, 1)
    else:
        outs, printed, summary = _C.simulate(compiled, host, list(grid), profile)
        if printed:
            sys.stdout.write(printed)
    return [o.to_numpy(numpy_dtype(o.dtype)) for o in outs], summary
