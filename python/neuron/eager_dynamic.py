"""Eager mode for the dynamic half (docs/python.md, "Eager mode"): registers are mutable Python
ints (EagerRegister), runtime loops (nl.fori_loop, nl.while_loop, nl.dynamic_range) iterate in
Python, and register loads and stores run as one-op kernels on the simulator, so the C++ rules
and conversions (floats rounded to the register's integer) stay in one place. Every call is
first traced alone with the same arguments, so it is refused exactly as a compiled call is."""
import functools

from . import _C, access, eager
from ._span import user_span
from .eager_values import ApKey, BroadcastKey, EagerIndex, EagerRegister, frozen
from .errors import NeuronError, user_error


def _traced(v, span):
    """An eager argument as the traced call's argument: a register becomes a fresh traced one,
    an index its value (the values are checked; the eager call runs them)."""
    if isinstance(v, EagerRegister):
        return _C.register_alloc(v.value, span)
    if isinstance(v, EagerIndex):
        return int(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_traced(x, span) for x in v)
    return v


def _bind(fn, args, kwargs):
    bound = eager._Spec(fn).signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _check_call(fn, arguments, span, **override):
    """Traces fn alone on the (bound) arguments, so an argument it refuses raises here as in a
    compiled kernel."""
    def body():
        fn(**{n: override.get(n, _traced(v, span)) for n, v in arguments.items()})
    eager._check(body, span)


def _value(v):
    return v.value if isinstance(v, EagerRegister) else int(v)


# ---- registers -------------------------------------------------------------------------------

def _read_register(src):
    """The register value a register_load of tensor src gives (the C++ conversion)."""
    def read(src):
        span = user_span()
        r = _C.register_alloc(0, span)
        _C.register_load(r, src, span)
        t = _C.ndarray([1, 1], _C.DType.int32, _C.Memory.sbuf, "", span)
        _C.register_store(t, r, span)
        return t
    out = eager._run(eager._Spec(read), (src,), {}, read)
    return int(out.numpy().reshape(-1)[0])


def _store_register(dst, value):
    def write(dst, value):
        span = user_span()
        _C.register_store(dst, _C.register_alloc(value, span), span)
    eager._run(eager._Spec(write, writes=("dst",)), (dst, value), {}, write)


def _new_register(launch, value):
    sym = _C.Affine.var(f"r{launch.registers}")
    launch.registers += 1
    return EagerRegister(value, sym)


def register_op(kind):
    """Decorator for nisa.register_alloc / _move / _load / _store: in eager mode the register
    is an EagerRegister and the operation runs now."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            launch = eager._state.launch
            if launch is None:
                return fn(*args, **kwargs)
            span = user_span()
            a = _bind(fn, args, kwargs)
            if kind == "alloc":
                _check_call(fn, a, span)
                return _new_register(launch, 0 if a["x"] is None else int(a["x"]))
            if kind == "move":
                _check_call(fn, a, span)
                a["dst"].value = _value(a["src"])
                return None
            reg = "dst" if kind == "load" else "src"
            if not isinstance(a[reg], EagerRegister):
                if isinstance(a[reg], EagerIndex):  # a loop index: the tracer's own refusal
                    other = "src" if kind == "load" else "dst"
                    t = a[other]

                    def body():
                        stand_in = _C.ndarray(list(t.shape), t.dtype, _C.Memory.sbuf, "", span)
                        fn(**{reg: a[reg]._sym, other: stand_in})
                    eager._check(body, span)
                fn(*args, **kwargs)  # raises the traced call's TypeError
            if kind == "load":
                a["dst"].value = _read_register(a["src"])
            else:
                _store_register(a["dst"], a["src"].value)
            return None
        return call
    return wrap


# ---- runtime loops ---------------------------------------------------------------------------

def _sym(v):
    if isinstance(v, EagerRegister):
        return v.sym
    return v._sym if isinstance(v, EagerIndex) else _C.Affine(int(v))


def _loop_index(launch, start, step):
    launch.loops += 1
    # "d": a runtime loop's index has no value when compiled (rolled "i" indices do, unroll.py)
    return _C.Affine.var(f"d{launch.loops}", step) + _sym(start)


def runtime_loop(fn):
    """Decorator for nl.fori_loop / nl.while_loop: in eager mode the loop runs in Python."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        launch = eager._state.launch
        if launch is None:
            return fn(*args, **kwargs)
        span = user_span()
        a = _bind(fn, args, kwargs)
        _check_call(fn, a, span, body_fun=(lambda i: 0))
        body = a["body_fun"]
        if fn.__name__ == "fori_loop":
            lo, hi, step = _value(a["lower"]), _value(a["upper"]), int(a["step"])
            var = _loop_index(launch, a["lower"], step)
            for v in range(lo, hi, step):
                body(EagerIndex(v, var))
            return None
        r = _new_register(launch, _value(a["init"]))
        while r.value != 0:
            nxt = body(r)
            if not isinstance(nxt, (EagerRegister, EagerIndex, int)) or isinstance(nxt, bool):
                user_error("register", "the value nl.while_loop's body_fun returns (the "
                           "register's next value) must be a register or an int, got "
                           f"{nxt!r} ({type(nxt).__name__})", span)
            r.value = _value(nxt)
        return None
    return call


def runtime_range(fn):
    """Decorator for nl.dynamic_range: in eager mode it iterates in Python."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        launch = eager._state.launch
        if launch is None:
            return fn(*args, **kwargs)
        span = user_span()

        a = _bind(fn, args, kwargs)

        def first(**k):
            g = fn(**k)
            next(g, None)
            g.close()
        _check_call(first, a, span)
        start, stop = (0, a["start"]) if a["stop"] is None else (a["start"], a["stop"])
        step = int(a["step"])
        var = _loop_index(launch, start, step)
        return (EagerIndex(v, var) for v in range(_value(start), _value(stop), step))
    return call


# ---- access patterns -------------------------------------------------------------------------

def _ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0,
        dtype=None):
    """t.ap(...) of an eager tensor: the C++ DSL picks the view (traced on the values of the
    offsets now); the result is a view of the same NumPy array."""
    span = user_span()
    if isinstance(scalar_offset, eager.EagerTensor):
        scalar_offset = _read_register(scalar_offset)
    offset, scalar_offset = frozen(offset), frozen(scalar_offset)
    base, found = self._base, {}
    rows = vector_offset

    def k(root):
        view = self._apply(eager._root(base, root, span))
        if rows is None:
            v = access.ap(view, pattern, offset, scalar_offset, None, indirect_dim, dtype)
            if isinstance(v, access.OutOfRange) and "shape" in vars(v):
                found.update(past_end=v)  # a shape only, as traced
                return [_C.ndarray([1], _C.DType.float32, _C.Memory.shared_hbm, "eager_unused",
                                   span)]
            if isinstance(v, access.OutOfRange):
                raise v.error
        else:
            if scalar_offset is not None:
                user_error("access-pattern", "ap: scalar_offset and vector_offset are mutually "
                           "exclusive", span)
            pat = access.pattern_pairs(pattern)
            whole = access.indirect_pattern(view, pat, rows, indirect_dim,
                                            list(base.array.shape), span)
            v = _C.ap(view, whole, None if offset is None else access.as_index(offset, "ap "
                      "offset"), None, 0, span)
        if isinstance(v, access.SplitView) and v.overlapping:
            user_error("access-pattern", f"ap({pattern}) of '{base.name}' reaches some "
                       "elements more than once (a sliding window), which can only be read, and "
                       "only in a traced kernel (mode='native' or 'simulate')", span)
        if isinstance(v, access.SplitView):
            user_error("unsupported", "a transposing .ap() pattern (entries out of storage "
                       "order) runs traced only, not in eager mode; run the kernel traced "
                       "(mode='native' or 'simulate')", span)
        if isinstance(v, access.BitcastView):  # ap(dtype=...): a view in base's own dtype
            found.update(bitcast=(v.dtype, v.shape))
            v = v.view
        found.update(dims=_C.view_dims(v), shape=list(v.shape), storage=_C.view_storage(v),
                     order=_C.view_order(v), origin=_C.view_origin(v),
                     as_dtype=_C.view_as_dtype(v))
        return [_C.ndarray([1], _C.DType.float32, _C.Memory.shared_hbm, "eager_unused", span)]
    with eager.paused():
        try:
            _C.trace(eager._launch_name(), k, [eager._spec(base, 0)], span)
        except NeuronError as e:
            if e.rule not in ("access-pattern", "out-of-bounds", "index") or \
                    (scalar_offset is None and offset is None):
                raise
            return access.OutOfRange(e)  # its offset's value: raised where it is used
    if "past_end" in found:
        return found["past_end"]
    t = eager.EagerTensor(base, _ap_chain(found["dims"], found["storage"], found["order"],
                                          found["origin"], base.on_chip, found["as_dtype"]),
                          found["shape"])
    if "bitcast" in found:
        return access.BitcastView(t, *found["bitcast"])
    return t if rows is None else access.IndirectView(t, rows)


def _ap_chain(dims, storage=(), order=(), origin=0, on_chip=False, as_dtype=None):
    """The eager view chain of an ap() view's per-storage-dim (start, size, step, kept) of the
    storage seen with shape `storage` from element `origin` (empty: its own), its dims in
    `order` (storage dims in view order; empty: storage order): the walk, then a broadcast for
    each step-0 (repeated) dim."""
    walked = [(st, 1, 1, keep) if step == 0 else (st, n, step, keep) for st, n, step, keep in dims]
    view_dims = list(order) if order else [d for d, x in enumerate(dims) if x[3]]
    shape = [walked[d][1] for d in view_dims]
    chain = [(ApKey(walked, storage, order, origin, on_chip, as_dtype), tuple(shape))]
    kept = [(dims[d][1], dims[d][2]) for d in view_dims]
    for d, (n, step) in enumerate(kept):
        if step == 0 and n > 1:
            shape[d] = n
            chain.append((BroadcastKey(d, n), tuple(shape)))
    return tuple(chain)


eager.EagerTensor.ap = _ap
