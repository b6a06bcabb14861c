"""Independent NumPy reference interpreter of the Kernel IR text form (ISA level).

Written from docs/ir.md and docs/numerics.md only; it shares no code with the simulator or the
native backend. It reads the kernel printed by neuron::print after legalize/allocate (the
`compiled.ir` of a neuron-fuzz case folder) and executes it over the SPMD grid with numpy and
ml_dtypes. Allocated offsets and slots are ignored: every `alloc` gets fresh storage, so an
allocator that makes live buffers overlap shows up as a difference.

The dynamic half (see dynamic semantics below): registers, runtime loops, indirect DMA rows and
the gathers. An index read at run time outside its range is a `Fault`: the expected outcome of
the run is then an out-of-bounds error from every executor, not outputs.

    python3 reference.py CASE_DIR      # checks one case folder, prints the verdict
"""
import math
import re
import sys
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

import reference_math

DTYPES = {
    "float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
    "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "bool": np.uint8,
}
FLOAT_DTYPES = {"float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn"}
# tensor_tensor of two integer tiles computes these on the integers (numerics.md).
INT_EXACT = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
             "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal,
             "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
             "less": np.less, "less_equal": np.less_equal}


class RefError(Exception):
    pass


class Fault(Exception):
    """The run must fail: an index known only at run time is out of range.

    op: the instruction; needles: strings the executors' message must contain (the offending
    index and where it was read); the message is for people."""

    def __init__(self, op, message, needles):
        super().__init__(f"{op}: {message}")
        self.op = op
        self.needles = needles


REGISTER = re.compile(r"^r[0-9]+$")


def is_register(name):
    return bool(REGISTER.match(name))


# ---- parsing the text form -----------------------------------------------------------------

TOKEN = re.compile(r"""\s*(?:(\#[^\n]*)|("(?:[^"\\]|\\.)*")|(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)
                   |(\d+)|([A-Za-z_][A-Za-z0-9_.]*)|(->|[\[\](){}:,=+\-*]))""", re.X)


def tokenize(text):
    toks, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise RefError(f"cannot tokenize at {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1):
            continue
        if m.group(2):
            toks.append(("str", bytes(m.group(2)[1:-1], "utf-8").decode("unicode_escape")))
        elif m.group(3):
            toks.append(("float", float(m.group(3))))
        elif m.group(4):
            toks.append(("int", int(m.group(4))))
        elif m.group(5):
            toks.append(("id", m.group(5)))
        elif m.group(6):
            toks.append(("p", m.group(6)))
    toks.append(("end", None))
    return toks


@dataclass
class Decl:
    name: str
    dtype: str
    shape: list
    memory: str


@dataclass
class View:
    buf: str
    dims: list  # (affine, size, step, keep); affine = (constant, {var: coeff})


@dataclass
class Stmt:
    kind: str  # block / for / alloc / op
    body: list = field(default_factory=list)
    var: str = ""
    extent: int = 0
    loop: str = "static"  # static (affine/sequential_range), range (dynamic_range), while
    start: tuple = (0, {})
    stop: tuple = (0, {})
    step: int = 1
    cond: str = ""
    decl: Decl = None
    op: str = ""
    args: dict = field(default_factory=dict)


class Parser:
    def __init__(self, text):
        self.t = tokenize(text)
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k]

    def next(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def accept(self, v):
        if self.peek()[1] == v and self.peek()[0] in ("p", "id"):
            self.i += 1
            return True
        return False

    def expect(self, v):
        tok = self.next()
        if tok[1] != v:
            raise RefError(f"expected {v!r}, got {tok}")

    def name(self):
        tok = self.next()
        if tok[0] not in ("id", "str"):
            raise RefError(f"expected a name, got {tok}")
        return tok[1]

    def integer(self):
        neg = self.accept("-")
        tok = self.next()
        if tok[0] != "int":
            raise RefError(f"expected an integer, got {tok}")
        return -tok[1] if neg else tok[1]

    def skip_loc(self):
        if self.peek() == ("id", "loc") and self.peek(1) == ("p", "("):
            while self.next()[1] != ")":
                pass

    def decl(self):
        name = self.name()
        self.expect(":")
        dtype = self.name()
        self.expect("[")
        shape = []
        while not self.accept("]"):
            shape.append(self.integer())
            self.accept(",")
        memory = self.name()
        while self.peek()[1] in ("offset", "slots", "over"):
            if self.next()[1] == "over":
                self.name()
            else:
                self.expect("=")
                self.integer()
        self.skip_loc()
        return Decl(name, dtype, shape, memory)

    def params(self):
        self.expect("(")
        out = []
        while not self.accept(")"):
            out.append(self.decl())
            self.accept(",")
        return out

    def kernel(self):
        self.expect("kernel")
        name = self.name()
        ins = self.params()
        self.expect("->")
        outs = self.params()
        self.skip_loc()
        return name, ins, outs, self.stmt()

    def stmt(self):
        tok = self.peek()
        if tok == ("p", "{"):
            self.next()
            body = []
            while not self.accept("}"):
                body.append(self.stmt())
            self.skip_loc()
            return Stmt("block", body=body)
        if tok == ("id", "for"):
            self.next()
            var = self.name()
            self.expect("in")
            kind = self.name()
            self.expect("(")
            if kind in ("affine_range", "sequential_range"):
                # Same semantics for a sequential run.
                st = Stmt("for", var=var, extent=self.integer())
            elif kind == "dynamic_range":
                start = self.affine()
                self.expect(",")
                stop = self.affine()
                self.expect(",")
                st = Stmt("for", var=var, loop="range", start=start, stop=stop,
                          step=self.integer())
            elif kind == "while_nonzero":
                st = Stmt("for", var=var, loop="while", cond=self.name())
            else:
                raise RefError(f"loop kind {kind} not modelled")
            self.expect(")")
            self.skip_loc()
            st.body = [self.stmt()]
            return st
        if tok == ("id", "alloc"):
            self.next()
            d = self.decl()
            if self.peek() == ("id", "buffer_loc"):
                self.next()
                while self.next()[1] != ")":
                    pass
            return Stmt("alloc", decl=d)
        op = self.name()
        self.expect("(")
        args = {}
        while not self.accept(")"):
            key = self.name()
            self.expect("=")
            args[key] = self.value()
            self.accept(",")
        self.skip_loc()
        return Stmt("op", op=op, args=args)

    def value(self):
        tok = self.peek()
        if tok[0] in ("id", "str") and self.peek(1) == ("p", "["):
            buf = self.name()
            self.expect("[")
            dims = []
            while not self.accept("]"):
                dims.append(self.slice())
                self.accept(",")
            return View(buf, dims)
        if tok == ("p", "["):
            self.next()
            out = []
            while not self.accept("]"):
                out.append(self.integer())
                self.accept(",")
            return out
        if tok[0] == "str":
            return self.next()[1]
        neg = self.accept("-")
        tok = self.next()
        sign = -1 if neg else 1
        if tok[0] == "int":
            return sign * tok[1]
        if tok[0] == "float":
            return sign * tok[1]
        if tok in (("id", "inf"), ("id", "nan")):
            return sign * float(tok[1])
        raise RefError(f"bad value {tok}")

    def aterm(self, sign):
        tok = self.next()
        if tok[0] == "int":
            if self.accept("*"):
                return 0, {self.name(): sign * tok[1]}
            return sign * tok[1], {}
        if tok[0] == "id":
            coeff = 1
            if self.accept("*"):
                coeff = self.integer()
            return 0, {tok[1]: sign * coeff}
        raise RefError(f"bad affine term {tok}")

    def affine(self):
        const, terms = 0, {}
        sign = -1 if self.accept("-") else 1
        while True:
            c, t = self.aterm(sign)
            const += c
            for k, v in t.items():
                terms[k] = terms.get(k, 0) + v
            if self.peek() == ("p", "+") and self.peek(1) != ("p", "+"):
                self.next()
                sign = 1
            elif self.peek() == ("p", "-"):
                self.next()
                sign = -1
            else:
                return const, terms

    def slice(self):
        start = self.affine()
        if not self.accept(":"):
            return (start, 1, 1, False)
        self.expect("+")
        size, step, keep = self.integer(), 1, True
        while self.accept(":"):
            if self.accept("drop"):
                keep = False
            else:
                step = self.integer()
        return (start, size, step, keep)


# ---- numerics (docs/numerics.md) --------------------------------------------------------------

def to_f32(raw):
    return np.asarray(raw).astype(np.float32)


def from_f32(x, dtype):
    x = np.asarray(x, dtype=np.float32)
    if dtype in FLOAT_DTYPES:
        with np.errstate(all="ignore"):
            return x.astype(DTYPES[dtype])
    if dtype == "bool":
        return ((x != 0) & ~np.isnan(x)).astype(np.uint8)
    info = np.iinfo(DTYPES[dtype])
    with np.errstate(all="ignore"):
        r = np.rint(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
    return np.clip(r, info.min, info.max).astype(DTYPES[dtype])


def from_int(v, dtype):
    """Integer values (iota / affine_select indices) converted to a destination dtype."""
    v = np.asarray(v, dtype=np.int64)
    if dtype in FLOAT_DTYPES:
        return from_f32(v.astype(np.float32), dtype)
    if dtype == "bool":
        return (v != 0).astype(np.uint8)
    info = np.iinfo(DTYPES[dtype])
    return np.clip(v, info.min, info.max).astype(DTYPES[dtype])


def from_double(value, dtype, shape):
    """Immediates (memset value, affine_select on_false)."""
    if dtype in FLOAT_DTYPES:
        return from_f32(np.full(shape, np.float32(value)), dtype)
    if dtype == "bool":
        return np.full(shape, 1 if (value != 0 and not math.isnan(value)) else 0, np.uint8)
    if math.isnan(value):
        value = 0.0
    info = np.iinfo(DTYPES[dtype])
    r = float(np.clip(np.rint(value), info.min, info.max))
    return np.full(shape, int(r), DTYPES[dtype])


F = np.float32


def alu(op, a, b):
    a = np.asarray(a, F)
    b = np.asarray(b, F)
    one, zero = F(1), F(0)
    with np.errstate(all="ignore"):
        if op == "bypass":
            return a + zero * 0 if False else a.copy()
        if op == "add":
            return a + b
        if op == "subtract":
            return a - b
        if op == "multiply":
            return a * b
        if op == "divide":
            return a / b
        if op == "maximum":
            return np.fmax(a, b)
        if op == "minimum":
            return np.fmin(a, b)
        if op == "power":
            return np.power(a.astype(np.float64), b.astype(np.float64)).astype(F)
        if op == "mod":
            r = np.fmod(a, b)
            fix = (r != 0) & ((r < 0) != (b < 0))
            return np.where(fix, r + b, r).astype(F)
        cmp = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
               "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal}
        if op in cmp:
            return np.where(cmp[op](a, b), one, zero)
        if op == "logical_and":
            return np.where((a != 0) & (b != 0), one, zero)
        if op == "logical_or":
            return np.where((a != 0) | (b != 0), one, zero)
        if op == "logical_xor":
            return np.where((a != 0) != (b != 0), one, zero)
        if op == "logical_not":
            return np.where(a == 0, one, zero)
        if op == "abs":
            return np.abs(a)
        if op == "rsqrt":
            return (1.0 / np.sqrt(a.astype(np.float64))).astype(F)
        if op == "reciprocal":
            return F(1) / a
        if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            # fp32 operands are rounded to integers (ties to even, NaN -> 0, saturating).
            def to_int(v):
                v = np.nan_to_num(v.astype(np.float64), nan=0.0, posinf=2.0**62, neginf=-2.0**62)
                return np.clip(np.rint(v), -2.0**62, 2.0**62).astype(np.int64)
            f = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                 "bitwise_xor": np.bitwise_xor}[op]
            return f(to_int(a), to_int(b)).astype(F)
    raise RefError(f"ALU op {op} not modelled")


def activation_fn(func, t):
    # The transcendentals follow docs/numerics.md's algorithms step by step (reference_math.py);
    # the rest are exact operations, computed in double and rounded once.
    r = reference_math.activation(func, t)
    if r is not None:
        return r
    x = t.astype(np.float64)
    with np.errstate(all="ignore"):
        if func == "copy":
            r = x
        elif func == "exp":
            r = np.exp(x)
        elif func == "log":
            r = np.log(x)
        elif func == "tanh":
            r = np.tanh(x)
        elif func == "sqrt":
            r = np.sqrt(x)
        elif func == "rsqrt":
            r = 1.0 / np.sqrt(x)
        elif func == "sigmoid":
            r = 1.0 / (1.0 + np.exp(-x))
        elif func == "silu":
            r = x / (1.0 + np.exp(-x))
        elif func == "gelu":
            # 0.5*x*(1 + erf(x/sqrt2)) without the cancellation for large negative x.
            r = 0.5 * x * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2.0)) \
                if x.size else x
        elif func == "gelu_apprx_tanh":
            # 0.5*x*(1 + tanh(u)) == x / (1 + exp(-2u)), the form without cancellation.
            u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
            r = x / (1.0 + np.exp(-2.0 * u))
        elif func == "relu":
            r = np.where(x > 0, x, 0.0)
        elif func == "abs":
            r = np.abs(x)
        elif func == "reciprocal":
            r = 1.0 / x
        elif func == "square":
            r = x * x
        elif func == "sign":
            r = np.where(x > 0, 1.0, np.where(x < 0, -1.0, x))
        elif func == "softplus":
            r = np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
        elif func == "sin":
            r = np.sin(x)
        elif func == "cos":
            r = np.cos(x)
        elif func == "erf":
            r = np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x
        elif func == "negative":
            r = -x
        else:
            raise RefError(f"activation {func} not modelled")
        return np.asarray(r, np.float64).astype(F)


def fma_f32(prod, acc):
    """fp32(prod + acc) rounded once; prod is an exact fp32 x fp32 product held in double.

    The double sum is exact up to the TwoSum error e. Rounding the double sum to fp32 is only
    wrong when it lands exactly on a tie between two fp32 values and e is non-zero (common
    with products like 1.5 * 1e30): then the tie is broken toward e.
    """
    a = acc.astype(np.float64)
    s = prod + a
    bb = s - prod
    e = (prod - (s - bb)) + (a - bb)
    f = s.astype(F)
    diff = s - f.astype(np.float64)
    toward = np.where(diff > 0, np.inf, -np.inf).astype(F)
    other = np.nextafter(f, toward)
    tie = np.isfinite(s) & (diff != 0) & (np.abs(other.astype(np.float64) - s) == np.abs(diff)) \
        & (e != 0) & np.isfinite(e)
    # At a tie the exact value lies on e's side of s: take the neighbour on that side.
    pick_other = tie & ((other.astype(np.float64) > f.astype(np.float64)) == (e > 0))
    return np.where(pick_other, other, f).astype(F)


FLT_MIN = np.float32(2.0 ** -126)
# Values in [FLT_MIN - 2^-151, FLT_MIN) round up to FLT_MIN with an unbounded exponent.
TINY_BELOW = 2.0 ** -126 - 2.0 ** -151


def daz(x):
    """Subnormal fp32 values read as zero of their sign (NaN and infinities pass)."""
    x = np.asarray(x, F)
    return np.where(np.abs(x) < FLT_MIN, np.copysign(F(0), x), x).astype(F)


def flush(r, exact):
    """x86 flush-to-zero of the fp32 results r, whose values in double are `exact`: a result
    whose value rounded with an unbounded exponent is below FLT_MIN becomes a zero of its sign."""
    m = np.abs(r)
    tiny = (m < FLT_MIN) | ((m == FLT_MIN) & (np.abs(exact) < TINY_BELOW))
    return np.where(tiny, np.copysign(F(0), r), r).astype(F)


def bf16_matmul(s, m, acc):
    """nc_matmul with bfloat16 operands (docs/numerics.md, the rule AMX's TDPBF16PS computes):
    blocks of 32 rows of K; in each, even and odd rows summed apart from +0 with one fma per row,
    then acc = flush(daz(acc) + flush(even + odd)). s [K, M] and m [K, N] are the operands'
    values in double; acc [M, N] fp32."""
    s, m = daz(s.astype(F)).astype(np.float64), daz(m.astype(F)).astype(np.float64)
    K = s.shape[0]
    with np.errstate(all="ignore"):
        for k0 in range(0, K, 32):
            part = [np.zeros_like(acc), np.zeros_like(acc)]
            for k in range(k0, min(K, k0 + 32)):
                prod = np.outer(s[k], m[k])
                p = part[(k - k0) % 2]
                part[(k - k0) % 2] = flush(fma_f32(prod, p), prod + p.astype(np.float64))
            pair = flush(part[0] + part[1], part[0].astype(np.float64) + part[1])
            a = daz(acc)
            acc = flush(a + pair, a.astype(np.float64) + pair)
    return acc


# ---- dynamic semantics: registers and indices read at run time ---------------------------------

def wrap_int32(v):
    """Registers are 32-bit two's-complement integers."""
    return ((int(v) + 2**31) % 2**32) - 2**31


def register_value(raw, dtype):
    """The value register_load reads from one element: an integer element exactly (wrapped to
    32 bits), a float element converted like any fp32 -> int32 conversion (docs/numerics.md:
    round to nearest even, NaN -> 0, saturate)."""
    if dtype in FLOAT_DTYPES:
        return int(from_f32(to_f32(raw), "int32"))
    return wrap_int32(int(raw))


def convert_values(raw, src_dtype, dst_dtype):
    """Element moves (DMA rows, gathers): bit copies within a dtype, else through fp32."""
    if src_dtype == dst_dtype:
        return raw.copy()
    return from_f32(to_f32(raw), dst_dtype)


def per_partition(arr):
    """A [P, ...] array as [P, elements per partition], row-major."""
    return arr.reshape(arr.shape[0], -1) if arr.ndim else arr.reshape(1, 1)


# ---- execution --------------------------------------------------------------------------------

class Machine:
    def __init__(self, hbm, decls):
        self.hbm = hbm  # name -> array (shared across programs)
        self.decls = dict(decls)  # name -> Decl
        self.local = {}  # on-chip buffers of the running program
        self.mm = {}  # psum buffer -> bool mask: element last written by a matmul
        self.env = {}  # loop variables, program ids and registers
        self.dynamic_vars = set()  # variables of the enclosing runtime loops
        self.instructions = 0
        self.op_name = "?"  # the running instruction (named by faults)

    def arr(self, name):
        if name in self.local:
            return self.local[name]
        if name in self.hbm:
            return self.hbm[name]
        raise RefError(f"unknown buffer {name}")

    def value_of(self, var):
        if var in self.env:
            return self.env[var]
        if is_register(var):
            return 0  # registers start at 0 in every program
        raise RefError(f"unknown variable {var}")

    def eval_affine(self, a):
        c, terms = a
        return c + sum(k * self.value_of(n) for n, k in terms.items())

    def runtime(self, a):
        """Whether an index expression depends on a value read at run time."""
        return any(is_register(n) or n in self.dynamic_vars for n in a[1])

    def index(self, v, op="?", rows_dim=None):
        """Index arrays of view v. rows_dim: an indirect DMA's row dim, left out of the checks
        (its positions come from the index tile); its index array is [0]."""
        arr = self.arr(v.buf)
        if len(v.dims) != arr.ndim:
            raise RefError(f"view of {v.buf} has {len(v.dims)} dims, buffer {arr.ndim}")
        idx, full, kept = [], [], []
        for d, (start_expr, size, step, keep) in enumerate(v.dims):
            start = self.eval_affine(start_expr)
            ix = start + step * np.arange(size)
            if d == rows_dim:
                ix = np.zeros(1, np.int64)  # one row per partition, placed by the caller
            elif size and (ix.min() < 0 or ix.max() >= arr.shape[d]):
                where = f"{v.buf} dim {d} index {ix.min()}..{ix.max()} of {arr.shape[d]}"
                if self.runtime(start_expr):
                    raise Fault(op, f"a runtime index is out of bounds: {where}", [])
                raise RefError(f"out of bounds: {where}")
            idx.append(ix)
            full.append(size)
            if keep:
                kept.append(size)
        return arr, np.ix_(*idx), full, kept

    def read(self, v):
        arr, ix, _, kept = self.index(v, self.op_name)
        return arr[ix].reshape(kept)

    def dtype(self, v):
        return self.decls[v.buf].dtype

    def write(self, v, values, from_matmul=False):
        arr, ix, full, _ = self.index(v, self.op_name)
        arr[ix] = np.asarray(values).reshape(full)
        if v.buf in self.mm:
            self.mm[v.buf][ix] = from_matmul

    def convert(self, src_view, dst_dtype):
        raw = self.read(src_view)
        if self.dtype(src_view) == dst_dtype:
            return raw.copy()
        return from_f32(to_f32(raw), dst_dtype)

    def f32(self, v):
        return to_f32(self.read(v))

    def scalar_on_integers(self, a, dt):
        """Whether a tensor_scalar computes on integers: bit ops only (op1 may be absent or
        bypass), integer dst and data, each operand an integer tile or an integral immediate."""
        bit = ("bitwise_and", "bitwise_or", "bitwise_xor")
        if a.get("op0") not in bit or a.get("op1", "bypass") not in bit + ("bypass",):
            return False
        if dt in FLOAT_DTYPES or self.dtype(a["data"]) in FLOAT_DTYPES:
            return False
        for k in ("0", "1"):
            if a.get("op" + k, "bypass") == "bypass":
                continue
            value = a["operand" + k]
            if isinstance(value, View):
                if self.dtype(value) in FLOAT_DTYPES:
                    return False
            elif not (np.isfinite(value) and value == np.trunc(value) and abs(value) < 2.0**62):
                return False
        return True

    def column(self, value, shape):
        """A float immediate or a [P, 1] view as an fp32 array broadcast to `shape`."""
        if isinstance(value, View):
            col = self.f32(value).reshape(shape[0], *([1] * (len(shape) - 1)))
            return np.broadcast_to(col, shape)
        return np.full(shape, F(value), F)

    def run_block(self, stmts):
        allocated = []
        for s in stmts:
            self.run(s, allocated)
        for name in allocated:
            self.local.pop(name, None)
            self.mm.pop(name, None)

    def run(self, s, allocated):
        if s.kind == "block":
            self.run_block(s.body)
        elif s.kind == "for":
            self.run_loop(s)
        elif s.kind == "alloc":
            d = s.decl
            self.decls[d.name] = d
            self.local[d.name] = np.zeros(d.shape, DTYPES[d.dtype])
            if d.memory == "psum":
                self.mm[d.name] = np.zeros(d.shape, bool)
            allocated.append(d.name)
        else:
            self.instructions += 1
            self.op_name = s.op
            self.op(s.op, s.args)

    # A while loop that never ends is a bug of the generator (or of the reference).
    MAX_WHILE_TRIPS = 100000

    def run_loop(self, s):
        """affine/sequential_range(n): var = 0..n-1. dynamic_range(start, stop, step): the trip
        count max(0, ceil((stop - start) / step)) is read once, when the loop starts, and var
        counts 0, 1, ... (the front end folds start and step into the indices). while_nonzero(r):
        var counts 0, 1, ... while register r is non-zero, tested before every iteration."""
        if s.loop == "static":
            trips = s.extent
        elif s.loop == "range":
            span = self.eval_affine(s.stop) - self.eval_affine(s.start)
            trips = max(0, -(-span // s.step))
            self.dynamic_vars.add(s.var)
        else:
            self.dynamic_vars.add(s.var)
        i = 0
        while (i < trips) if s.loop != "while" else (self.value_of(s.cond) != 0):
            if i >= self.MAX_WHILE_TRIPS:
                raise RefError(f"while_nonzero({s.cond}) ran {i} times")
            self.env[s.var] = i
            self.run(s.body[0], [])
            i += 1
        self.env.pop(s.var, None)
        self.dynamic_vars.discard(s.var)

    def indirect_dma(self, a):
        """dma_copy with src_rows (a gather of rows) or dst_rows (a scatter of rows).

        The HBM side's first kept dim is the row dim; its view takes it whole from 0 with one
        position per partition of the on-chip side. Partition p moves row rows[p] of that dim
        (its other dims as the view says). An index outside the dim's rows is an error, or with
        oob_mode=1 the row is skipped (nothing moves for that partition)."""
        side = "src" if "src_rows" in a else "dst"
        rows_arg = side + "_rows"
        hbm_v, chip_v = (a["src"], a["dst"]) if side == "src" else (a["dst"], a["src"])
        kept = [d for d, dim in enumerate(hbm_v.dims) if dim[3]]
        if not kept:
            raise RefError("indirect DMA view without a kept dim")
        rd = kept[0]
        nrows = self.decls[hbm_v.buf].shape[rd]
        hbm_arr, hbm_ix, hbm_full, _ = self.index(hbm_v, "dma_copy", rows_dim=rd)
        chip = per_partition(self.read(chip_v))  # checks the on-chip side's bounds
        rows = self.read(a[rows_arg]).reshape(-1).astype(np.int64)
        P = chip.shape[0]
        if rows.size != P:
            raise RefError(f"{rows_arg} has {rows.size} elements for {P} partitions")
        skip = a.get("oob_mode", 0) == 1
        hdt, cdt = self.dtype(hbm_v), self.dtype(chip_v)
        new_chip = chip.copy()
        for p in range(P):
            r = int(rows[p])
            if r < 0 or r >= nrows:
                if skip:
                    continue
                raise Fault("dma_copy",
                            f"row index {r} (element {p} of {rows_arg}) outside {nrows} rows "
                            f"of '{hbm_v.buf}'", [f"row index {r} ", f"element {p} ",
                                                  f"{nrows} rows", f"'{hbm_v.buf}'"])
            ix = list(hbm_ix)
            ix[rd] = ix[rd] + r
            ix = tuple(ix)
            if side == "src":
                new_chip[p] = convert_values(hbm_arr[ix].reshape(-1), hdt, cdt)
            else:
                hbm_arr[ix] = convert_values(chip[p], cdt, hdt).reshape(hbm_arr[ix].shape)
        if side == "src":
            self.write(chip_v, new_chip)

    def nc_n_gather(self, a):
        """dst[p, j] = data[p, indices[p, j]]: data's free dims flattened row-major per
        partition; j runs over dst's (and indices') elements of partition p. An index outside
        data's elements of a partition is an error."""
        data = per_partition(self.read(a["data"]))
        idx = per_partition(self.read(a["indices"])).astype(np.int64)
        dst = a["dst"]
        out = per_partition(self.read(dst)).copy()
        if out.shape != idx.shape or data.shape[0] != idx.shape[0]:
            raise RefError(f"nc_n_gather shapes {data.shape} {idx.shape} {out.shape}")
        m = data.shape[1]
        for p in range(idx.shape[0]):
            for j in range(idx.shape[1]):
                k = int(idx[p, j])
                if k < 0 or k >= m:
                    raise Fault("nc_n_gather", f"index {k} at partition {p} outside {m} elements",
                                [f"index {k} ", f"partition {p} ", f"{m} elements"])
        out = np.take_along_axis(data, idx, axis=1)
        self.write(dst, convert_values(out, self.dtype(a["data"]), self.dtype(dst)))

    def local_gather(self, a):
        """Partitions work in groups of 16. Group g's index list is its 16 rows of `index` read
        partition-first (index k is index[16g + k % 16, k // 16]); the first num_valid_indices
        (all 16 * columns when absent) are used. Index k selects num_elem_per_idx consecutive
        elements starting there in every partition's own row of src, stored at dst[p, k*per
        ...]. An index whose elements leave src's row is an error."""
        src = per_partition(self.read(a["src"]))
        idx = per_partition(self.read(a["index"])).astype(np.int64)
        dst = a["dst"]
        out = per_partition(self.read(dst)).copy()
        per = a.get("num_elem_per_idx", 1)
        valid = a.get("num_valid_indices", 16 * idx.shape[1])
        P, m = src.shape
        if P % 16 or out.shape[1] != valid * per:
            raise RefError(f"local_gather shapes {src.shape} {idx.shape} {out.shape}")
        for g in range(P // 16):
            for k in range(valid):
                q, c = 16 * g + k % 16, k // 16
                start = int(idx[q, c])
                if start < 0 or start + per > m:
                    raise Fault("local_gather", f"index {start} at partition {q} with {per} "
                                f"elements outside {m} elements",
                                [f"index {start} ", f"partition {q} ", f"{m} elements"])
                out[16 * g:16 * g + 16, k * per:(k + 1) * per] = convert_values(
                    src[16 * g:16 * g + 16, start:start + per], self.dtype(a["src"]),
                    self.dtype(dst))
        self.write(dst, out)

    def affine_values(self, a, dst):
        shape = self.read(dst).shape
        pat = a["pattern"]
        sizes = [shape[0]] + pat[1::2]
        coef = [a.get("channel_multiplier", 0)] + pat[0::2]
        if int(np.prod(sizes)) != int(np.prod(shape)):
            raise RefError("iota pattern does not cover the destination")
        grids = np.indices(sizes, dtype=np.int64)
        v = a.get("offset", 0) + sum(c * g for c, g in zip(coef, grids))
        v = ((v + 2**31) % 2**32) - 2**31  # int32 wrap
        return v.reshape(shape)

    def op(self, op, a):
        dst = a.get("dst")
        if op == "device_print":
            return
        dt = self.dtype(dst) if isinstance(dst, View) else None
        if op == "dma_copy" and ("src_rows" in a or "dst_rows" in a):
            self.indirect_dma(a)
        elif op == "nc_n_gather":
            self.nc_n_gather(a)
        elif op == "local_gather":
            self.local_gather(a)
        elif op == "register_load":
            self.env[a["reg"]] = register_value(self.read(a["src"]).reshape(-1)[0],
                                                self.dtype(a["src"]))
        elif op == "register_store":
            self.write(dst, from_int(np.full(self.read(dst).shape, self.value_of(a["reg"])), dt))
        elif op == "register_move":
            v = self.value_of(a["src"]) if "src" in a else a["value"]
            self.env[a["reg"]] = wrap_int32(v)
        elif op in ("dma_copy", "tensor_copy"):
            self.write(dst, self.convert(a["src"], dt))
        elif op == "memset":
            self.write(dst, from_double(a["value"], dt, self.read(dst).shape))
        elif op == "iota":
            self.write(dst, from_int(self.affine_values(a, dst), dt))
        elif op == "affine_select":
            v = self.affine_values(a, dst)
            cmp = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
                   "greater_equal": np.greater_equal, "less": np.less,
                   "less_equal": np.less_equal}[a.get("cmp_op", "equal")]
            keep = cmp(v, 0)
            on_true = self.convert(a["on_true"], dt).reshape(v.shape)
            on_false = from_double(a["on_false"], dt, v.shape)
            self.write(dst, np.where(keep, on_true, on_false))
        elif op == "tensor_copy_predicated":
            pred = self.f32(a["predicate"]) != 0
            old = self.read(dst)
            new = self.convert(a["src"], dt).reshape(old.shape)
            self.write(dst, np.where(pred.reshape(old.shape), new, old))
        elif op == "tensor_tensor":
            views = [dst, a["data1"], a["data2"]]
            if a["op"] in ("bitwise_and", "bitwise_or", "bitwise_xor") and all(
                    self.dtype(x) not in FLOAT_DTYPES for x in views):
                x = self.read(a["data1"]).astype(np.int64)
                y = self.read(a["data2"]).astype(np.int64)
                r = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                     "bitwise_xor": np.bitwise_xor}[a["op"]](x, y)
                bits = np.iinfo(DTYPES[dt]).bits if dt != "bool" else 8
                r = r & ((1 << bits) - 1)
                self.write(dst, r.astype(np.uint64).astype(DTYPES[dt]))
            elif a["op"] in INT_EXACT and all(self.dtype(x) not in FLOAT_DTYPES
                                              for x in views[1:]):
                # Two integer tiles: exact integers, add/subtract/multiply wrapped to 32 bits
                # where an operand is 32-bit (unsigned when both are), converted once
                # (numerics.md).
                x = self.read(a["data1"]).astype(np.int64)
                y = self.read(a["data2"]).astype(np.int64)
                with np.errstate(all="ignore"):
                    r = INT_EXACT[a["op"]](x, y).astype(np.int64)
                if a["op"] in ("add", "subtract", "multiply") and any(
                        self.dtype(v) in ("int32", "uint32") for v in views[1:]):
                    r = r & 0xFFFFFFFF
                    if not all(self.dtype(v) in ("uint8", "uint16", "uint32", "bool")
                               for v in views[1:]):
                        r = np.where(r >= 1 << 31, r - (1 << 32), r)
                self.write(dst, from_int(r, dt))
            else:
                self.write(dst, from_f32(alu(a["op"], self.f32(a["data1"]), self.f32(a["data2"])),
                                         dt))
        elif op == "tensor_scalar" and self.scalar_on_integers(a, dt):
            # Bit ops on integer tiles with integer tiles or integral immediates: exact
            # integers, low bits stored (numerics.md).
            x = self.read(a["data"]).astype(np.int64)
            f = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                 "bitwise_xor": np.bitwise_xor}
            for k in ("0", "1"):
                if "op" + k not in a or a["op" + k] == "bypass":
                    continue
                value = a["operand" + k]
                if isinstance(value, View):
                    c = self.read(value).astype(np.int64).reshape(
                        x.shape[0], *([1] * (x.ndim - 1)))
                else:
                    c = np.int64(value)
                x = f[a["op" + k]](c, x) if a.get("reverse" + k, 0) else f[a["op" + k]](x, c)
            bits = np.iinfo(DTYPES[dt]).bits if dt != "bool" else 8
            self.write(dst, (x & ((1 << bits) - 1)).astype(np.uint64).astype(DTYPES[dt]))
        elif op == "tensor_scalar":
            x = self.f32(a["data"])
            unary = {"bypass", "abs", "rsqrt", "reciprocal", "logical_not"}
            for k in ("0", "1"):
                if "op" + k not in a:
                    continue
                o = a["op" + k]
                c = self.column(a["operand" + k], x.shape)
                rev = a.get("reverse" + k, 0) and o not in unary
                x = alu(o, c, x) if rev else alu(o, x, c)
            self.write(dst, from_f32(x, dt))
        elif op == "activation":
            x = self.f32(a["data"])
            with np.errstate(all="ignore"):
                t = (x * self.column(a.get("scale", 1.0), x.shape)).astype(F)
                # The bias (0.0 when absent) is always added, as the engine does: -0 becomes +0.
                t = (t + self.column(a.get("bias", 0.0), x.shape)).astype(F)
            r = activation_fn(a["func"], t)
            # dst first, then the reduction result (it may alias a column of dst).
            self.write(dst, from_f32(r, dt))
            if "reduce_res" in a:
                # Each partition's values in row-major order, in the lane-blocked order.
                flat = r.reshape(r.shape[0], -1)
                acc = reference_math.reduce_lanes(flat, "add", alu, 0.0)
                rr = a["reduce_res"]
                self.write(rr, from_f32(acc.reshape(self.read(rr).shape), self.dtype(rr)))
        elif op == "tensor_reduce":
            x = self.f32(a["data"])
            axes = a["axes"]
            o = a["op"]
            rest = [d for d in range(x.ndim) if d not in axes]
            xt = np.transpose(x, rest + list(axes)).reshape(
                [x.shape[d] for d in rest] + [-1])
            ident = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf,
                     "minimum": np.inf}[o]
            # The reduced elements of each result in row-major order, lane-blocked.
            acc = reference_math.reduce_lanes(xt, o, alu, ident)
            with np.errstate(all="ignore"):
                if a.get("negate", 0):
                    acc = (acc * F(-1)).astype(F)
            self.write(dst, from_f32(acc.reshape(self.read(dst).shape), dt))
        elif op == "nc_transpose":
            self.write(dst, self.convert(a["data"], dt).T.copy())  # bit-exact when same dtype
        elif op == "nc_matmul":
            s = self.f32(a["stationary"]).astype(np.float64)  # [K, M]
            m = self.f32(a["moving"]).astype(np.float64)  # [K, N]
            old = to_f32(self.read(dst))
            accum = a.get("accumulate", -1)
            if accum == 1:
                acc = old.copy()
            elif accum == 0:
                acc = np.zeros_like(old)
            else:
                _, ix, _, kept = self.index(dst, op)
                acc = np.where(self.mm[dst.buf][ix].reshape(kept), old, F(0)).astype(F)
            if self.dtype(a["stationary"]) == "bfloat16" and self.dtype(a["moving"]) == "bfloat16":
                acc = bf16_matmul(s, m, acc)
            else:
                with np.errstate(all="ignore"):
                    for k in range(s.shape[0]):
                        acc = fma_f32(np.outer(s[k], m[k]), acc)
            self.write(dst, acc, from_matmul=True)
        else:
            raise RefError(f"instruction {op} not modelled")


def execute(text, inputs, grid):
    """Runs kernel text; `inputs` maps input names to arrays. Returns (outputs dict, count)."""
    _, ins, outs, body = Parser(text).kernel()
    hbm, decls = {}, {}
    for d in ins:
        hbm[d.name] = np.array(inputs[d.name], dtype=DTYPES[d.dtype]).reshape(d.shape)
        decls[d.name] = d
    for d in outs:
        hbm[d.name] = np.zeros(d.shape, DTYPES[d.dtype])
        decls[d.name] = d
    count = 0
    for pid in np.ndindex(*grid):
        m = Machine(hbm, decls)
        for ax, p in enumerate(pid):
            m.env[f"pid{ax}"] = p
            m.env[f"npid{ax}"] = grid[ax]
        m.run(body, [])
        count += m.instructions
    return {d.name: hbm[d.name] for d in outs}, count


# ---- comparing a case folder ----------------------------------------------------------------

def ulp_distance(a, b, dtype):
    """Distance in units of the last place of `dtype` (NaN vs NaN counts as 0)."""
    if dtype not in FLOAT_DTYPES:
        return np.abs(a.astype(np.int64) - b.astype(np.int64))
    fa, fb = to_f32(a).astype(np.float64), to_f32(b).astype(np.float64)
    both_nan = np.isnan(fa) & np.isnan(fb)
    same = (fa == fb) | both_nan
    mant = {"float32": 23, "bfloat16": 7, "float16": 10, "float8_e4m3": 3, "float8_e5m2": 2,
            "float8_e4m3fn": 3}[dtype]
    with np.errstate(all="ignore"):
        scale = np.exp2(np.floor(np.log2(np.maximum(np.abs(fa), np.abs(fb)))) - mant)
        scale = np.where(np.isfinite(scale) & (scale > 0), scale, np.inf)
        d = np.abs(fa - fb) / scale
    return np.where(same, 0, np.where(np.isnan(d), np.inf, d))


def load_meta(case):
    meta = {"input": [], "output": [], "executor": [], "grid": [1]}
    with open(f"{case}/meta.txt") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] in ("input", "output"):
                meta[parts[0]].append((parts[1], parts[2], [int(x) for x in parts[3].split("x")]))
            elif parts[0] == "executor":
                meta["executor"].append(parts[1])
            elif parts[0] == "grid":
                meta["grid"] = [int(x) for x in parts[1:]]
            else:
                meta[parts[0]] = parts[1:]
    return meta


def executor_errors(case, executors):
    """{executor: (rule, message)} for the executors that raised (neuron-fuzz writes
    <executor>.error.txt: the UserError's rule, or "exception", then the message)."""
    import os
    out = {}
    for ex in executors:
        path = f"{case}/{ex}.error.txt"
        if os.path.exists(path):
            with open(path) as f:
                rule, _, msg = f.read().partition("\n")
            out[ex] = (rule.strip(), msg.strip())
    return out


def check_fault(fault, errors, executors):
    """The reference expects a run-time out-of-bounds error: every executor must raise one,
    naming the instruction and the offending index."""
    problems = []
    for ex in executors:
        if ex not in errors:
            problems.append(f"{ex} ran without error; expected out-of-bounds ({fault})")
            continue
        rule, msg = errors[ex]
        missing = [n for n in [fault.op] + fault.needles if n not in msg]
        if rule != "out-of-bounds" or missing:
            problems.append(f"{ex} raised {rule}: {msg!r}; expected out-of-bounds ({fault}) "
                            f"naming {missing}")
    # Faults found by the instruction kernels carry the same message on every executor.
    if fault.needles and not problems and len({errors[ex][1] for ex in executors}) > 1:
        problems.append("executors' messages differ: " +
                        " / ".join(f"{ex}: {errors[ex][1]!r}" for ex in executors))
    return problems


def check_case(case, max_ulp=1):
    """Returns (ok, message, reference instruction count)."""
    import os
    if os.path.exists(f"{case}/rejected.txt"):
        return True, "rejected", 0
    meta = load_meta(case)
    errors = executor_errors(case, meta["executor"])
    inputs = {n: np.fromfile(f"{case}/in_{n}.bin", dtype=DTYPES[dt]).reshape(shape)
              for n, dt, shape in meta["input"]}
    with open(f"{case}/compiled.ir") as f:
        text = f.read()
    try:
        ref, count = execute(text, inputs, meta["grid"])
    except RefError as e:
        return False, f"reference error: {e}", 0
    except Fault as fault:
        problems = check_fault(fault, errors, meta["executor"])
        return (not problems), "; ".join(problems) or f"expected fault: {fault}", 0
    if errors:
        return False, "; ".join(f"{ex} raised {r}: {m}" for ex, (r, m) in errors.items()), 0
    problems = []
    for ex in meta["executor"]:
        for n, dt, shape in meta["output"]:
            got = np.fromfile(f"{case}/{ex}.{n}.bin", dtype=DTYPES[dt]).reshape(shape)
            d = ulp_distance(got, ref[n], dt)
            bad = np.argwhere(d > max_ulp)
            if len(bad):
                i = tuple(bad[0])
                problems.append(f"{ex} output {n} ({dt}): {len(bad)} elements differ, first at "
                                f"{list(i)}: {ex} {to_f32(got[i])} reference {to_f32(ref[n][i])}")
    return (not problems), "; ".join(problems) or "ok", count


if __name__ == "__main__":
    ok, msg, count = check_case(sys.argv[1])
    print(("PASS " if ok else "FAIL ") + msg)
    sys.exit(0 if ok else 1)
