"""Compiles a traced mod graph into a vectorized function over index tensors.

The graph becomes the source of one Python function of (score?, b, h, q_idx, kv_idx, *inputs)
whose body is one torch operation per node; the index arguments are broadcastable integer
tensors (a whole tile of the attention matrix at once) and the inputs are the captured tensors.
Because every node is a torch operation, the function has torch's own dtype and rounding rules
(the ones PyTorch's flex_attention applies when it calls the mod) and torch autograd
differentiates it, which is how the backward derives gradients of learnable captured tensors.
Compiled functions are cached by the graph's key (graph text + input shapes and dtypes).
"""
import copy
import math

import torch

from .tracing import Node

_BIN = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "truediv": "({} / {})",
        "floordiv": "({} // {})", "mod": "({} % {})", "pow": "({} ** {})",
        "and": "({} & {})", "or": "({} | {})", "xor": "({} ^ {})",
        "eq": "({} == {})", "ne": "({} != {})", "lt": "({} < {})", "le": "({} <= {})",
        "gt": "({} > {})", "ge": "({} >= {})",
        "minimum": "torch.minimum(_t({}), _t({}))", "maximum": "torch.maximum(_t({}), _t({}))"}
_UN = {"neg": "(-{})", "abs": "torch.abs(_t({}))", "exp": "torch.exp(_f({}))",
       "exp2": "torch.exp2(_f({}))", "log": "torch.log(_f({}))", "log2": "torch.log2(_f({}))",
       "tanh": "torch.tanh(_f({}))", "sin": "torch.sin(_f({}))", "cos": "torch.cos(_f({}))",
       "sigmoid": "torch.sigmoid(_f({}))", "sqrt": "torch.sqrt(_f({}))",
       "rsqrt": "torch.rsqrt(_f({}))", "floor": "torch.floor(_t({}))",
       "ceil": "torch.ceil(_t({}))", "round": "torch.round(_t({}))",
       "relu": "torch.relu(_t({}))", "square": "({0} * {0})", "not": "_not({})"}


def _t(x):
    return x if isinstance(x, torch.Tensor) else torch.tensor(x)


def _f(x):
    """Float math on an integer tensor promotes as torch does (to the default float dtype)."""
    x = _t(x)
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _not(x):
    if isinstance(x, torch.Tensor):
        return torch.logical_not(x) if x.dtype == torch.bool else torch.bitwise_not(x)
    return (not x) if isinstance(x, bool) else ~x


def _where(c, x, y):
    if not isinstance(c, torch.Tensor):
        return x if c else y
    return torch.where(c, x, y)


def _to(x, dtype):
    return _t(x).to(dtype)


# In-place forms: `x` is a temporary nobody else reads (or the forward's own score tile), so
# when the result has x's shape and dtype it is written into x: one pass, no allocation.
_IP_BIN = {"add": "add_", "sub": "sub_", "mul": "mul_", "truediv": "div_"}
_IP_UN = {"exp": "exp_", "log": "log_", "tanh": "tanh_", "sin": "sin_", "cos": "cos_",
          "sigmoid": "sigmoid_", "sqrt": "sqrt_", "abs": "abs_", "neg": "neg_"}


def _ip_bin(method, x, y, fallback):
    if (isinstance(x, torch.Tensor) and x.is_floating_point()
            and torch.result_type(x, y) == x.dtype
            and (not isinstance(y, torch.Tensor)
                 or torch.broadcast_shapes(x.shape, y.shape) == x.shape)):
        return getattr(x, method)(y)
    return fallback(x, y)


def _ip_un(method, x, fallback):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return getattr(x, method)()
    return fallback(x)


def source(graph, name="mod", inplace=False):
    """The Python source of the graph's function. inplace: temporaries used once (and the
    `score` argument) are updated in place."""
    uses = {}
    for n in graph.nodes:
        for x in n.args:
            if isinstance(x, Node) and x.op != "input":
                uses[x.id] = uses.get(x.id, 0) + 1
    owned = set()  # node ids whose value this function may overwrite
    if inplace:
        owned = {n.id for n in graph.nodes
                 if uses.get(n.id, 0) == 1
                 # gather / cast / where may return an input or the captured tensor itself
                 and (n.op not in ("arg", "const", "gather", "cast", "where")
                      or (n.op == "arg" and n.args[0] == "score"))}
    args = list(graph.args)
    params = args + [f"in{i}" for i in range(len(graph.inputs))]
    names = {}
    lines = [f"def {name}({', '.join(params)}):"]
    for n in graph.nodes:
        if n.op == "arg":
            names[n.id] = n.args[0]
            continue
        if n.op == "const":
            names[n.id] = repr(n.args[0])
            continue
        a = [names[x.id] if isinstance(x, Node) and x.op != "input" else None for x in n.args]
        if n.op == "gather":
            inp = f"in{n.args[0].args[0]}"
            if len(n.args) == 1:
                expr = inp
            else:
                expr = f"{inp}[({', '.join(_idx(v) for v in a[1:])},)]"
        elif n.op == "cast":
            expr = f"_to({a[0]}, {n.args[1]})"
        elif n.op == "where":
            expr = f"_where({a[0]}, {a[1]}, {a[2]})"
        elif n.op in _IP_BIN and n.args[0].id in owned:
            plain = _BIN[n.op].format("x", "y")
            expr = f"_ip_bin({_IP_BIN[n.op]!r}, {a[0]}, {a[1]}, lambda x, y: {plain})"
        elif n.op in ("add", "mul") and n.args[1].id in owned:
            plain = _BIN[n.op].format("y", "x")  # x is the owned right operand
            expr = f"_ip_bin({_IP_BIN[n.op]!r}, {a[1]}, {a[0]}, lambda x, y: {plain})"
        elif n.op in _BIN:
            expr = _BIN[n.op].format(a[0], a[1])
        elif n.op in _IP_UN and n.args[0].id in owned:
            expr = f"_ip_un({_IP_UN[n.op]!r}, {a[0]}, lambda x: {_UN[n.op].format('x')})"
        elif n.op in _UN:
            expr = _UN[n.op].format(a[0])
        else:
            raise AssertionError(f"no codegen for op {n.op}")
        v = f"t{n.id}"
        lines.append(f"    {v} = {expr}")
        names[n.id] = v
    lines.append(f"    return {names[graph.output.id]}")
    return "\n".join(lines) + "\n"


def _idx(v):
    # An integer index tensor must be int64 (or a Python int) for advanced indexing.
    return f"_i({v})"


def _i(x):
    if isinstance(x, torch.Tensor) and x.dtype != torch.int64:
        return x.long()
    return x


_CACHE = {}


def compile_graph(graph, inplace=False):
    """Returns the compiled function for `graph` (cached by graph.key()). inplace=True: the
    variant that may overwrite its `score` argument (the forward, which owns its score tile;
    never under autograd)."""
    key = (graph.key(), inplace)
    fn = _CACHE.get(key)
    if fn is None:
        src = source(graph, inplace=inplace)
        env = {"inf": math.inf, "nan": math.nan, "torch": torch, "_t": _t, "_f": _f,
               "_not": _not, "_where": _where, "_to": _to, "_i": _i, "_ip_bin": _ip_bin,
               "_ip_un": _ip_un}
        exec(compile(src, f"<flex_attention mod {len(_CACHE)}>", "exec"), env)
        fn = env["mod"]
        fn.__neuron_source__ = src
        _CACHE[key] = fn
    return fn


def compile_node(graph, node):
    """The compiled function of the same arguments whose result is `node`'s value (the
    backward's learnable reads, kernel_bwd._captured_grads): the graph cut to node's operands."""
    keep, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.id not in keep:
            keep.add(n.id)
            stack.extend(a for a in n.args if isinstance(a, Node) and a.op != "input")
    sub = copy.copy(graph)
    sub.nodes = [n for n in graph.nodes if n.id in keep or n.op == "arg"]
    sub.output = node
    return compile_graph(sub)


def cache_size():
    return len(_CACHE)
