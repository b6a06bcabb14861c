"""Emits a traced score_mod / mask_mod graph (tracing.py) as nl tile operations inside the flex
kernel (kernel.py), one [queries, keys] fp32 tile per node.

Every value is an fp32 tile or a Python number (a constant subexpression): booleans are
0.0 / 1.0, integers are exact while below 2**24 in magnitude (the kernel checks captured
integer tensors; index arithmetic of sequences that long is out of its range anyway).
Integer semantics are kept where they differ from float ones: `//` and `%` floor as Python
does, `~` of an integer is -x - 1, a cast to an integer truncates toward zero, and floor / ceil /
round go through fp32 -> int32 conversion (round to nearest even, as torch.round).

A captured-tensor read `t[i0, i1, ...]` becomes the flat index sum(i_d * stride_d) + the
tensor's offset in the kernel's `caps` row (negative indices wrap as in torch), converted to
int32, and one `gather_flattened` (nc_n_gather) from the caps tile every partition holds.
"""
import math

_BIN = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
        "minimum": "minimum", "maximum": "maximum", "eq": "equal", "ne": "not_equal",
        "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}
_UN = {"neg": "negative", "abs": "abs", "exp": "exp", "log": "log", "tanh": "tanh",
       "sin": "sin", "cos": "cos", "sigmoid": "sigmoid", "sqrt": "sqrt", "rsqrt": "rsqrt",
       "relu": "relu", "square": "square"}
_LN2 = math.log(2.0)
_CASTS = {"torch.float32", "torch.float64", "torch.bool", "torch.int32", "torch.int64",
          "torch.float16", "torch.bfloat16"}


def lowerable(graph):
    """None when the graph can be emitted, else the reason (an operation it cannot emit)."""
    if graph is None:
        return None
    for n in graph.nodes:
        op = n.op
        if op in ("arg", "const", "gather", "where", "cast") or op in _BIN or op in _UN:
            if op == "cast" and n.args[1] not in _CASTS:
                return f"a cast to {n.args[1]}"
            continue
        if op in ("exp2", "log2", "floor", "ceil", "round"):
            continue
        if op in ("and", "or", "xor", "not"):
            if any(a.kind == "int" for a in n.args if hasattr(a, "op")):
                return f"the bitwise operation {op} on integers"
            continue
        if op in ("floordiv", "mod"):
            if any(a.kind == "float" for a in n.args if hasattr(a, "op")):
                return f"operation {op} on floating-point values"
            continue
        if op == "pow":
            e = n.args[1]
            if e.op == "const" and isinstance(e.args[0], (int, float)) and \
                    float(e.args[0]) in (0.5, 1.0, 2.0, 3.0, 4.0):
                continue
            return "operation pow with an exponent other than 0.5, 1, 2, 3 or 4"
        return f"operation {op}"
    return None


class _Ops:
    """nl operations that also take Python numbers (folded on the host)."""

    def __init__(self, nl, like):
        self.nl, self.like = nl, like  # like: a tile of the block's shape, for constants

    def tile(self, x):
        if isinstance(x, float):
            return self.nl.add(self.nl.multiply(self.like, 0.0), x)
        return x

    def bin(self, name, x, y):
        if isinstance(x, float) and isinstance(y, float):
            return float(_py(name, x, y))
        return getattr(self.nl, name)(x, y)

    def un(self, name, x):
        if isinstance(x, float):
            return float(_py(name, x))
        return getattr(self.nl, name)(x)

    def where(self, c, x, y):
        if isinstance(c, float):
            return x if c else y
        if isinstance(x, float) and isinstance(y, float):
            x = self.tile(x)
        return self.nl.where(c, x, y)

    def round(self, x):
        """Nearest integer, ties to even (fp32 -> int32 -> fp32)."""
        if isinstance(x, float):
            return float(round(x))
        return self.nl.copy(self.nl.copy(x, dtype=self.nl.int32), dtype=self.nl.float32)

    def floor(self, x):
        r = self.round(x)
        return self.bin("subtract", r, self.bin("greater", r, x))

    def ceil(self, x):
        r = self.round(x)
        return self.bin("add", r, self.bin("less", r, x))

    def trunc(self, x):
        return self.where(self.bin("less", x, 0.0), self.ceil(x), self.floor(x))

    def floordiv(self, x, y):
        """Python's x // y on exact integers: t = round(x / y), minus 1 when the remainder
        x - t*y is non-zero with the opposite sign of y."""
        if isinstance(x, float) and isinstance(y, float):
            return float(int(x) // int(y))
        t = self.round(self.bin("divide", x, y))
        r = self.bin("subtract", x, self.bin("multiply", t, y))
        wrong = self.bin("multiply", self.bin("not_equal", r, 0.0),
                         self.bin("not_equal", self.bin("less", r, 0.0),
                                  self.bin("less", y, 0.0)))
        return self.bin("subtract", t, wrong)


def _py(name, x, y=None):
    import operator as o
    f = {"add": o.add, "subtract": o.sub, "multiply": o.mul, "divide": o.truediv,
         "minimum": min, "maximum": max, "equal": o.eq, "not_equal": o.ne, "less": o.lt,
         "less_equal": o.le, "greater": o.gt, "greater_equal": o.ge}
    if name in f:
        return f[name](x, y)
    g = {"negative": lambda a: -a, "abs": abs, "exp": math.exp, "log": math.log,
         "tanh": math.tanh, "sin": math.sin, "cos": math.cos,
         "sigmoid": lambda a: 1.0 / (1.0 + math.exp(-a)), "sqrt": math.sqrt,
         "rsqrt": lambda a: 1.0 / math.sqrt(a), "relu": lambda a: max(a, 0.0),
         "square": lambda a: a * a}
    return g[name](x)


def emit(graph, env, like, data, layout, nl, direct=None, zeros=None):
    """The graph's output for one block: env maps argument names to [qr, keys] fp32 tiles
    (score, b, h, q_idx, kv_idx as the graph uses them), or [qr, 1] columns for the ones that
    do not vary along the keys (q_idx, b, h: the nl operations broadcast them, so an
    expression of them alone costs a column, not a tile); like is a tile of the block's shape
    (for constants); data is the [qr, N] caps tile and layout the ((offset, shape), ...) of the
    graph's inputs in it; direct (optional) enables plain loads for reads indexed by q_idx or
    kv_idx (_direct_gather). zeros (optional, a tile of like's shape): with it, a column result
    comes back as a whole tile, as the score must; without it a column result stays one (a
    mask's `where` broadcasts it). Returns a tile, a column or a float."""
    ops = _Ops(nl, like)
    ops.direct = direct
    vals = {}
    for n in graph.nodes:
        if n.op == "arg":
            vals[n.id] = env.get(n.args[0])
            continue
        if n.op == "const":
            vals[n.id] = float(n.args[0])
            continue
        a = [vals[x.id] for x in n.args if hasattr(x, "op") and x.op != "input"]
        vals[n.id] = _node(n, a, ops, data, layout, nl)
    return _widened(vals[graph.output.id], like, zeros, nl)


def _widened(out, like, zeros, nl):
    """A [rows, 1] column result as a whole tile of like's shape, when zeros is given."""
    if zeros is not None and not isinstance(out, float) and out.shape[-1] != like.shape[-1]:
        return nl.add(zeros, out)
    return out


def _node(n, a, ops, data, layout, nl):
    op = n.op
    if op == "gather":
        return _gather(n, a, ops, data, layout, nl)
    if op == "cast":
        to, src = n.args[1], n.args[0].kind
        if to == "torch.bool":
            return ops.bin("not_equal", a[0], 0.0)
        if to in ("torch.int32", "torch.int64"):
            return ops.trunc(a[0]) if src == "float" else a[0]
        if to in ("torch.float16", "torch.bfloat16") and not isinstance(a[0], float):
            narrow = nl.float16 if to == "torch.float16" else nl.bfloat16
            return nl.copy(nl.copy(a[0], dtype=narrow), dtype=nl.float32)
        return a[0]
    if op == "where":
        return ops.where(*a)
    if op == "and":
        return ops.bin("multiply", a[0], a[1])
    if op == "or":
        return ops.bin("maximum", a[0], a[1])
    if op == "xor":
        return ops.bin("not_equal", a[0], a[1])
    if op == "not":  # lowerable() allowed it on booleans only
        return ops.bin("subtract", 1.0, a[0])
    if op in _BIN:
        return ops.bin(_BIN[op], a[0], a[1])
    if op in _UN:
        return ops.un(_UN[op], a[0])
    if op == "exp2":
        return ops.un("exp", ops.bin("multiply", a[0], _LN2))
    if op == "log2":
        return ops.bin("divide", ops.un("log", a[0]), _LN2)
    if op in ("floor", "ceil", "round"):
        return a[0] if n.args[0].kind != "float" else getattr(ops, op)(a[0])
    if op == "floordiv":
        return ops.floordiv(a[0], a[1])
    if op == "mod":
        return ops.bin("subtract", a[0], ops.bin("multiply", ops.floordiv(a[0], a[1]), a[1]))
    if op == "pow":
        e = float(n.args[1].args[0])
        if e == 0.5:
            return ops.un("sqrt", a[0])
        r = a[0]
        for _ in range(int(e) - 1):
            r = ops.bin("multiply", r, a[0])
        return r
    raise AssertionError(op)  # pragma: no cover - lowerable() refused it


def _strides(shape):
    """Row-major element strides of a captured tensor of `shape`."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def _gather(n, a, ops, data, layout, nl):
    offset, shape = layout[n.args[0].args[0]]
    strides = _strides(shape)
    t = _direct_gather(n, offset, shape, strides, getattr(ops, "direct", None))
    if t is None:
        t = _program_constant(n, offset, shape, strides, data, ops)
    if t is not None:
        return t
    flat = float(offset)
    for d, (node, i) in enumerate(zip(n.args[1:], a)):
        if not _nonneg(node):  # torch's negative indices count from the end
            i = ops.where(ops.bin("less", i, 0.0), ops.bin("add", i, float(shape[d])), i)
        if strides[d] != 1:
            i = ops.bin("multiply", i, float(strides[d]))
        flat = i if isinstance(flat, float) and flat == 0.0 else ops.bin("add", flat, i)
    idx = nl.copy(ops.tile(flat), dtype=nl.int32)
    return nl.gather_flattened(data, idx)


def direct_loads(b, h, lengths, q_load, kv_load, consts=None):
    """emit's `direct` table: the program's batch and head indices b and h, lengths (B, Hq, L,
    S), the loads of reads indexed by q_idx / kv_idx: f(offset) -> the values at the tile's
    rows (a column) or keys (a row over the partitions); None where the kernel has no such
    load (the read is then a gather); and consts, the per-program constants the kernel loaded
    (program_constants; without them such reads take a column of the caps tile)."""
    B, Hq, L, S = lengths
    return {"b": b, "h": h, "q_idx": q_load, "kv_idx": kv_load, "q_idx_len": L,
            "kv_idx_len": S, "b_len": B, "h_len": Hq, "consts": consts or {}}


def reads_caps_row(score_graph, mask_graph, layout, lengths, q_direct, kv_direct):
    """Whether a kernel's emits of the two graphs (layout: both graphs' inputs, score_mod's
    first) read the caps row every partition holds: a captured read that is not a plain load
    (_direct_gather), i.e. a gather or a per-program constant. lengths: (B, Hq, L, S);
    q_direct / kv_direct: whether the kernel passes emit loads for q_idx / kv_idx reads."""
    def found(off):  # a stand-in load: _direct_gather calls it
        return True
    direct = direct_loads(0, 0, lengths, found if q_direct else None,
                          found if kv_direct else None)
    for n, offset, shape in _gathers(score_graph, mask_graph, layout):
        strides = _strides(shape)
        if _direct_gather(n, offset, shape, strides, direct) is None and \
                _program_offset_of(n, offset, shape, strides, direct) is None:
            return True
    return False


def _gathers(score_graph, mask_graph, layout):
    """(node, caps offset, shape) of every captured-tensor read of the two graphs (layout: both
    graphs' inputs, score_mod's first)."""
    n_score = len(score_graph.inputs) if score_graph is not None else 0
    for graph, lay in ((score_graph, layout[:n_score]), (mask_graph, layout[n_score:])):
        for n in graph.nodes if graph is not None else ():
            if n.op == "gather":
                offset, shape = lay[n.args[0].args[0]]
                yield n, offset, shape


def program_constants(score_graph, mask_graph, layout, b, h, lengths, load):
    """{id(node): load(offset)} for every per-program constant the graphs read (t[c.., b, h],
    an ALiBi slope t[h]; _program_constant): each loaded once per program into a column of
    its own. Read instead as a column of the caps tile at an offset that depends on the program
    id, its place was unknown when compiling, and the native backend then could not tell that
    it was not the transposed p it fuses away (docs/native.md "Transposed matmuls"): ALiBi's
    p @ v ran as a transpose, a copy and a product. b, h: the program's indices; lengths: (B,
    Hq, L, S); load(offset) -> the column [rows, 1] holding caps[offset] on every partition."""
    direct = direct_loads(b, h, lengths, None, None)
    out = {}
    for n, offset, shape in _gathers(score_graph, mask_graph, layout):
        off = _program_offset_of(n, offset, shape, _strides(shape), direct)
        if off is not None:
            out[id(n)] = load(off)
    return out


def _nonneg(node):
    """Whether an integer node is certainly >= 0 (its gather needs no wrap of negatives)."""
    op, args = node.op, node.args
    if op == "arg":
        return True
    if op == "const":
        return args[0] >= 0
    if op == "abs":
        return True
    if op == "mod":  # Python's % has the sign of the divisor
        return args[1].op == "const" and args[1].args[0] > 0
    if op in ("add", "mul", "floordiv", "minimum", "maximum"):
        return all(_nonneg(x) for x in args)
    return False


def emit_with_grad(graph, env, like, data, layout, nl, direct=None, zeros=None, wrt=("score",)):
    """(value, [d value / d x for x in wrt]) of the score_mod graph for one block, forward-mode:
    each node carries one derivative per seed (None: 0). A seed is "score" (the argument) or
    the id of a gather node (a captured-tensor read: the derivative with respect to the value
    read there, which the backward turns into the captured tensor's gradient). Index
    arithmetic, comparisons and captured-tensor reads (gathers or, with `direct`, the plain
    loads of emit) do not depend on score. direct and zeros as emit takes them (zeros widens
    a column value; the derivatives broadcast as they are)."""
    ops = _Ops(nl, like)
    ops.direct = direct
    vals, ders = {}, {}
    for n in graph.nodes:
        if n.op == "arg":
            vals[n.id] = env.get(n.args[0])
            ders[n.id] = [1.0 if x == n.args[0] else None for x in wrt]
            continue
        if n.op == "const":
            vals[n.id], ders[n.id] = float(n.args[0]), [None] * len(wrt)
            continue
        nodes = [x for x in n.args if hasattr(x, "op") and x.op != "input"]
        a = [vals[x.id] for x in nodes]
        v = vals[n.id] = _node(n, a, ops, data, layout, nl)
        ders[n.id] = []
        for k, x in enumerate(wrt):
            da = [ders[y.id][k] for y in nodes]
            ders[n.id].append(1.0 if x == n.id else
                              None if all(d is None for d in da) else _der(n, a, da, v, ops))
    return _widened(vals[graph.output.id], like, zeros, nl), ders[graph.output.id]


def _der(n, a, da, v, ops):
    """The derivative of node n (value v, operands a with derivatives da, some not None)."""
    op, b = n.op, ops.bin

    def mul(x, y):  # None is 0
        return None if x is None or y is None else b("multiply", x, y)

    def add(x, y):
        return y if x is None else x if y is None else b("add", x, y)

    def nz(d, r):
        """r = d * (a local derivative that may be infinite: sqrt at 0, x / 0), 0 where the
        tangent d is 0. A `where` hands a branch it did not take a zero tangent; reverse mode
        gives that branch no gradient, so forward mode must not make it 0 * inf = NaN."""
        return r if isinstance(d, float) else ops.where(b("equal", d, 0.0), 0.0, r)
    if op == "cast":
        return da[0] if n.args[1] in ("torch.float32", "torch.float64", "torch.float16",
                                      "torch.bfloat16") else None
    if op == "where":
        zero = 0.0
        return ops.where(a[0], zero if da[1] is None else da[1], zero if da[2] is None else da[2])
    if op == "add":
        return add(da[0], da[1])
    if op == "sub":
        return add(da[0], None if da[1] is None else b("multiply", da[1], -1.0))
    if op == "mul":
        return add(mul(da[0], a[1]), mul(a[0], da[1]))
    if op == "truediv":
        return add(None if da[0] is None else nz(da[0], b("divide", da[0], a[1])),
                   None if da[1] is None else
                   nz(da[1], b("multiply", da[1], b("divide", b("multiply", v, -1.0), a[1]))))
    if op in ("minimum", "maximum"):
        first = b("less_equal" if op == "minimum" else "greater_equal", a[0], a[1])
        return ops.where(first, 0.0 if da[0] is None else da[0], 0.0 if da[1] is None else da[1])
    d = da[0]
    x = a[0]
    if op == "neg":
        return b("multiply", d, -1.0)
    if op == "exp":
        return b("multiply", d, v)
    if op == "exp2":
        return b("multiply", d, b("multiply", v, _LN2))
    if op == "log":
        return nz(d, b("divide", d, x))
    if op == "log2":
        return nz(d, b("divide", d, b("multiply", x, _LN2)))
    if op == "tanh":
        return b("multiply", d, b("subtract", 1.0, b("multiply", v, v)))
    if op == "sigmoid":
        return b("multiply", d, b("multiply", v, b("subtract", 1.0, v)))
    if op == "sin":
        return b("multiply", d, ops.un("cos", x))
    if op == "cos":
        return b("multiply", d, b("multiply", ops.un("sin", x), -1.0))
    if op == "sqrt":
        return nz(d, b("divide", b("multiply", d, 0.5), v))
    if op == "rsqrt":
        return nz(d, b("multiply", d, b("multiply", b("divide", v, x), -0.5)))
    if op == "abs":  # torch: sign(x), 0 at 0
        return b("multiply", d, b("subtract", b("greater", x, 0.0), b("less", x, 0.0)))
    if op == "relu":
        return b("multiply", d, b("greater", x, 0.0))
    if op == "square":
        return b("multiply", d, b("multiply", x, 2.0))
    if op == "pow":
        e = float(n.args[1].args[0])
        if e == 0.5:
            return nz(d, b("divide", b("multiply", d, 0.5), v))
        r = e
        for _ in range(int(e) - 1):
            r = b("multiply", r, x)
        return b("multiply", d, r)
    return None  # floor, ceil, round, comparisons, booleans, integer ops: zero derivative


def _program_constant(n, offset, shape, strides, data, ops):
    """t[c.., b, h] with every index a constant, b or h: one value per program (an ALiBi slope
    t[h]), read as a column of the caps tile (every partition holds the caps row), which the
    operations broadcast over the keys, instead of a gather per element. Indices are checked
    against the tensor's dims here (a constant) or by the kernel's shape (b < B, h < Hq);
    anything else takes the gather path, which reports a bad index."""
    direct = getattr(ops, "direct", None)
    off = _program_offset_of(n, offset, shape, strides, direct)
    if off is None:
        return None
    column = direct.get("consts", {}).get(id(n))  # loaded per program (program_constants)
    if column is not None:
        return column[0:ops.like.shape[0], :]
    return data[:, ops.nl.ds(off, 1)]  # a column: the operations broadcast it


def _program_offset_of(n, offset, shape, strides, direct):
    """The caps offset of gather n when it reads a per-program constant, else None."""
    if direct is None or len(n.args) - 1 != len(shape):
        return None
    return _program_offset(n.args[1:], offset, shape, strides, direct)


def _program_offset(idx, offset, shape, strides, direct):
    """The caps offset of t[idx] when every index is a constant, b or h within the tensor's
    dims (b < B and h < Hq fit when the dim is at least that long), else None."""
    off = offset
    for node, size, stride in zip(idx, shape, strides):
        if node.op == "const" and not isinstance(node.args[0], bool) and \
                0 <= node.args[0] < size:
            off = off + int(node.args[0]) * stride
        elif node.op == "arg" and node.args[0] in ("b", "h") and \
                direct[node.args[0] + "_len"] <= size:
            off = direct[node.args[0]] * stride + off
        else:
            return None
    return off


def _direct_gather(n, offset, shape, strides, direct):
    """t[c.., q_idx] or t[c.., kv_idx] with the other indices constants, b or h: the values
    are one contiguous run of the caps row at an offset known per program (b, h are program
    ids), so a plain load replaces the gather: a column for q_idx (one value per partition), a
    row broadcast over the partitions for kv_idx. direct: {"q_idx": f(offset), "kv_idx":
    f(offset) or None, "b": index, "h": index, "q_idx_len": L, "kv_idx_len": S}; None when the
    read has another form."""
    if direct is None:
        return None
    idx = n.args[1:]
    last = idx[-1] if idx else None
    if last is None or last.op != "arg" or last.args[0] not in ("q_idx", "kv_idx") or \
            direct.get(last.args[0]) is None:
        return None
    if len(idx) != len(shape) or shape[-1] < direct[last.args[0] + "_len"]:
        return None  # a short last dim: the gather path reports the bad index
    off = _program_offset(idx[:-1], offset, shape, strides, direct)
    return None if off is None else direct[last.args[0]](off)
