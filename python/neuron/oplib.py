"""neuron.load_ops(path): an operator library built by neuron_add_op_library (docs/custom-ops.md)
as PyTorch operators torch.ops.<namespace>.<name>, and as neuron Kernels.

    lib = neuron.load_ops("build-ops/libmy_ops.so")
    out, h = torch.ops.my_ops.add_rms_norm(x, residual, weight, eps=1e-5)
    lib.kernel("add_rms_norm")(x_np, r_np, w_np)      # the neuron.Kernel (NumPy or torch)

The library exports C entry points (tools/op_library_entry.cpp): its operators' schemas (JSON
written by neuron-opgen), and a function that traces one operator for given shapes, dtypes and
parameters and returns the Kernel IR as text. Each operator is a neuron.Kernel whose trace is
that call, parsed here (neuron.parse_kernel), so it compiles, caches and runs like the
built-in kernels (natively by default; mode="simulate" for the simulator). Each becomes a
torch.library operator with the schema neuron-opgen wrote (tensors, then parameters with their
defaults), a CPU implementation and a fake one (the output shapes and dtypes of the trace), so
meta tensors and torch.compile see it. An operator runs as one program (grid (1,)); it has no
autograd formula. Loading a library twice returns the first load."""
import ctypes
import inspect
import json
import os

from . import _C
from .errors import _error
from .kernel import Kernel

__all__ = ["load_ops", "OpLibrary"]

_loaded = {}  # realpath -> OpLibrary


def load_ops(path, *, mode="native", register_torch=True):
    """Loads operator library `path`; registers its operators with PyTorch (imports torch) unless
    register_torch=False. Returns an OpLibrary."""
    real = os.path.realpath(path)
    if real not in _loaded:
        _loaded[real] = OpLibrary(real, mode)
    lib = _loaded[real]
    if register_torch:
        lib.register_torch()
    return lib


class _Op:
    """What a Kernel traces for one operator of a library (duck-typed like registry.py's
    _Registered): the call into the library, the IR text parsed."""

    def __init__(self, lib, info):
        self._neuron_registered = self
        self.lib, self.info = lib, info
        self.__name__ = self.__qualname__ = info["name"]
        self.__module__ = __name__
        self.__doc__ = f"{info['doc']}\n\n{info['namespace']}::{info['schema']}\n" \
                       f"Declared at {info['file']}:{info['line']}."
        P = inspect.Parameter
        self.__signature__ = inspect.Signature(
            [P(n, P.POSITIONAL_OR_KEYWORD) for n in info["inputs"]] +
            [P(p["name"], P.KEYWORD_ONLY,
               default=P.empty if p["default"] is None else _default(p)) for p in info["params"]])

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.__name__} is a C++ operator: call it through "
                        f"torch.ops.{self.info['namespace']}.{self.__name__} or lib.kernel()")

    def trace(self, specs, params):
        lines = [" ".join(["tensor", s.dtype.name_] + [str(d) for d in s.shape]) for s in specs]
        for n, v in params.items():
            v = v.name_ if isinstance(v, _C.DType) else v
            text = str(int(v)) if isinstance(v, bool) else float(v).hex() if isinstance(
                v, float) else str(v)
            if "\n" in text:
                raise ValueError(f"parameter {n} of {self.__name__}: a newline in {v!r}")
            lines.append(f"param {n} {text}")
        reply = self.lib._trace(self.__name__, "\n".join(lines))
        if reply.startswith("!error\n"):
            rule, file, line, column, message = reply[7:].split("\n", 4)
            raise _error(rule, message, _C.Span(file, int(line), int(column)))
        return _C.parse_kernel(reply, f"{self.lib.path}:{self.__name__}")


def _default(p):
    """A parameter's default from its C++ text (neuron-opgen evaluated it)."""
    d, kind = p["default"], p["kind"]
    if kind == "bool":
        return d == "true"
    if kind == "int":
        return int(d)
    if kind == "float":
        return float(d)
    if kind in ("choice", "dtype"):
        return d.rsplit("::", 1)[-1]  # the enumerator's name
    return json.loads(d) if d.startswith('"') else d  # a string literal


class OpLibrary:
    """A loaded operator library: .path, .operators (name -> schema info: namespace, schema,
    doc, file, line, inputs, params), .kernel(name) (the neuron.Kernel)."""

    def __init__(self, path, mode):
        self.path = path
        self._dll = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        try:
            schema_fn = self._dll.neuron_op_library_schema
            self._trace_fn = self._dll.neuron_op_library_trace
            self._free = self._dll.neuron_op_library_free
        except AttributeError as e:
            raise ValueError(f"{path} is not a neuron operator library (built by "
                             f"neuron_add_op_library): {e}") from None
        schema_fn.restype = ctypes.c_char_p
        self._trace_fn.restype = ctypes.c_void_p
        self._trace_fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        self._free.argtypes = [ctypes.c_void_p]
        self.operators = {op["name"]: op for op in json.loads(schema_fn())["operators"]}
        self._kernels = {n: Kernel(_Op(self, info), mode=mode)
                         for n, info in self.operators.items()}
        self._torch_libs = None

    def _trace(self, name, request):
        p = self._trace_fn(name.encode(), request.encode())
        try:
            return ctypes.string_at(p).decode()
        finally:
            self._free(p)

    def kernel(self, name):
        """Operator `name` as a neuron.Kernel: tensors positionally, parameters by keyword."""
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(f"{self.path} has no operator {name!r}; it has "
                           f"{', '.join(sorted(self._kernels)) or 'none'}") from None

    def register_torch(self):
        """Defines each operator as torch.ops.<namespace>.<name> (once)."""
        if self._torch_libs is not None:
            return
        import torch
        self._torch_libs = {}
        for name, info in self.operators.items():
            ns = info["namespace"]
            if ns not in self._torch_libs:
                self._torch_libs[ns] = torch.library.Library(ns, "FRAGMENT")
            lib = self._torch_libs[ns]
            lib.define(info["schema"], tags=())
            impl, fake = _torch_impls(self._kernels[name], info)
            lib.impl(name, impl, "CPU")
            torch.library.register_fake(f"{ns}::{name}", fake, lib=lib)

    def __repr__(self):
        ops = ", ".join(f"{i['namespace']}::{i['schema']}" for i in self.operators.values())
        return f"<neuron operator library {self.path}: {ops}>"


def _torch_impls(kernel, info):
    """The CPU and fake implementations of one operator: the schema's arguments (tensors, then
    parameters) to the kernel's call."""
    import torch
    n_in = len(info["inputs"])
    names = [p["name"] for p in info["params"]]

    def split(args, kwargs):
        params = dict(zip(names, args[n_in:]))
        params.update(kwargs)
        return args[:n_in], params

    def impl(*args, **kwargs):
        tensors, params = split(args, kwargs)
        out = kernel(*[t.contiguous() for t in tensors], **params)
        return out

    def fake(*args, **kwargs):
        tensors, params = split(args, kwargs)
        specs = [(tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in tensors]
        ir = kernel.trace(*specs, **params)
        outs = [torch.empty(shape, dtype=_torch_dtype(d), device=tensors[0].device)
                for shape, d in ir.output_shapes]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return impl, fake


def _torch_dtype(d):
    import torch
    from .dtypes import torch_dtype
    return torch_dtype(d, torch)
