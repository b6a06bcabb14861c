"""Python tracing-API fuzzer: random valid and malformed calls of neuron.language / neuron.isa
inside @neuron.kernel bodies (and outside them), run in worker subprocesses.

    python3 tests/fuzz/python_api_fuzz.py --seconds 30 [--seed S] [--jobs N] [--eager]
    python3 tests/fuzz/python_api_fuzz.py --show SEED          # print one generated case
    python3 tests/fuzz/python_api_fuzz.py --case FILE.json     # run one case (or a seed: --seed S --count 1)
    python3 tests/fuzz/python_api_fuzz.py --save SEED NAME     # write case SEED to the corpus

Every input must end in success or in a neuron.NeuronError, TypeError or ValueError with a
message. A finding is a crash (the worker dies: segfault, abort), a hang (no answer within
--case-timeout seconds), an InternalError (RuntimeError from the bindings), any other exception
type, an empty message, a message quoting C++ (nl::, isa::, neuron::, std::), or the simulator
and the native JIT disagreeing on a kernel both ran.

First the corpus (tests/fuzz/python_corpus/*.json) is replayed: each file is one case with an
"expect" field ("ok": must succeed; "error": must end in an allowed error; "clean": either),
and an optional "known_bug" (a product bug not fixed yet: it must still misbehave, like a strict
xfail, so that fixing it flips the replay and the mark is removed). Then seeds S, S+1, ... are
generated until the time budget is spent. A seed reproduces its case exactly (--show prints it).
Exit status 1 when anything failed. docs/reliability.md describes the fuzzer.
"""
import argparse
import glob
import json
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "python_corpus")

# ---- generator -------------------------------------------------------------------------------

FLOAT_DTYPES = ["float32", "bfloat16", "float16"]
INT_DTYPES = ["int32", "int16", "int8", "uint8", "uint16", "uint32"]
ALL_DTYPES = FLOAT_DTYPES * 4 + INT_DTYPES + ["bool_"]
UNARY = ("exp log tanh sqrt rsqrt sigmoid silu gelu gelu_apprx_tanh relu abs negative "
         "reciprocal square sin cos erf softplus sign").split()
BINARY = ("add subtract multiply divide maximum minimum power equal not_equal greater "
          "greater_equal less less_equal logical_and logical_or logical_xor bitwise_and "
          "bitwise_or bitwise_xor left_shift right_shift").split()
REDUCE = ["sum", "max", "min", "mean"]
OPERATORS = ["+", "-", "*", "/", "**", "<", "<=", ">", ">="]
BAD_OPERATORS = ["@", "%", "//", "&", "|", "^"]

# Malformed values, as source text (evaluated in the kernel's namespace).
BAD_VALUES = ["None", "'x'", "''", "1.5", "-1", "0", "2**31", "2**40", "2**63", "2**64",
              "-2**63", "10**30", "[]", "()", "[1, 2, 3]", "{}", "float('nan')", "float('inf')",
              "-float('inf')", "True", "False", "nl.sbuf", "nl.float32", "nl.exp", "nl.bypass",
              "np.float64", "object()", "b'ab'", "np.zeros(3)", "np.int64(5)", "np.float32(2)",
              "(1, 'a')", "nl.ds(0, 4)", "slice(None)", "Ellipsis", "(lambda x: x)", "print"]
BAD_SHAPES = ["(0, 4)", "(-1, 4)", "(129, 4)", "(128,)", "(128, 0)", "(2**40, 2**40)",
              "(2**62, 8)", "(128, 2**31)", "(128, 2**62)", "[128, 'a']", "(1.5, 2)", "()",
              "(1,) * 7", "None", "128", "(128, -5)", "(2**63, 1)", "(2**64, 1)", "'128x4'",
              "(128, 4, 2)", "(1, 1, 1, 1, 1)", "[np.int64(4), 4]", "(True, 4)"]
BAD_DTYPES = ["'float64'", "np.float64", "np.complex64", "'complex64'", "42", "None",
              "'notadtype'", "object", "np.int64", "'bool'", "np.dtype('V4')", "'float8_e4m3'",
              "nl.float8_e5m2", "str", "1.5"]
BAD_BUFFERS = ["'sbuf'", "None", "3", "nl.float32", "nl.hbm", "nl.shared_hbm", "nl.psum"]
BAD_AXES = ["0", "2", "-3", "(1, 2)", "[1, 1]", "None", "'1'", "1.5", "10**20", "()", "[]",
            "(0, 1)", "-1"]
BAD_GRIDS = ["0", "-1", "()", "(1, 1, 1, 1, 1)", "(2**63,)", "('a',)", "1.5", "None", "(True,)",
             "(0, 1)", "[2]", "(2**64,)", "(1, -2)"]
BAD_SUBSCRIPTS = ["0:300", "-300:", "5:2", "::0", "::-1", "None", "...", "'a'", "1.5",
                  "[0, 1]", "nl.ds(0, 0)", "nl.ds(-4, 4)", "nl.ds(0, 2**40)", "2**63", "-2**63",
                  "300", "-300", "0:2**63", "nl.ds(0, 'a')", "slice(0, 4, 2)", "(0, 0, 0, 0, 0, 0, 0)",
                  "np.int64(2)", "True", "0:1:1", "nl.ds(nl.program_id(0), 4)"]


class Gen:
    """Source of one random case: a kernel function and the code that calls it."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.seed = seed
        # Per-case mutation rate: some cases valid, some riddled with errors.
        self.rate = self.r.choice([0.0, 0.0, 0.02, 0.05, 0.1, 0.25])
        self.lines = []
        self.indent = 1
        self.ntile = 0
        self.loopvars = []

    # helpers
    def chance(self, p):
        return self.r.random() < p

    def pick(self, xs):
        return self.r.choice(xs)

    def m(self, valid, bad=BAD_VALUES, scale=1.0):
        """`valid`, or (with the case's mutation rate) a malformed alternative."""
        return self.pick(bad) if self.chance(self.rate * scale) else valid

    def emit(self, line):
        self.lines.append("    " * self.indent + line)

    def fresh(self):
        self.ntile += 1
        return f"t{self.ntile}"

    def dtype(self, d):
        """An nl dtype, sometimes spelled as a NumPy name; or (mutated) a bad one."""
        return self.m(f"nl.{d}" if self.chance(0.8) else repr(d.rstrip("_")), BAD_DTYPES)

    def shape_src(self, shape):
        return self.m(repr(tuple(shape)), BAD_SHAPES)

    # statements on a tile (name, shape, dtype); each returns the new current tile
    def unary(self, t):
        name, shape, dt = t
        v = self.fresh()
        fn = self.pick(UNARY)
        kw = f", dtype={self.dtype(self.pick(FLOAT_DTYPES))}" if self.chance(0.2) else ""
        self.emit(f"{v} = nl.{fn}({self.m(name)}{kw})")
        return (v, shape, dt if not kw else "float32")

    def operand(self, t):
        name, shape, dt = t
        k = self.r.random()
        if k < 0.4:
            return repr(self.pick([0.5, 2.0, -1.0, 3, 0, 1e-3, 100.0]))
        if k < 0.55 and shape[-1] > 1:
            # a [P, 1] column, broadcast along the free dim
            c = self.fresh()
            self.emit(f"{c} = nl.{self.pick(REDUCE)}({name}, axis={self.m('1', BAD_AXES)})")
            return c
        return name

    def binary(self, t):
        name, shape, dt = t
        v = self.fresh()
        other = self.m(self.operand(t))
        if self.chance(0.5):
            fn = self.pick(BINARY)
            a, b = (other, name) if self.chance(0.3) else (name, other)
            kw = f", dtype={self.dtype(self.pick(ALL_DTYPES))}" if self.chance(0.15) else ""
            self.emit(f"{v} = nl.{fn}({a}, {b}{kw})")
        else:
            op = self.pick(BAD_OPERATORS) if self.chance(self.rate * 0.5) else self.pick(OPERATORS)
            if self.chance(0.3):
                self.emit(f"{v} = {other} {op} {name}")
            else:
                self.emit(f"{v} = {name} {op} {other}")
        return (v, shape, dt)

    def reduce_broadcast(self, t):
        name, shape, dt = t
        v, w = self.fresh(), self.fresh()
        keep = ", keepdims=True" if self.chance(0.3) else ""
        self.emit(f"{v} = nl.{self.pick(REDUCE)}({name}, axis={self.m('1', BAD_AXES)}{keep})")
        self.emit(f"{w} = {name} {self.pick(['-', '*', '+'])} {v}")
        return (w, shape, dt)

    def copy(self, t):
        name, shape, dt = t
        v = self.fresh()
        d = self.pick(ALL_DTYPES)
        self.emit(f"{v} = nl.copy({self.m(name)}, dtype={self.dtype(d)})")
        return (v, shape, d)

    def where(self, t):
        name, shape, dt = t
        v = self.fresh()
        self.emit(f"{v} = nl.where({name} > {self.m('0.0')}, {self.m(name)}, "
                  f"{self.m(repr(self.pick([0.0, -1.0, 2])))})")
        return (v, shape, dt)

    def dst(self, shape, dt, buf="nl.sbuf"):
        v = self.fresh()
        self.emit(f"{v} = nl.ndarray({self.shape_src(shape)}, {self.dtype(dt)}, "
                  f"buffer={self.m(buf, BAD_BUFFERS)})")
        return v

    def isa(self, t):
        name, shape, dt = t
        k = self.pick(["activation", "tensor_scalar", "tensor_tensor", "tensor_reduce",
                       "tensor_copy", "memset", "iota", "affine_select", "copy_predicated",
                       "transpose", "dma_copy"])
        P, F = shape[0], shape[-1]
        if k == "activation":
            d = self.dst(shape, "float32")
            bias = ""
            if self.chance(0.3):
                b = self.dst([P, 1], "float32")
                self.emit(f"nisa.memset({b}, {self.m('0.5')})")
                bias = f", bias={self.m(b)}"
            red = ""
            if self.chance(0.3):
                rr = self.dst([P, 1], "float32")
                red = f", reduce_op={self.m('nl.add')}, reduce_res={self.m(rr)}"
            self.emit(f"nisa.activation(dst={d}, op={self.m('nl.' + self.pick(UNARY))}, "
                      f"data={self.m(name)}{bias}, scale={self.m('2.0')}{red})")
            return (d, shape, "float32")
        if k == "tensor_scalar":
            d = self.dst(shape, dt)
            op1 = f", op1={self.m('nl.add')}, operand1={self.m('1.0')}" if self.chance(0.5) else ""
            self.emit(f"nisa.tensor_scalar({d}, {self.m(name)}, {self.m('nl.' + self.pick(BINARY))}, "
                      f"{self.m('2.0')}, reverse0={self.m(repr(self.chance(0.3)))}{op1})")
            return (d, shape, dt)
        if k == "tensor_tensor":
            d = self.dst(shape, dt)
            self.emit(f"nisa.tensor_tensor({d}, {self.m(name)}, {self.m(name)}, "
                      f"{self.m('nl.' + self.pick(BINARY))})")
            return (d, shape, dt)
        if k == "tensor_reduce":
            d = self.dst([P, 1], dt)
            self.emit(f"nisa.tensor_reduce({d}, {self.m('nl.' + self.pick(['add', 'maximum', 'minimum', 'multiply']))}, "
                      f"{self.m(name)}, axis={self.m('1', BAD_AXES)}, negate={self.m(repr(self.chance(0.3)))})")
            return (d, [P, 1], dt)
        if k == "tensor_copy":
            d = self.dst(shape, self.pick(ALL_DTYPES))
            self.emit(f"nisa.tensor_copy({d}, {self.m(name)})")
            return (d, shape, dt)
        if k == "memset":
            d = self.dst(shape, dt)
            self.emit(f"nisa.memset({d}, {self.m(repr(self.pick([0.0, 1.5, -3, 1e30])))})")
            return (d, shape, dt)
        if k == "iota":
            d = self.dst(shape, self.pick(["int32", "float32"]))
            self.emit(f"nisa.iota({d}, {self.m(repr([[1, F]]))}, offset={self.m('0')}, "
                      f"channel_multiplier={self.m(repr(F))})")
            return (d, shape, "int32")
        if k == "affine_select":
            d = self.dst(shape, dt)
            self.emit(f"nisa.affine_select({d}, {self.m(repr([[-1, F]]))}, {self.m('1')}, "
                      f"{self.m(name)}, {self.m('0.0')}, cmp_op={self.m('nl.greater_equal')})")
            return (d, shape, dt)
        if k == "copy_predicated":
            d = self.dst(shape, dt)
            self.emit(f"nisa.memset({d}, 0.0)")
            self.emit(f"nisa.tensor_copy_predicated({d}, {self.m(name)}, {self.m(name)}"
                      f"{', reverse_pred=True' if self.chance(0.1) else ''})")
            return (d, shape, dt)
        if k == "transpose":
            if F > 128 or P > 128:
                return t
            d = self.dst([F, P], "float32", "nl.psum")
            self.emit(f"nisa.nc_transpose({d}, {self.m(name)})")
            v = self.fresh()
            self.emit(f"{v} = nl.transpose({d})")  # and back
            return (v, shape, "float32")
        # dma_copy
        d = self.dst(shape, dt)
        self.emit(f"nisa.dma_copy({d}, {self.m(name)})")
        return (d, shape, dt)

    def setitem(self, t):
        name, shape, dt = t
        k = self.r.random()
        if k < 0.4:
            self.emit(f"{name}[{self.m(':', BAD_SUBSCRIPTS)}, {self.m('0:1', BAD_SUBSCRIPTS)}] = "
                      f"{self.m('0.0')}")
        elif k < 0.7:
            self.emit(f"{name} {self.pick(['+=', '-=', '*=', '/='])} {self.m(self.operand(t))}")
        else:
            v = self.fresh()
            self.emit(f"{v} = nl.zeros_like({name})")
            self.emit(f"{v}[...] = {name}" if self.chance(0.1) else f"{v}[:, :] = {name}")
            return (v, shape, dt)
        return t

    def misc(self, t):
        """Calls users get wrong: control flow on tensors, odd builtins, bad names."""
        name, shape, dt = t
        k = self.pick(["if", "iter", "bool", "len", "matmul_op", "broadcast", "print",
                       "index_chain", "affine_cmp", "full", "empty_like", "ones"])
        if k == "if":
            self.emit(f"if {name}:")
            self.emit("    pass")
        elif k == "iter":
            self.emit(f"for _x in {name}:")
            self.emit("    pass")
        elif k == "bool":
            self.emit(f"_b = bool({name} > 0)")
        elif k == "len":
            self.emit(f"_n = len({name})")
        elif k == "matmul_op":
            self.emit(f"_m = {name} @ {name}")
        elif k == "broadcast":
            v = self.fresh()
            self.emit(f"{v} = nl.broadcast_to(nl.sum({name}, axis=1), {self.shape_src(shape)})")
            return (v, shape, dt)
        elif k == "print":
            self.emit(f"nl.device_print({self.m(repr('t'))}, {self.m(name)})")
        elif k == "index_chain":
            v = self.fresh()
            sub = self.m(f"0:{shape[0]}", BAD_SUBSCRIPTS, 2)
            self.emit(f"{v} = {name}[{sub}][{self.m(':', BAD_SUBSCRIPTS, 2)}]")
            return (v, shape, dt)
        elif k == "affine_cmp":
            self.emit("_p = nl.program_id(0)")
            self.emit(f"_c = _p == {self.m('0')}")
        elif k in ("full", "ones"):
            v = self.fresh()
            if k == "full":
                self.emit(f"{v} = nl.full({self.shape_src(shape)}, {self.m('2.5')}, {self.dtype(dt)})")
            else:
                self.emit(f"{v} = nl.ones({self.shape_src(shape)}, {self.dtype(dt)}, "
                          f"buffer={self.m('nl.sbuf', BAD_BUFFERS)})")
            w = self.fresh()
            self.emit(f"{w} = {name} + {v}")
            return (w, shape, dt)
        else:
            v = self.fresh()
            self.emit(f"{v} = nl.empty_like({self.m(name)})")
            self.emit(f"nisa.tensor_copy({v}, {name})")
            return (v, shape, dt)
        return t

    def body(self, t, n):
        for _ in range(n):
            step = self.pick([self.unary, self.binary, self.binary, self.reduce_broadcast,
                              self.copy, self.where, self.isa, self.isa, self.setitem] +
                             ([self.misc] if self.chance(self.rate * 2) else []))
            t = step(t)
        return t

    # templates
    def inputs(self, n, P, F, dt):
        return [(f"x{i}", [P, F], dt) for i in range(n)]

    def case(self):
        kind = self.pick(["whole", "whole", "loop", "spmd", "matmul", "soup", "outside"])
        mode = self.pick(["trace", "compile", "compile", "simulate", "simulate", "native"])
        dt = self.pick(FLOAT_DTYPES * 3 + ["int32", "int8", "uint8"])
        grid = (1,)
        if kind == "outside":
            return self.outside()
        if kind == "whole":
            P, F = self.pick([1, 8, 64, 128]), self.pick([1, 5, 32, 64, 512])
            ins = self.inputs(self.pick([1, 2]), P, F, dt)
            t = self.fresh()
            sub = self.sub(P, F)
            self.emit(f"{t} = nl.load({self.m(ins[0][0]) if not sub else ins[0][0]}{sub})")
            cur = (t, [P, F], dt)
            if len(ins) > 1:
                u = self.fresh()
                self.emit(f"{u} = nl.load({ins[1][0]}) + {t}")
                cur = (u, [P, F], dt)
            cur = self.body(cur, self.r.randint(0, 5))
            self.finish(cur, [P, F], dt)
        elif kind == "loop":
            P = self.pick([16, 128])
            c = self.pick([1, 8, 32])
            n = self.pick([1, 2, 4])
            F = c * n
            ins = self.inputs(1, P, F, dt)
            self.emit(f"out = nl.ndarray({self.shape_src([P, F])}, {self.dtype(dt)}, "
                      f"buffer={self.m('nl.shared_hbm', BAD_BUFFERS)})")
            rng = self.pick(["affine_range"] * 3 + ["sequential_range", "static_range"])
            count = self.m(str(n), ["0", "-1", str(n + 1), "2**63", "2**62", "1.5", "'2'", "None",
                                    "nl.program_id(0)", "(2,)"])
            self.emit(f"for i in nl.{rng}({count}):")
            self.indent += 1
            t = self.fresh()
            lo, hi = f"i * {c}", f"(i + 1) * {c}"
            if self.chance(0.3):
                self.emit(f"{t} = nl.load(x0[:, nl.ds({self.m(lo)}, {self.m(str(c))})])")
            else:
                self.emit(f"{t} = nl.load(x0[:, {lo}:{self.m(hi, ['i * 2', '(i + 2) * ' + str(c), 'i', '300'])}])")
            cur = self.body((t, [P, c], dt), self.r.randint(0, 3))
            self.emit(f"nl.store(out[:, {lo}:{hi}], {self.m(cur[0])})")
            self.indent -= 1
            self.emit("return out")
        elif kind == "spmd":
            g = self.pick([1, 2, 3])
            F = self.pick([4, 64])
            P = 128 * g
            ins = self.inputs(self.pick([1, 2]), P, F, dt)
            grid = (self.m(g, [0, g + 1, 2 * g]) if isinstance(g, int) else g,)
            self.emit(f"out = nl.ndarray({self.shape_src([P, F])}, {self.dtype(dt)}, "
                      f"buffer=nl.shared_hbm)")
            axis = self.m("0", ["1", "4", "-1", "'0'"])
            size = self.m("128", ["129", "0", "-128", "256"])
            self.emit(f"rows = nl.ds(nl.program_id({axis}) * 128, {size})")
            t = self.fresh()
            self.emit(f"{t} = nl.load(x0[rows])")
            cur = self.body((t, [128, F], dt), self.r.randint(0, 3))
            self.emit(f"nl.store(out[rows], {cur[0]})")
            self.emit("return out")
        elif kind == "matmul":
            K, M, N = self.pick([1, 64, 128]), self.pick([1, 64, 128]), self.pick([8, 128, 512])
            mdt = self.pick(["float32", "bfloat16"])
            ins = [("x0", [K, M], mdt), ("x1", [K, N], mdt)]
            a, b, acc = self.fresh(), self.fresh(), self.fresh()
            self.emit(f"{a} = nl.load(x0)")
            self.emit(f"{b} = nl.load(x1)")
            if self.chance(0.5):
                self.emit(f"{acc} = nl.zeros({self.shape_src([M, N])}, nl.float32, "
                          f"buffer={self.m('nl.psum', BAD_BUFFERS)})")
                acc_v = self.m("None", ["2", "'yes'", "-2", "2**63"]) if self.chance(0.5) else \
                    self.pick(["True", "False", "-1"])
                self.emit(f"nisa.nc_matmul({acc}, {self.m(a)}, {self.m(b)}, accumulate={acc_v})")
            else:
                self.emit(f"{acc} = nl.matmul({self.m(a)}, {self.m(b)}, "
                          f"transpose_x={self.m('True', ['False', 'None', '1'])})")
            cur = self.body((acc, [M, N], "float32"), self.r.randint(0, 2))
            self.finish(cur, [M, N], "float32")
            dt = mdt
        else:  # soup: statements over two inputs with little regard for the rules
            self.rate = max(self.rate, 0.2)
            P, F = self.pick([1, 64, 128, 200]), self.pick([1, 64, 700])
            ins = self.inputs(2, P, F, dt)
            t = self.fresh()
            self.emit(f"{t} = nl.load(x0)")
            cur = self.body((t, [P, F], dt), self.r.randint(1, 6))
            for _ in range(self.r.randint(0, 2)):
                cur = self.misc(cur)
            self.finish(cur, [P, F], dt)
        return self.assemble(ins, grid, mode)

    def sub(self, P, F):
        k = self.r.random()
        if k < 0.6:
            return ""
        if k < 0.8:
            return f"[{self.m(f'0:{P}', BAD_SUBSCRIPTS, 2)}, {self.m(':', BAD_SUBSCRIPTS, 2)}]"
        return f"[{self.m(f'nl.ds(0, {P})', BAD_SUBSCRIPTS, 2)}]"

    def finish(self, cur, shape, dt):
        name = cur[0]
        out_shape = cur[1] if self.chance(0.9) else shape
        self.emit(f"out = nl.ndarray({self.shape_src(out_shape)}, {self.dtype(dt)}, "
                  f"buffer={self.m('nl.shared_hbm', BAD_BUFFERS)})")
        if self.chance(0.8):
            self.emit(f"nl.store({self.m('out')}, {self.m(name)})")
        else:
            self.emit(f"out[...] = {name}" if self.chance(0.2) else f"out[:, :] = {name}")
        ret = self.m("out", ["None", "(out, out)", f"{name}", "x0", "[out]", "3", "(out, 1)"])
        self.emit(f"return {ret}")

    def array_src(self, name, shape, dt, index=0):
        np_dt = {"bfloat16": "ml_dtypes.bfloat16", "bool_": "np.bool_"}.get(dt, f"np.{dt}")
        if dt.startswith("float") or dt == "bfloat16":
            special = "" if not self.chance(0.2) else ", special=True"
            src = f"rand({tuple(shape)!r}, {np_dt}, {self.seed % 1000 + index}{special})"
        else:
            src = f"rand({tuple(shape)!r}, {np_dt}, {self.seed % 1000 + index})"
        bad = [f"rand({tuple(shape)!r}, np.float64, 0)", f"rand({tuple(shape)!r}, np.complex64, 0)",
               f"rand({tuple(shape)!r}, np.int64, 0)", "None", "3.0", "[[1.0, 2.0]]", "'x'",
               f"rand({tuple(shape)!r}, {np_dt}, 0).T", f"rand((0, {shape[-1]}), {np_dt}, 0)",
               f"rand(({shape[0]}, 0), {np_dt}, 0)", f"rand({tuple(shape) + (2,)!r}, {np_dt}, 0)",
               f"np.array(1.0, np.float32)", f"rand({tuple(shape)!r}, {np_dt}, 0)[::2]",
               f"np.broadcast_to(rand((1, {shape[-1]}), {np_dt}, 0), {tuple(shape)!r})",
               f"rand({tuple(shape)!r}, {np_dt}, 0).astype(object)",
               f"np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (2**20, 2**20), (0, 0))"]
        return self.m(src, bad)

    def assemble(self, ins, grid, mode):
        params = ", ".join(n for n, _, _ in ins)
        kernel = f"def kern({params}):\n" + "\n".join(self.lines) + "\n"
        args = [self.array_src(n, s, d, i) for i, (n, s, d) in enumerate(ins)]
        if self.chance(self.rate):
            self.r.choice([lambda: args.pop(), lambda: args.append(args[0]),
                           lambda: args.append("None")])() if args else None
        g = grid[0]
        grid_src = self.m(repr(g) if len(grid) == 1 else repr(grid), BAD_GRIDS)
        call = f"args = [{', '.join(args)}]\n"
        if mode == "trace":
            call += "result = neuron.kernel(kern).trace(*args)\n"
        elif mode == "compile":
            call += "result = neuron.kernel(kern).compile(*args)\n"
        elif mode == "simulate":
            call += f"_grid = {grid_src}\nresult = neuron.simulate(neuron.kernel(kern))[_grid](*args)\n"
        else:
            # Native; when it runs, the simulator runs the same launch and must agree bit for bit.
            call += f"_grid = {grid_src}\nresult = neuron.kernel(kern)[_grid](*args)\n"
            call += "differential = True\n"
        return {"seed": self.seed, "kernel": kernel, "call": call, "mode": mode}

    def outside(self):
        """nl / nisa called outside any kernel, and misuse of the decorator itself."""
        calls = [
            "nl.load(np.zeros((4, 4), np.float32))", "nl.ndarray((1, 1), nl.float32)",
            "nl.program_id(0)", "nl.num_programs(0)", "nisa.memset(None, 0.0)",
            "[i for i in nl.affine_range(2)]", "[i for i in nl.sequential_range(3)]",
            "nl.exp(1.0)", "nl.add(1.0, 2.0)", "nl.ds(0, 4)", "nl.zeros((128, 4), nl.float32)",
            "neuron.kernel(42)", "neuron.kernel(mode='fast')(lambda a: a)",
            "neuron.kernel(lambda a: a)(np.zeros((4, 4), np.float32))",
            "neuron.kernel(lambda: None)()", "neuron.kernel(lambda *a: None)(np.zeros(4, np.float32))",
            "neuron.kernel(lambda a: nl.load(a))[0]", "neuron.kernel(lambda a: None)[(1,) * 5]",
            "neuron.kernel(lambda a: None)['x']", "neuron.simulate(42)",
            "neuron.parse_kernel('kernel k(')", "neuron.parse_kernel(None)",
            "neuron.parse_kernel('x' * 1000)", "nl.to_dtype('float64')", "nl.to_dtype(None)",
            "neuron.kernel(lambda a: a).trace(((2**63, 1), 'float32'))",
            "neuron.kernel(lambda a: a).trace(((4, 4), 'float64'))",
            "neuron.kernel(lambda a: a).trace(((4,), None))",
            "neuron.kernel(lambda a: a).trace(('ab', 'float32'))",
            "nisa.iota(None, [[1, 4]])", "nl.matmul(None, None)", "nl.sum(None, axis=1)",
            "neuron.trace_example('nope', [])",
            "neuron.trace_example('vector_add', [((256, 64), 'float32', 'a')])",
            "neuron.kernel(lambda a, k=1: a)(np.zeros((4, 4), np.float32), k={})",
            "neuron.kernel(lambda a, k=1: a)(np.zeros((4, 4), np.float32), j=2)",
            "neuron.kernel(lambda a, b=None: a)(None)", "neuron.registry.get('nope')",
            "neuron.registry.get('softmax')(1.0)", "neuron.registry.info(3)",
            "neuron.registry.get('scaled_activation')(np.zeros((128, 4), np.float32), rows=0)",
            "neuron.registry.get('scaled_activation')(np.zeros((128, 4), np.float32), act=2)",
            "neuron.registry.get('scaled_activation')(np.zeros((128, 4), np.float32), "
            "out_dtype='float64')",
            "neuron.registry.get('scaled_activation')(np.zeros((128, 4), np.float32), "
            "rows=2**70)",
        ]
        picked = [self.pick(calls) for _ in range(self.r.randint(1, 3))]
        call = "".join(f"result = {c}\n" for c in picked)
        return {"seed": self.seed, "kernel": "", "call": call, "mode": "outside"}


def gen_case(seed):
    return Gen(seed).case()


def case_source(case):
    return case["kernel"] + "\n" + case["call"]


# ---- worker: runs cases, one JSON line per case ------------------------------------------------

PRELUDE = '''
import numpy as np
import ml_dtypes
import neuron
import neuron.language as nl
import neuron.isa as nisa

def rand(shape, dtype, seed, special=False):
    r = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16):
        a = (r.standard_normal(shape) * 2).astype(np.float32)
        if special and a.size:
            flat = a.reshape(-1)
            for i, v in enumerate([np.nan, np.inf, -np.inf, -0.0, 1e30, 1e-40]):
                flat[(i * 7919) % flat.size] = v
        return a.astype(dtype)
    if dtype.kind == "c":
        return r.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return r.integers(0, 2, shape).astype(dtype)
    if dtype.kind == "O":
        return np.zeros(shape, dtype)
    lo, hi = (0, 100) if dtype.kind == "u" else (-100, 100)
    return r.integers(lo, hi, shape).astype(dtype)
'''


def neuron_error():
    import neuron
    return neuron.NeuronError


def is_toolkit(filename):
    from neuron._span import is_toolkit_file
    return is_toolkit_file(filename)


def classify(exc):
    """'ok', 'error' (an allowed error with a message) or 'bad:<why>'."""
    import neuron
    if exc is None:
        return "ok"
    msg = str(exc)
    # The message, not the quoted source line (a registered C++ kernel's line is C++).
    said = getattr(exc, "message", None) or msg
    if any(cpp in said for cpp in ("nl::", "isa::", "neuron::", "std::")):
        return "bad:C++ syntax in a message to a Python user"
    if isinstance(exc, neuron.NeuronError):
        if not msg.strip() or not getattr(exc, "rule", ""):
            return "bad:NeuronError without a message or rule"
        return "error"
    if type(exc) is RuntimeError:
        return "bad:RuntimeError (an InternalError reached the user)"
    if isinstance(exc, MemoryError) and ("out of host memory" in msg or
                                         msg.startswith("Unable to allocate")):
        # Tensors below the 2^48-byte tensor-size bound but beyond this machine: our message
        # (the outputs) or NumPy's (copying a huge non-contiguous view), both naming the size.
        return "error"
    if isinstance(exc, (TypeError, ValueError)):
        if not msg.strip():
            return f"bad:{type(exc).__name__} without a message"
        return "error"
    if any("is not an array, so kernel" in n for n in getattr(exc, "__notes__", ())):
        # The kernel's own code failed on a value the caller passed where it meant a tensor
        # (`x[300]` of the string 'x'); the toolkit's note says the value became a parameter.
        return "error"
    return f"bad:{type(exc).__name__}"


def same_results(a, b):
    import numpy as np
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.tobytes() == y.tobytes():
            continue
        # NaN payloads may differ only where both are NaN.
        fx, fy = x.astype(np.float64), y.astype(np.float64)
        if not np.array_equal(fx, fy, equal_nan=True):
            return False
    return True


def run_case(case, workdir):
    """Runs one case in this process; returns (outcome, detail)."""
    import contextlib
    import io
    import traceback
    path = os.path.join(workdir, f"case_{case.get('seed', 'x')}.py")
    src = case_source(case)
    with open(path, "w") as f:
        f.write(src)
    ns = {}
    exec(PRELUDE, ns)
    exc = None
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(src, path, "exec"), ns)
    except BaseException as e:  # noqa: BLE001 (classified below)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        exc = e
    outcome = classify(exc)
    detail = ""
    if exc is not None:
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
        detail = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"
        line = (tb[-1].line or "").strip() if tb else ""
        if outcome == "error" and isinstance(exc, (TypeError, ValueError)) and tb and \
                is_toolkit(tb[-1].filename) and not line.startswith("raise") and \
                "_C." not in line:
            # Python itself failed inside the toolkit (float('x'), len(None), ...): allowed, but
            # the message does not come from us; counted as "loose" in the statistics.
            outcome = "loose"
    elif ns.get("differential"):
        # Both executors ran nothing but this kernel: they must agree bit for bit.
        import neuron
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                sim = neuron.simulate(neuron.kernel(ns["kern"]))[ns["_grid"]](*ns["args"])
        except BaseException as e:  # noqa: BLE001
            return f"bad:simulator failed where native ran ({type(e).__name__}: {e})", ""
        if not same_results(sim, ns["result"]):
            return "bad:simulator and native results differ", ""
    return outcome, detail


def worker(args):
    """Reads case specs (JSON lines) on stdin; answers with START/RESULT lines on stdout."""
    import neuron  # noqa: F401 (import cost paid once)
    workdir = tempfile.mkdtemp(prefix="neuron-pyfuzz-")
    out = sys.stdout
    for line in sys.stdin:
        spec = json.loads(line)
        case = spec["case"] if "case" in spec else gen_case(spec["seed"])
        out.write(f"START {spec['id']}\n")
        out.flush()
        outcome, detail = run_case(case, workdir)
        out.write("RESULT " + json.dumps({"id": spec["id"], "outcome": outcome,
                                          "detail": detail}) + "\n")
        out.flush()


# ---- driver ------------------------------------------------------------------------------------

# Product bugs found by this fuzzer and not fixed yet (reported in docs/reliability.md, "Open
# findings"). A finding matching one is counted as known instead of failing the run; each has a
# corpus case marked known_bug, whose replay fails once the bug is fixed (then drop both).
KNOWN_BUGS = [
    (r"^bad:AttributeError$", r"has no attribute '(shape|buffer|dtype)' at language\.py",
     "nl.empty_like(x) with x not an nl tensor reads x.shape unchecked (language.py)"),
    (r"^bad:OverflowError$", r"cannot convert float infinity to integer at (language|isa)\.py",
     "int(float('inf')) in nl.ds / subscripts / loop bounds / nisa.iota and affine_select "
     "offsets (language.py, isa.py)"),
]


def known_bug(outcome, detail):
    for kind, message, why in KNOWN_BUGS:
        if re.search(kind, outcome) and re.search(message, detail):
            return why
    return None


class Pool:
    """One worker process at a time per job; a crash or hang is charged to the running case and
    the worker restarted."""

    def __init__(self, timeout, env):
        self.timeout, self.env, self.proc = timeout, env, None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env)
        self.buffer = b""

    def readline(self, deadline):
        """The worker's next line, b"" when it died, None at the deadline. Reads the pipe
        directly: a buffered reader would hide lines from select()."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.time()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"

    def run(self, spec):
        """Returns (outcome, detail)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write((json.dumps(spec) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died; readline sees the end
        deadline = time.time() + self.timeout + 10  # worker start-up included
        started = False
        while True:
            line = self.readline(deadline)
            if line is None:
                self.kill()
                return "bad:hang (no answer within the time limit)", ""
            if not line:
                code = self.proc.wait()
                self.proc = None
                return f"bad:crash (worker died, exit status {code})", ""
            line = line.decode()
            if line.startswith("START "):
                started = True
                deadline = time.time() + self.timeout
            elif line.startswith("RESULT ") and started:
                r = json.loads(line[7:])
                return r["outcome"], r["detail"]

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def worker_env():
    env = dict(os.environ)
    env["NEURON_CACHE"] = "off"  # the memory level only: the fuzzer leaves no files behind
    env.setdefault("NEURON_THREADS", "1")
    return env


def load_corpus():
    cases = []
    for path in sorted(glob.glob(os.path.join(CORPUS, "*.json"))):
        with open(path) as f:
            c = json.load(f)
        c["_file"] = os.path.relpath(path, HERE)
        cases.append(c)
    return cases


def replay_corpus(pool, cases, verbose):
    failures = 0
    for i, c in enumerate(cases):
        outcome, detail = pool.run({"id": f"corpus{i}", "case": c})
        expect = c.get("expect", "clean")
        good = (outcome == "ok" if expect == "ok" else
                outcome in ("error", "loose") if expect == "error" else
                not outcome.startswith("bad"))
        known = c.get("known_bug")
        if known and good:
            print(f"FIXED? {c['_file']}: marked known_bug ({known}) but it now gives "
                  f"'{outcome}'; remove the known_bug mark")
            failures += 1
        elif not known and not good:
            print(f"FAIL {c['_file']}: expected {expect}, got {outcome} {detail}")
            failures += 1
        elif verbose:
            print(f"ok   {c['_file']}: {outcome}{' (known bug)' if known else ''}")
    return failures


def fuzz(pool, seed, seconds, count, eager, messages=None):
    stats = {"ok": 0, "error": 0, "loose": 0, "known": 0}
    findings = []
    end = time.time() + seconds
    s = seed
    n = 0
    while (count is None and time.time() < end) or (count is not None and n < count):
        case = gen_case(s)
        if eager and case["mode"] in ("simulate",) and s % 2:
            case["call"] = case["call"].replace("neuron.simulate(neuron.kernel(kern))",
                                                "neuron.kernel(kern, mode='eager')")
        outcome, detail = pool.run({"id": s, "case": case})
        n += 1
        if outcome.startswith("bad") and known_bug(outcome, detail):
            stats["known"] += 1
        elif outcome.startswith("bad"):
            findings.append((s, outcome, detail))
            print(f"FINDING seed {s}: {outcome[4:]} {detail}")
            print("  reproduce: python3 tests/fuzz/python_api_fuzz.py --show", s)
        else:
            stats[outcome] += 1
            if messages is not None and detail:
                key = outcome + " " + re.sub(r"\d+", "N", re.sub(r"^.*error: ", "", detail))[:150]
                messages[key] = messages.get(key, 0) + 1
        s += 1
    return n, stats, findings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=None, help="cases instead of a time budget")
    ap.add_argument("--case-timeout", type=float, default=30)
    ap.add_argument("--show", type=int, metavar="SEED", help="print the case of SEED and exit")
    ap.add_argument("--case", help="run one case file (JSON) and print its outcome")
    ap.add_argument("--save", nargs=2, metavar=("SEED", "NAME"),
                    help="write the case of SEED to the corpus as NAME.json")
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--eager", action="store_true", help="also run some cases in eager mode")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--stats", action="store_true", help="print how often each error occurred")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    if args.show is not None:
        c = gen_case(args.show)
        print(f"# seed {args.show}, mode {c['mode']}\n{case_source(c)}")
        return 0
    if args.save:
        c = gen_case(int(args.save[0]))
        c["expect"] = "clean"
        path = os.path.join(CORPUS, args.save[1] + ".json")
        with open(path, "w") as f:
            json.dump(c, f, indent=1)
            f.write("\n")
        print("wrote", path)
        return 0
    pool = Pool(args.case_timeout, worker_env())
    try:
        if args.case:
            with open(args.case) as f:
                c = json.load(f)
            print(*pool.run({"id": "case", "case": c}))
            return 0
        t0 = time.time()
        failures = 0
        ncorpus = 0
        if not args.no_corpus:
            corpus = load_corpus()
            ncorpus = len(corpus)
            failures += replay_corpus(pool, corpus, args.verbose)
        left = max(0.0, args.seconds - (time.time() - t0))
        messages = {} if args.stats else None
        n, stats, findings = fuzz(pool, args.seed, left, args.count, args.eager, messages)
        failures += len(findings)
        if messages:
            for k, v in sorted(messages.items(), key=lambda kv: -kv[1]):
                print(f"{v:6d}  {k}")
        print(f"python api fuzz: {n} cases from seed {args.seed} in {time.time() - t0:.1f} s "
              f"({stats['ok']} ran, {stats['error'] + stats['loose']} clean errors of which "
              f"{stats['loose']} raised by Python inside the toolkit, {stats['known']} known bugs, "
              f"{len(findings)} new findings); "
              f"{ncorpus} corpus cases replayed; {failures} failures")
        return 1 if failures else 0
    finally:
        pool.kill()


if __name__ == "__main__":
    sys.exit(main())
