"""Traces a score_mod / mask_mod once with symbolic proxies into an expression graph.

A mod is an ordinary Python function of (score, b, h, q_idx, kv_idx) or (b, h, q_idx, kv_idx).
Calling it with `Proxy` arguments records every operation as a `Node`; tensors the mod
captures become graph *inputs* (by position), so their values are kernel arguments and never
part of the graph's key. Anything the tracer cannot express raises `UnsupportedModError`
naming the operation and the mod's line.
"""
import linecache
import os
import sys
import traceback

import torch

# Value kinds of graph nodes: the evaluator maps them to torch dtypes.
BOOL, INT, FLOAT = "bool", "int", "float"

ARGS_SCORE = ("score", "b", "h", "q_idx", "kv_idx")
ARGS_MASK = ("b", "h", "q_idx", "kv_idx")

# Elementwise unary functions the graph knows, by canonical name.
UNARY = ("neg", "abs", "exp", "exp2", "log", "log2", "tanh", "sin", "cos", "sigmoid", "sqrt",
         "rsqrt", "floor", "ceil", "round", "relu", "square", "not")
BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "minimum", "maximum",
          "and", "or", "xor", "eq", "ne", "lt", "le", "gt", "ge")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


class UnsupportedModError(RuntimeError):
    """A score_mod / mask_mod uses something the tracer cannot turn into a kernel."""


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _user_line():
    """'file:line: source' of the innermost frame that is neither ours nor torch's. Walks the
    frames directly: PyTorch's indexing probes a traced value with len() on every trace and
    catches the error, so this runs on every call (traceback.extract_stack read the source of
    every frame on the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        f = os.path.abspath(name)
        if not (f.startswith(_PKG_DIR) or f.startswith(_TORCH_DIR) or "<frozen" in f):
            src = linecache.getline(name, frame.f_lineno).strip()
            return f"{name}:{frame.f_lineno}: {src}"
        frame = frame.f_back
    return "<unknown line>"


def unsupported(what):
    raise UnsupportedModError(
        f"flex_attention: the score_mod/mask_mod uses {what}, which cannot be traced\n"
        f"    at {_user_line()}\n"
        "Supported: arithmetic, comparisons, torch.where, &, |, ~, exp/log/tanh/sin/cos/abs/"
        "sigmoid/sqrt, integer // and %, shifts by an int constant, casts, Python scalars and "
        "captured tensors indexed by the index arguments")


class Node:
    """One operation. `op`: 'arg', 'const', 'input', 'gather', 'cast', 'where' or a name from
    UNARY / BINARY; `args`: Nodes or Python values; `kind`: BOOL, INT or FLOAT."""
    __slots__ = ("op", "args", "kind", "id")

    def __init__(self, op, args, kind):
        self.op, self.args, self.kind, self.id = op, tuple(args), kind, -1


def _kind_of_dtype(dt):
    if dt == torch.bool:
        return BOOL
    return FLOAT if dt.is_floating_point else INT


def _promote(a, b):
    order = {BOOL: 0, INT: 1, FLOAT: 2}
    return a if order[a] >= order[b] else b


class Graph:
    """The record of one trace: nodes in creation order, captured tensors, the output."""

    def __init__(self, arg_names):
        self.nodes = []
        self.inputs = []           # captured tensors, in first-use order
        self._input_ids = {}
        self._consts = {}
        self.args = {}
        for name in arg_names:
            kind = FLOAT if name == "score" else INT
            self.args[name] = self.add(Node("arg", (name,), kind))
        self.output = None

    def add(self, node):
        node.id = len(self.nodes)
        self.nodes.append(node)
        return node

    def const(self, value):
        if isinstance(value, bool):
            kind = BOOL
        elif isinstance(value, int):
            kind = INT
        elif isinstance(value, float):
            kind = FLOAT
        else:
            unsupported(f"a constant of type {type(value).__name__}")
        key = (kind, repr(value))
        if key not in self._consts:
            self._consts[key] = self.add(Node("const", (value,), kind))
        return self._consts[key]

    def input(self, t):
        if id(t) not in self._input_ids:
            self._input_ids[id(t)] = len(self.inputs)
            self.inputs.append(t)
        k = self._input_ids[id(t)]
        return Node("input", (k,), _kind_of_dtype(t.dtype))  # not a value: gathered from

    def key(self):
        """Stable text of the graph plus the shapes and dtypes of its inputs (not values)."""
        lines = []
        for n in self.nodes:
            args = ",".join(_arg_text(a) for a in n.args)
            lines.append(f"%{n.id}={n.op}[{n.kind}]({args})")
        lines.append(f"out=%{self.output.id}")
        for i, t in enumerate(self.inputs):
            lines.append(f"in{i}:{tuple(t.shape)}:{t.dtype}")
        return "\n".join(lines)

    def uses(self, name):
        """Whether the output depends on argument `name`."""
        seen, stack = set(), [self.output]
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if n.op == "arg" and n.args[0] == name:
                return True
            stack.extend(a for a in n.args if isinstance(a, Node))
        return False


def _arg_text(a):
    if isinstance(a, Node):
        return f"in{a.args[0]}" if a.op == "input" else f"%{a.id}"
    return repr(a)


def _cast_kind(dtype):
    if not isinstance(dtype, torch.dtype):
        unsupported(f"a cast to {dtype!r}")
    return _kind_of_dtype(dtype)


class Proxy:
    """A traced scalar. Python operators, tensor methods and torch functions on it record
    nodes in the active graph."""
    __slots__ = ("node", "graph")

    def __init__(self, node, graph):
        self.node, self.graph = node, graph

    # -- helpers
    def _wrap(self, v):
        if isinstance(v, Proxy):
            return v.node
        if isinstance(v, torch.Tensor):
            if v.dim() != 0:
                unsupported(f"a captured tensor of shape {tuple(v.shape)} used as a scalar "
                            "(index it with the index arguments)")
            return self.graph.add(Node("gather", (self.graph.input(v),), _kind_of_dtype(v.dtype)))
        if isinstance(v, (bool, int, float)):
            return self.graph.const(v)
        unsupported(f"an operand of type {type(v).__name__}")

    def _new(self, op, args, kind):
        return Proxy(self.graph.add(Node(op, args, kind)), self.graph)

    def _binary(self, op, other, swap=False):
        a, b = self.node, self._wrap(other)
        if swap:
            a, b = b, a
        if op in COMPARE:
            kind = BOOL
        elif op in ("and", "or", "xor"):
            kind = _promote(a.kind, b.kind)
        elif op == "truediv":
            kind = FLOAT
        else:
            kind = _promote(a.kind, b.kind)
            if kind == BOOL and op in ("add", "sub", "mul", "floordiv", "mod", "pow"):
                kind = INT
        if op in ("and", "or", "xor") and kind == FLOAT:
            unsupported(f"the bitwise operator {op!r} on floating-point values")
        return self._new(op, (a, b), kind)

    def _shift(self, other, left):
        """x << c and x >> c of an integer value by a constant c >= 0: x * 2**c and
        x // 2**c (an arithmetic shift is a floored division; attention-gym's Morton-order
        neighbourhood masks write them)."""
        what = "<<" if left else ">>"
        if self.node.kind == FLOAT:
            unsupported(f"the shift {what} of a floating-point value")
        if isinstance(other, bool) or not isinstance(other, int) or other < 0:
            unsupported(f"the shift {what} by {other!r} (shifts by a non-negative int constant "
                        "only)")
        return self._binary("mul" if left else "floordiv", 1 << other)

    def _unary(self, op):
        n = self.node
        if op == "not":
            if n.kind == FLOAT:
                unsupported("~ on a floating-point value")
            return self._new("not", (n,), n.kind)
        if op in ("neg", "abs", "relu", "square") or op in ("floor", "ceil", "round"):
            kind = n.kind if n.kind != BOOL else INT
            return self._new(op, (n,), kind)
        return self._new(op, (n,), FLOAT)

    def to(self, *args, **kwargs):
        dtype = kwargs.get("dtype")
        for a in args:
            if isinstance(a, torch.dtype):
                dtype = a
        if dtype is None:
            return self  # .to(device) and the like change nothing here
        return self._new("cast", (self.node, str(dtype)), _cast_kind(dtype))

    def float(self):
        return self.to(torch.float32)

    def int(self):
        return self.to(torch.int32)

    def long(self):
        return self.to(torch.int64)

    def bool(self):
        return self.to(torch.bool)

    def double(self):
        return self.to(torch.float64)

    def half(self):
        return self.to(torch.float16)

    def bfloat16(self):
        return self.to(torch.bfloat16)

    def type(self, dtype):
        return self.to(dtype)

    def new_zeros(self, size=(), dtype=None, **_):
        return self._const_like(0, dtype)

    def new_ones(self, size=(), dtype=None, **_):
        return self._const_like(1, dtype)

    def _const_like(self, v, dtype):
        kind = _cast_kind(dtype) if dtype is not None else self.node.kind
        value = {BOOL: bool(v), INT: int(v), FLOAT: float(v)}[kind]
        return Proxy(self.graph.const(value), self.graph)

    def __bool__(self):
        unsupported("Python control flow (if / and / or / not / bool()) on a traced value "
                    "(use torch.where, &, | or ~)")

    def __index__(self):
        unsupported("a traced value used as a Python int (range, list index, slice)")

    __int__ = __index__

    def __float__(self):
        unsupported("a traced value converted to a Python float (math.* functions); use torch.*")

    def __len__(self):
        unsupported("len() of a traced scalar")

    def __iter__(self):
        unsupported("iterating over a traced scalar")

    def __getitem__(self, key):
        unsupported("subscripting a traced scalar")

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"Proxy(%{self.node.id}:{self.node.kind})"

    @property
    def dtype(self):
        return {BOOL: torch.bool, INT: torch.int32, FLOAT: torch.float32}[self.node.kind]

    @property
    def shape(self):
        return torch.Size([])

    @property
    def device(self):
        return torch.device("cpu")

    def dim(self):
        return 0

    def item(self):
        unsupported(".item() on a traced value")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _torch_function(func, args, kwargs or {})


def _binop(op, swap=False):
    return lambda self, other: self._binary(op, other, swap)


for _name, _op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "truediv"),
                   ("floordiv", "floordiv"), ("mod", "mod"), ("pow", "pow"),
                   ("and", "and"), ("or", "or"), ("xor", "xor")]:
    setattr(Proxy, f"__{_name}__", _binop(_op))
    setattr(Proxy, f"__r{_name}__", _binop(_op, swap=True))
for _name in COMPARE:
    setattr(Proxy, f"__{_name}__", _binop(_name))
Proxy.__lshift__ = lambda self, other: self._shift(other, True)
Proxy.__rshift__ = lambda self, other: self._shift(other, False)
Proxy.__neg__ = lambda self: self._unary("neg")
Proxy.__pos__ = lambda self: self
Proxy.__abs__ = lambda self: self._unary("abs")
Proxy.__invert__ = lambda self: self._unary("not")
for _name in ("exp", "exp2", "log", "log2", "tanh", "sin", "cos", "sigmoid", "sqrt", "rsqrt",
              "floor", "ceil", "round", "relu", "square", "abs", "neg"):
    setattr(Proxy, _name, (lambda op: lambda self: self._unary(op))(_name))
Proxy.logical_not = lambda self: self._unary("not")
Proxy.bitwise_not = lambda self: self._unary("not")
Proxy.negative = lambda self: self._unary("neg")
Proxy.clamp = lambda self, min=None, max=None: _clamp(self, min, max)
Proxy.clip = Proxy.clamp
Proxy.maximum = lambda self, o: self._binary("maximum", o)
Proxy.minimum = lambda self, o: self._binary("minimum", o)
for _name, _op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv"),
                   ("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                   ("ge", "ge"), ("logical_and", "and"), ("logical_or", "or"),
                   ("bitwise_and", "and"), ("bitwise_or", "or"), ("remainder", "mod"),
                   ("floor_divide", "floordiv"), ("pow", "pow")]:
    setattr(Proxy, _name, _binop(_op))


def _clamp(x, lo, hi):
    if lo is not None:
        x = x._binary("maximum", lo)
    if hi is not None:
        x = x._binary("minimum", hi)
    return x


def _graph_of(args):
    for a in args:
        if isinstance(a, Proxy):
            return a.graph
        if isinstance(a, (tuple, list)):
            g = _graph_of(a)
            if g is not None:
                return g
    return None


def _as_proxy(graph, v):
    if isinstance(v, Proxy):
        return v
    return Proxy(Proxy(None, graph)._wrap(v), graph)


# torch functions mapped to graph ops: name -> (op, arity)
_TORCH_UNARY = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "tanh": "tanh",
                "sin": "sin", "cos": "cos", "sigmoid": "sigmoid", "sqrt": "sqrt",
                "rsqrt": "rsqrt", "abs": "abs", "neg": "neg", "negative": "neg",
                "floor": "floor", "ceil": "ceil", "round": "round", "relu": "relu",
                "square": "square", "logical_not": "not", "bitwise_not": "not"}
_TORCH_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "truediv",
                 "true_divide": "truediv", "floor_divide": "floordiv", "remainder": "mod",
                 "fmod": None, "pow": "pow", "maximum": "maximum", "minimum": "minimum",
                 "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
                 "logical_and": "and", "logical_or": "or", "logical_xor": "xor",
                 "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor",
                 "__and__": "and", "__or__": "or", "__xor__": "xor", "__rand__": "and",
                 "__ror__": "or", "__add__": "add", "__radd__": "add", "__sub__": "sub",
                 "__mul__": "mul", "__rmul__": "mul", "__truediv__": "truediv",
                 "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le",
                 "__gt__": "gt", "__ge__": "ge", "__floordiv__": "floordiv",
                 "__mod__": "mod", "__pow__": "pow"}
_TORCH_RSWAP = {"__rsub__": "sub", "__rtruediv__": "truediv", "__rfloordiv__": "floordiv",
                "__rmod__": "mod", "__rpow__": "pow", "__rdiv__": "truediv"}


def _torch_function(func, args, kwargs):
    name = getattr(func, "__name__", str(func))
    graph = _graph_of(list(args) + list(kwargs.values()))
    if name == "__getitem__":
        return _getitem(graph, args[0], args[1])
    if name == "where":
        if len(args) + len(kwargs) != 3:
            unsupported("torch.where with one argument")
        c, x, y = (list(args) + [kwargs.get(k) for k in ("input", "other")])[:3]
        c, x, y = (_as_proxy(graph, v) for v in (c, x, y))
        if c.node.kind != BOOL:
            unsupported("torch.where with a non-boolean condition")
        return c._new("where", (c.node, x.node, y.node), _promote(x.node.kind, y.node.kind))
    if name in ("clamp", "clip"):
        return _clamp(_as_proxy(graph, args[0]), *(list(args[1:]) + [kwargs.get("min"),
                                                                     kwargs.get("max")])[:2])
    if name in ("to", "type", "float", "int", "long", "bool", "double", "half", "bfloat16"):
        return getattr(_as_proxy(graph, args[0]), name)(*args[1:], **kwargs)
    if name in ("zeros_like", "ones_like", "full_like"):
        x = _as_proxy(graph, args[0])
        v = {"zeros_like": 0, "ones_like": 1}.get(name, args[1] if len(args) > 1 else None)
        return x._const_like(v, kwargs.get("dtype"))
    if name in ("new_zeros", "new_ones"):
        return getattr(_as_proxy(graph, args[0]), name)(*args[1:], **kwargs)
    if name in ("__get__",) or name in ("dtype", "shape", "device"):
        unsupported(f"torch.{name}")
    if kwargs and any(k not in ("out",) for k in kwargs):
        unsupported(f"torch.{name} with keyword arguments {sorted(kwargs)}")
    if name in _TORCH_UNARY and len(args) == 1:
        return _as_proxy(graph, args[0])._unary(_TORCH_UNARY[name])
    if name in ("__neg__",):
        return _as_proxy(graph, args[0])._unary("neg")
    if name in ("__invert__",):
        return _as_proxy(graph, args[0])._unary("not")
    if name in ("__abs__",):
        return _as_proxy(graph, args[0])._unary("abs")
    if name in _TORCH_BINARY and _TORCH_BINARY[name] and len(args) == 2:
        return _as_proxy(graph, args[0])._binary(_TORCH_BINARY[name], args[1])
    if name in ("__lshift__", "__rshift__", "bitwise_left_shift", "bitwise_right_shift") \
            and len(args) == 2 and isinstance(args[0], Proxy):
        return args[0]._shift(args[1], "left" in name or name == "__lshift__")
    if name in _TORCH_RSWAP and len(args) == 2:
        return _as_proxy(graph, args[0])._binary(_TORCH_RSWAP[name], args[1], swap=True)
    unsupported(f"torch.{name}")


class _PartialIndex:
    """A captured tensor indexed by fewer indices than it has dims: more subscripts follow."""

    def __init__(self, graph, tensor, indices):
        self.graph, self.tensor, self.indices = graph, tensor, indices

    def __getitem__(self, key):
        return _getitem(self.graph, self.tensor, key, self.indices)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        unsupported(f"torch.{getattr(func, '__name__', func)} on a partly indexed captured "
                    "tensor (index every dimension)")


def _getitem(graph, tensor, key, prefix=()):
    if isinstance(tensor, _PartialIndex):
        return tensor[key]
    if not isinstance(tensor, torch.Tensor):
        unsupported(f"subscripting a {type(tensor).__name__}")
    keys = key if isinstance(key, tuple) else (key,)
    idx = list(prefix)
    for k in keys:
        if isinstance(k, Proxy):
            if k.node.kind == FLOAT:
                unsupported("a captured tensor indexed by a floating-point value")
            idx.append(k.node)
        elif isinstance(k, bool) or not isinstance(k, int):
            if isinstance(k, torch.Tensor) and k.dim() == 0 and not k.is_floating_point():
                idx.append(Proxy(None, graph)._wrap(k))
                continue
            unsupported(f"a captured tensor subscript of type {type(k).__name__} "
                        "(slices, None and lists are not traced)")
        else:
            idx.append(graph.const(k))
    if len(idx) > tensor.dim():
        unsupported(f"{len(idx)} subscripts on a captured tensor of shape {tuple(tensor.shape)}")
    if len(idx) < tensor.dim():
        return _PartialIndex(graph, tensor, tuple(idx))
    return Proxy(graph.add(Node("gather", (graph.input(tensor), *idx),
                                _kind_of_dtype(tensor.dtype))), graph)


def trace(mod, arg_names):
    """Calls `mod` once with proxies; returns the Graph. Raises UnsupportedModError."""
    g = Graph(arg_names)
    proxies = [Proxy(g.args[n], g) for n in arg_names]
    try:
        out = mod(*proxies)
    except UnsupportedModError:
        raise
    except (TypeError, RuntimeError, AttributeError, IndexError, ValueError) as e:
        # torch refused a proxy somewhere (a function without __torch_function__ handling).
        tb = traceback.extract_tb(sys.exc_info()[2])
        where = "<unknown line>"
        for fr in reversed(tb):
            f = os.path.abspath(fr.filename)
            if not (f.startswith(_PKG_DIR) or f.startswith(_TORCH_DIR)):
                where = f"{fr.filename}:{fr.lineno}: {(fr.line or '').strip()}"
                break
        raise UnsupportedModError(
            f"flex_attention cannot trace this score_mod/mask_mod: {type(e).__name__}: {e}\n"
            f"    at {where}") from e
    if isinstance(out, _PartialIndex):
        unsupported("a partly indexed captured tensor as the result")
    if isinstance(out, torch.Tensor):
        if out.dim() != 0:
            unsupported(f"a result of shape {tuple(out.shape)}")
        out = _as_proxy(g, out)
    elif isinstance(out, (bool, int, float)):
        out = Proxy(g.const(out), g)
    elif not isinstance(out, Proxy):
        unsupported(f"a result of type {type(out).__name__}")
    g.output = out.node
    _prune(g)
    return g


def _prune(g):
    """Drops nodes the output does not use (and renumbers), so the key depends on the result."""
    live, stack = set(), [g.output]
    while stack:
        n = stack.pop()
        if id(n) in live:
            continue
        live.add(id(n))
        stack.extend(a for a in n.args if isinstance(a, Node))
    keep = [n for n in g.nodes if id(n) in live or n.op == "arg"]
    for i, n in enumerate(keep):
        n.id = i
    g.nodes = keep
    # Renumber inputs in first-use order among live gathers.
    order = []
    for n in keep:
        if n.op == "gather":
            k = n.args[0].args[0]
            if k not in order:
                order.append(k)
    remap = {k: i for i, k in enumerate(order)}
    for n in keep:
        if n.op == "gather":
            n.args[0].args = (remap[n.args[0].args[0]],)
    g.inputs = [g.inputs[k] for k in order]
