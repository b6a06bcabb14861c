"""torch.ops.neuron.*: the kernel library's kernels as PyTorch operators (torch.library.custom_op)
on canonical shapes (2-D rows for the row-wise kernels, [B, H, L, D] for attention and rope),
each with a fake implementation (shapes and dtypes only, for torch.compile and meta tensors) and,
for the forward ones, autograd through the library's backward kernels:

    neuron::matmul(a, b, transpose_a=False, transpose_b=False)
    neuron::linear(x, weight, bias=None)                  backward: neuron::matmul
    neuron::attention(q, k, v, is_causal, scale, math=False) -> (out, lse)
                     backward: neuron::attention_backward (math: attention_math_backward)
    neuron::attention_bias(q, k, v, bias, is_causal, scale, math=False) -> (out, lse)
                backward: neuron::attention_bias_backward (math: attention_bias_math_backward)
    neuron::softmax(x)                                    backward: neuron::softmax_backward
    neuron::rms_norm(x, weight, eps) -> (y, rstd)         backward: neuron::rms_norm_backward
    neuron::layer_norm(x, weight, bias, eps) -> (y, mean, rstd)
                                                          backward: neuron::layer_norm_backward
    neuron::swiglu(x)                                     backward: neuron::swiglu_backward
    neuron::rope(x, cos, sin, inverse=False)              backward: neuron::rope(inverse=True)

The PyTorch-shaped functions users call are in functional.py. A kernel that rejects some shapes
when it is traced falls back to the PyTorch reference here (_kernels.launch)."""
import collections
import inspect
import math
import threading
import weakref
from typing import Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode as _dispatch_mode

from .. import runtime
from . import _kernels
from ._reference import reference

Tensor = torch.Tensor


# The Python implementation behind each operator, by name, and its parameters' defaults: call()
# runs it directly when nothing needs the operator (no tracing, no modes), skipping the
# dispatcher; through _EAGER's autograd.Function when a gradient is needed.
IMPLS = {}
_DEFAULTS = {}
_EAGER = {}


def _op(name):
    def register(fn):
        IMPLS[name] = fn
        _DEFAULTS[name] = tuple(p.default for p in inspect.signature(fn).parameters.values())
        return torch.library.custom_op(f"neuron::{name}", mutates_args=())(fn)
    return register


def _autograd(op, backward, setup_context):
    """op.register_autograd(backward, setup_context), and the same formulas as a plain
    torch.autograd.Function over the operator's implementation for call()'s eager path: the
    custom operator's autograd wrapper costs ~60 us per forward and backward pair
    (torch.autograd.grad of a softmax over [1, 16]: 148 -> 88 us). call() passes every
    argument (defaults filled in), as the operator's own autograd would see them."""
    op.register_autograd(backward, setup_context=setup_context)
    name = op._name

    # A forward taking ctx, not a separate setup_context: Function.apply then skips binding
    # the arguments to forward's signature (inspect.signature on every call, ~10 us).
    def forward(ctx, *args):
        out = IMPLS[name](*args)
        setup_context(ctx, args, out)
        return out
    _EAGER[name] = type(f"{name}_eager", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})


# Tensor types that behave as plain tensors (nn.Parameter disables __torch_function__).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def call(name, *args):
    """torch.ops.neuron.<name>(*args); or, when nothing needs the operator, the same kernel and
    bits without the dispatcher (~11 us a call) and the custom operator's autograd wrapper:
    plain CPU tensors or parameters (meta tensors take the operator's fake), not traced by
    torch.compile, no dispatch, function or functorch mode active. Without a gradient to
    record the implementation runs directly; with one, _EAGER's autograd.Function records it
    with the operator's own backward formula."""
    if (torch.compiler.is_compiling() or _dispatch_mode() is not None
            or torch._C._is_torch_function_mode_enabled()
            or torch._C._functorch.peek_interpreter_stack() is not None):
        return getattr(torch.ops.neuron, name)(*args)
    grad = torch.is_grad_enabled()
    needs_grad = False
    for a in args:
        if isinstance(a, torch.Tensor):
            if type(a) not in _PLAIN or a.device.type != "cpu":
                return getattr(torch.ops.neuron, name)(*args)
            needs_grad = needs_grad or (grad and a.requires_grad)
    if not needs_grad:
        return IMPLS[name](*args)
    eager = _EAGER.get(name)
    if eager is None:  # an operator without a backward: its own error for the missing gradient
        return getattr(torch.ops.neuron, name)(*args)
    return eager.apply(*args, *_DEFAULTS[name][len(args):])


def _run(op, kernel, grid, tensors, params, ref):
    return _kernels.launch(f"neuron::{op}", kernel, grid, tensors, params, ref)


def _second_order(fn, inputs, grad_output):
    """The gradients of fn(*inputs) (None inputs skipped, None returned for them) by PyTorch's
    own ops, differentiable: for a backward run with create_graph=True (a gradient penalty,
    Hessian-vector products), since the backward kernels' operators have no autograd formula
    of their own. Inputs that need no gradient enter as fresh leaves."""
    with torch.enable_grad():
        leaves = [None if t is None else t if t.requires_grad else t.detach().requires_grad_()
                  for t in inputs]
        used = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(fn(*leaves), used, grad_output, create_graph=True,
                                         allow_unused=True))
    return [None if t is None else next(grads) for t in leaves]


def _row_programs(x, min_elements=32768):
    """SPMD programs for a row-wise kernel over x [R, C]: split_rows' 128 rows or more each (a
    partition tile) where that makes two or more; fewer rows split by work instead, at least
    min_elements a program, so a few long rows do not run on one core: softmax [16, 32000]
    fp32, 2 threads, 309 -> 204 us (PyTorch 101)."""
    rows = x.shape[0]
    p = _kernels.split_rows(rows)
    if p == 1 and x.dim() == 2 and x.shape[1] > 0:
        p = _kernels.split_rows(rows, min_rows=-(-min_elements // x.shape[1]))
    return p


def _grads(fn, inputs, grad_output):
    """The reference's gradients of fn(*inputs) (one tensor; None inputs skipped), for a backward
    operator whose kernel rejected the shapes. By torch.func.vjp, not torch.autograd: a custom
    operator's implementation runs below the autograd dispatch key, where no graph is recorded
    even under torch.enable_grad()."""
    used = [t.detach() for t in inputs if t is not None]

    def on_used(*ts):
        it = iter(ts)
        return fn(*[None if t is None else next(it) for t in inputs])

    _, vjp = torch.func.vjp(on_used, *used)
    gs = iter(vjp(grad_output))
    return [None if t is None else next(gs) for t in inputs]


# ---- matmul, linear ----------------------------------------------------------------------

def _row_split(a, dim=0):
    """(a, programs) for a matmul whose output rows are a's `dim`: SPMD programs must divide
    the rows and keep 128 each, so an odd count of 256 or more gets one program (one thread);
    one zero row more splits it in two (the caller drops that row of the output: rows do not
    mix, so the others keep their bits). 257 x 1024 @ 1024 x 1024 fp32, 2 threads: 6.1 -> 3.0
    ms (PyTorch 2.9)."""
    m = a.shape[dim]
    p = _matmul_programs(m)
    if p == 1 and m >= 256:
        a = torch.nn.functional.pad(a, (0, 0, 0, 1) if dim == 0 else (0, 1))
        p = _matmul_programs(m + 1)
    return a, p


def _matmul_programs(m):
    """Row programs for m output rows: as few as keep every worker thread equally busy (a
    multiple of the threads), of 512 rows or 256 where that allows, else split_rows' rule
    (programs of at least 128 rows). The kernel packs each moving tile once per group of up to
    512 rows of a program, so 128-row programs packed it four times as often: [2048]^3 at 2
    threads, 16 programs -> 4, fp32 66.2 -> 61.2 ms, bf16 13.3 -> 12.3 ms (Intel Xeon, session
    50; [1024]^3 bf16, 8 programs -> 2, 1.74 -> 1.81 ms)."""
    threads = runtime.torch_launch_threads(torch)
    for rows in (512, 256):
        p = _kernels.split_rows(m, min_rows=rows)
        if p > 1 and p % threads == 0:
            return p
    return _kernels.split_rows(m)


def _matmul_grid(p, n, **params):
    """(grid, params) of a matmul kernel launch with p row programs and n output columns. Rows
    too few to split (a decode step's one row) split the columns instead, in slices of at least
    one PSUM bank (512): [1, 4096] x [4096, 4096] fp32, 2 threads, 4.2 ms on one core -> 2.5
    ms (PyTorch 2.6)."""
    c = _kernels.split_rows(n, min_rows=512) if p == 1 else 1
    if c == 1:
        return (p,), dict(params, programs=p)
    return (p, c), dict(params, programs=p, column_programs=c)


@_op("matmul")
def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    m = a.shape[1] if transpose_a else a.shape[0]
    ap, p = _row_split(a, 1 if transpose_a else 0)
    grid, params = _matmul_grid(p, b.shape[0] if transpose_b else b.shape[1],
                                transpose_a=transpose_a, transpose_b=transpose_b)
    return _run("matmul", "matmul", grid, (ap, b), params,
                lambda: (a.t() if transpose_a else a) @ (b.t() if transpose_b else b))[:m]


@matmul.register_fake
def _(a, b, transpose_a=False, transpose_b=False):
    m = a.shape[1] if transpose_a else a.shape[0]
    n = b.shape[0] if transpose_b else b.shape[1]
    return a.new_empty((m, n))


# A linear layer's weight [N, K] transposed for the matmul kernel (linear below), remembered per
# weight tensor and version: inference calls a layer with the same weight again and again, and
# transposing a large weight costs a good part of its matmul (11008 x 4096 fp32, 512 rows, 2
# threads: 136 of 440 ms). An in-place change (an optimizer step, copy_) bumps the version and
# a new tensor has another identity: either makes a new copy. At most LINEAR_WEIGHT_CACHE_BYTES
# of copies are kept, least recently used first out; an entry goes with its weight (at the
# next call).
#
# Calls of few rows (a decode step) run the linear kernel, which transposes the weight's tiles
# itself, unless a copy exists: making one (PyTorch's t().contiguous(), mostly page faults on
# the new memory: 35-38 ms for 4096 x 4096 fp32) costs as much as ten such calls save (6.6 ->
# 2.5 ms at one row). So they make one only for a weight they met before unchanged (inference
# reuses it; a training step changes it) and only while it fits the cache without evicting.
#
# Writes that bypass the version counter (`w.data.add_(...)` in EMA or weight-tying code,
# `w.numpy()[:] = ...`) are caught by a sample of the weight's elements kept with the copy and
# compared on every reuse (64 elements by torch.take, ~2 us): a write that changes none of them
# (one element elsewhere through .data) is not seen; bump the version (`with torch.no_grad():
# w.add_(...)`) or call neuron.ops.clear_weight_cache() after such writes.
LINEAR_WEIGHT_CACHE_BYTES = 1 << 30
_wt_cache = collections.OrderedDict()  # id(weight) -> (weakref, (version, ptr, ...), copy, sample)
_wt_bytes = 0
_wt_seen = collections.OrderedDict()  # (id, (version, ptr, ...)) met by calls of few rows
_WT_SEEN_MAX = 4096
# (id, weakref) of weights that died: their weakref callbacks only append here (a callback may
# run anywhere, inside a dict operation too); the next call drops their entries under the lock.
_wt_dead = []
_wt_lock = threading.Lock()


def _nbytes(t):
    return t.numel() * t.element_size()


_SAMPLE = 64
_sample_at = {}  # weight shape -> the sampled positions (row-major), spread over the weight


def _sample(weight):
    """64 elements of the 2-D weight at fixed positions (its corners among them), or None for
    an empty weight. torch.take: ~2 us."""
    where = _sample_at.get(weight.shape)
    if where is None:
        if weight.dim() != 2:
            return None
        n, k = weight.shape
        if n * k == 0:
            return None
        i = torch.arange(_SAMPLE, dtype=torch.int64)
        rows, cols = (i * 2654435761) % n, (i * 40503 + i * i * 97) % k
        rows[:2], cols[:2] = torch.tensor([0, n - 1]), torch.tensor([0, k - 1])
        where = _sample_at.setdefault(weight.shape, rows * k + cols)
    return torch.take(weight.detach(), where)


def clear_weight_cache():
    """Forgets every transposed linear weight (after writes the cache cannot see)."""
    global _wt_bytes
    with _wt_lock:
        _wt_cache.clear()
        _wt_seen.clear()
        _wt_bytes = 0


def _wt_drop(wid):
    global _wt_bytes
    _wt_bytes -= _nbytes(_wt_cache.pop(wid)[2])


# A call of few rows with a weight of at most this many elements never looks for a copy: the
# linear kernel's own transposes of so small a weight cost less than the cache's bookkeeping
# (its lock, key and 64-element sample): [4, 8] x [16, 8] fp32 26 -> 19 us a call, [8, 64] x
# [64, 64] 27.6 -> 22.5, [32, 128] x [128, 128] and [256, 128] x [128, 128] unchanged or faster
# (Intel Xeon, 2 threads, session 48).
_SMALL_WEIGHT = 128 * 128


def _transposed(weight, few_rows=False):
    """weight.t().contiguous(), reused while the weight is unchanged. For a call of few rows,
    None where the rule above makes no copy (the caller runs the linear kernel instead)."""
    global _wt_bytes
    if few_rows and weight.numel() <= _SMALL_WEIGHT:
        return None
    try:
        key = (weight._version, weight.data_ptr(), tuple(weight.shape), weight.stride(),
               weight.dtype)
    except RuntimeError:  # an inference tensor has no version counter: nothing to check by
        return None if few_rows else weight.t().contiguous()
    wid = id(weight)
    sample = None
    with _wt_lock:
        while _wt_dead:
            k, ref = _wt_dead.pop()
            if k in _wt_cache and _wt_cache[k][0] is ref:
                _wt_drop(k)
        hit = _wt_cache.get(wid)
        mine = hit is not None and hit[0]() is weight
        if mine and hit[1] == key and ((sample := _sample(weight)) is None or
                                       torch.equal(hit[3], sample)):
            _wt_cache.move_to_end(wid)
            return hit[2]
        # The copy of an older version of this weight (an optimizer step changed it) is
        # refreshed in place: new memory's page faults are most of a fresh copy's cost (4096 x
        # 4096 fp32: 38 -> 14 ms).
        stale = hit[2] if mine and hit[2].shape == weight.t().shape and \
            hit[2].dtype == weight.dtype else None
        if few_rows:
            met = (wid, key) in _wt_seen
            more = _nbytes(weight) - (0 if stale is None else _nbytes(stale))
            if not met or _wt_bytes + more > LINEAR_WEIGHT_CACHE_BYTES:
                _wt_seen[(wid, key)] = None
                _wt_seen.move_to_end((wid, key))
                while len(_wt_seen) > _WT_SEEN_MAX:
                    _wt_seen.popitem(last=False)
                return None
            del _wt_seen[(wid, key)]  # met before, unchanged, and it fits: copy it below
        if stale is not None:
            _wt_drop(wid)  # no other call takes it while it is rewritten
    if stale is not None:
        wt = stale.copy_(weight.t())
    else:
        wt = weight.t().contiguous()
    if _nbytes(wt) > LINEAR_WEIGHT_CACHE_BYTES:
        return wt
    if sample is None:
        sample = _sample(weight)
    with _wt_lock:
        if wid in _wt_cache:
            _wt_drop(wid)
        _wt_cache[wid] = (weakref.ref(weight, lambda r, k=wid: _wt_dead.append((k, r))), key, wt,
                          sample)
        _wt_bytes += _nbytes(wt)
        while _wt_bytes > LINEAR_WEIGHT_CACHE_BYTES:
            _wt_drop(next(iter(_wt_cache)))
    return wt


@_op("linear")
def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    m = x.shape[0]
    xp, p = _row_split(x)
    grid, params = _matmul_grid(p, weight.shape[0])
    # The kernel transposes the [N, K] weight's tiles on the Tensor engine once per group of up
    # to 256 rows; past one group a transposed copy made once is cheaper (2048 x 1024 x 1024
    # fp32: 51 -> 43 ms, the plain matmul's time). Fewer rows use a copy on the rule above.
    wt = _transposed(weight, few_rows=m <= 256)
    if wt is not None:
        if bias is None:
            return _run("linear", "matmul", grid, (xp, wt), params,
                        lambda: reference.linear(x, weight))[:m]
        return _run("linear", "matmul_bias", grid, (xp, wt, bias), params,
                    lambda: reference.linear(x, weight, bias))[:m]
    if bias is None:
        return _run("linear", "linear", grid, (x, weight), params,
                    lambda: reference.linear(x, weight))
    return _run("linear", "linear_bias", grid, (x, weight, bias), params,
                lambda: reference.linear(x, weight, bias))


@linear.register_fake
def _(x, weight, bias=None):
    return x.new_empty((x.shape[0], weight.shape[0]))


def _linear_setup(ctx, inputs, output):
    # Only what the gradients asked for need (as PyTorch's linear): x for the weight's, the
    # weight for x's. A frozen weight's layer (an adapter's base, a feature extractor) keeps no
    # activation, and the caller may then write its input in place before the backward.
    x, weight, bias = inputs
    need_x, need_w = ctx.needs_input_grad[:2]
    ctx.save_for_backward(x if need_w else None, weight if need_x else None)
    ctx.has_bias = bias is not None


def _linear_backward(ctx, dy):
    # y = x w^T + b: dx = dy w, dw = dy^T x, db = 1^T dy (all on the matmul kernel)
    x, weight = ctx.saved_tensors
    dy = dy.contiguous()
    dx = dw = db = None
    if torch.is_grad_enabled():  # a second derivative will follow (_second_order)
        need = ctx.needs_input_grad
        return (dy @ weight if need[0] else None, dy.t() @ x if need[1] else None,
                dy.sum(0) if ctx.has_bias and need[2] else None)
    if ctx.needs_input_grad[0]:
        dx = call("matmul", dy, weight)
    if ctx.needs_input_grad[1]:
        dw = call("matmul", dy, x, True)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        # One row of output, ones[M, 1]^T @ dy, not dy^T @ ones: dy is then the moving operand,
        # read once where it lies, instead of the stationary one, copied on chip as a row
        # group's panel and read again for a one-column product. The same sums in the same
        # order (each column's fma chain over the rows of dy), 3-4x faster: [2048, 1024] fp32,
        # 2 threads, 0.84 -> 0.24 ms; [8192, 4096] 18.0 -> 4.9 ms (torch's dy.sum(0): 9.6 ms;
        # Intel Xeon, session 54).
        ones = dy.new_ones((dy.shape[0], 1))
        db = call("matmul", ones, dy, True).reshape(dy.shape[1])
    return dx, dw, db


_autograd(linear, _linear_backward, _linear_setup)


# ---- attention ---------------------------------------------------------------------------

@_op("attention")
def attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float,
              math: bool = False) -> tuple[Tensor, Tensor]:
    """Flash attention. math: the backward is the math path's (attention_math_backward, from
    the inputs and dout only: PyTorch's softmax backward, for the calls PyTorch runs on its
    math path), so the output is not saved for it."""
    grid = (q.shape[0], k.shape[1], q.shape[1] // k.shape[1])
    return _run("attention", "attention", grid, (q, k, v),
                {"causal": is_causal, "scale": scale},
                lambda: reference.attention(q, k, v, is_causal, scale))


@attention.register_fake
def _(q, k, v, is_causal, scale, math=False):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[3])), q.new_empty((b, h, n), dtype=torch.float32)


@_op("attention_bias")
def attention_bias(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, is_causal: bool,
                   scale: float, math: bool = False) -> tuple[Tensor, Tensor]:
    """attention with an additive fp32 bias [B or 1, Hq or 1, L or 1, S] on the scaled scores
    (functional.py makes it from attn_mask, and from the padding of a key count rounded up).
    The bias gets no gradient (functional.py falls back for a mask that requires one). math:
    as attention's."""
    grid = (q.shape[0], k.shape[1], q.shape[1] // k.shape[1])
    return _run("attention_bias", "attention_bias", grid, (q, k, v, bias),
                {"causal": is_causal, "scale": scale},
                lambda: reference.attention(q, k, v, is_causal, scale, bias))


@attention_bias.register_fake
def _(q, k, v, bias, is_causal, scale, math=False):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[3])), q.new_empty((b, h, n), dtype=torch.float32)


@_op("attention_backward")
def attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, lse: Tensor,
                       is_causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    def ref():
        return tuple(_grads(lambda q, k, v: reference.attention(q, k, v, is_causal, scale)[0],
                            (q, k, v), dout))
    return _run("attention_backward", "attention_backward", (q.shape[0], k.shape[1]),
                (q, k, v, out, dout, lse), {"causal": is_causal, "scale": scale}, ref)


@attention_backward.register_fake
def _(q, k, v, out, dout, lse, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@_op("attention_bias_backward")
def attention_bias_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor,
                            lse: Tensor, bias: Tensor, is_causal: bool,
                            scale: float) -> tuple[Tensor, Tensor, Tensor]:
    def ref():
        return tuple(_grads(
            lambda q, k, v: reference.attention(q, k, v, is_causal, scale, bias)[0], (q, k, v),
            dout))
    return _run("attention_bias_backward", "attention_bias_backward", (q.shape[0], k.shape[1]),
                (q, k, v, out, dout, lse, bias), {"causal": is_causal, "scale": scale}, ref)


@attention_bias_backward.register_fake
def _(q, k, v, out, dout, lse, bias, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@_op("attention_math_backward")
def attention_math_backward(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, is_causal: bool,
                            scale: float) -> tuple[Tensor, Tensor, Tensor]:
    def ref():
        return tuple(_grads(lambda q, k, v: reference.attention(q, k, v, is_causal, scale)[0],
                            (q, k, v), dout))
    return _run("attention_math_backward", "attention_math_backward",
                (q.shape[0], k.shape[1]), (q, k, v, dout),
                {"causal": is_causal, "scale": scale}, ref)


@attention_math_backward.register_fake
def _(q, k, v, dout, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@_op("attention_bias_math_backward")
def attention_bias_math_backward(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, bias: Tensor,
                                 is_causal: bool,
                                 scale: float) -> tuple[Tensor, Tensor, Tensor]:
    def ref():
        return tuple(_grads(
            lambda q, k, v: reference.attention(q, k, v, is_causal, scale, bias)[0], (q, k, v),
            dout))
    return _run("attention_bias_math_backward", "attention_bias_math_backward",
                (q.shape[0], k.shape[1]), (q, k, v, dout, bias),
                {"causal": is_causal, "scale": scale}, ref)


@attention_bias_math_backward.register_fake
def _(q, k, v, dout, bias, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention_setup(ctx, inputs, output):
    q, k, v, *bias, is_causal, scale, math = inputs  # (attention_bias: one bias)
    out, lse = output
    # The math backward reads neither out nor lse: the caller may write the output in place,
    # as it may PyTorch's math path's.
    ctx.save_for_backward(q, k, v, *((None, None) if math else (out, lse)), *bias)
    ctx.is_causal, ctx.scale, ctx.math = is_causal, scale, math
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, dout, _dlse):
    q, k, v, out, lse, *bias = ctx.saved_tensors
    dout = dout.contiguous()
    if ctx.math:
        args = (q, k, v, dout, *bias, ctx.is_causal, ctx.scale)
        dq, dk, dv = call("attention_bias_math_backward" if bias else "attention_math_backward",
                          *args)
    elif bias:
        dq, dk, dv = call("attention_bias_backward", q, k, v, out, dout, lse, bias[0],
                          ctx.is_causal, ctx.scale)
    else:
        dq, dk, dv = call("attention_backward", q, k, v, out, dout, lse, ctx.is_causal,
                          ctx.scale)
    return (dq, dk, dv) + (None,) * (len(bias) + 3)


_autograd(attention, _attention_backward, _attention_setup)
_autograd(attention_bias, _attention_backward, _attention_setup)


# ---- softmax -----------------------------------------------------------------------------

@_op("softmax")
def softmax(x: Tensor) -> Tensor:
    p = _row_programs(x)
    return _run("softmax", "softmax", (p,), (x,), {"programs": p},
                lambda: torch.softmax(x, -1))


@softmax.register_fake
def _(x):
    return torch.empty_like(x)


@_op("softmax_backward")
def softmax_backward(y: Tensor, dy: Tensor) -> Tensor:
    # Half the forward's work a program: softmax_backward [16, 32000] one row a program runs
    # in 75-112 us against 113-124 at two (2 threads, Zen 4; [32, 16384] 97 against 114).
    p = _row_programs(y, min_elements=16384)
    return _run("softmax_backward", "softmax_backward", (p,), (y, dy), {"programs": p},
                lambda: y * (dy - (dy * y).sum(-1, keepdim=True)))


@softmax_backward.register_fake
def _(y, dy):
    return torch.empty_like(dy)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    if torch.is_grad_enabled():  # a second derivative will follow (_second_order)
        return y * (dy - (dy * y).sum(-1, keepdim=True))
    return call("softmax_backward", y, dy.contiguous())


_autograd(softmax, _softmax_grad, _softmax_setup)


# ---- rms_norm, layer_norm over the last axis of x [R, D] ---------------------------------
# The forwards return their row statistics ([R, 1] fp32: layer_norm's mean, and rstd), which
# autograd saves and the backward kernels read instead of recomputing them from x.

def _norm(base, x, weight, bias, eps, ref):
    # The registered variants: base, base_weight (a weight), base_affine (weight and bias).
    p = _row_programs(x)
    variant = base if weight is None else base + ("_weight" if bias is None else "_affine")
    tensors = tuple(t for t in (x, weight, bias) if t is not None)
    return _run(base, variant, (p,), tensors, {"eps": eps, "programs": p}, ref)


def _row_stats(x, eps, centred):
    """(mean, rstd) of the rows of x [R, D] in fp32 as [R, 1] columns (mean None for rms_norm):
    what the forward kernels return beside y, for the reference path."""
    xf = x.double()
    mean = xf.mean(-1, keepdim=True) if centred else None
    var = ((xf - mean) if centred else xf).square().mean(-1, keepdim=True)
    rstd = torch.rsqrt(var + eps).float()
    return (mean.float(), rstd) if centred else (rstd,)


def _stats_fake(x, n):
    return tuple(x.new_empty((x.shape[0], 1), dtype=torch.float32) for _ in range(n))


def _norm_backward(base, x, weight, stats, dy, n_param_grads, ref):
    """dx and n_param_grads parameter gradients (the kernel's per-program fp32 rows summed, in
    the weight's dtype; empty tensors without a weight), from the forward's row statistics.
    ref returns what the kernel does: dx alone without a weight, else dx and the parameter
    gradients."""
    p = _row_programs(x)
    params = {"programs": p}
    if weight is None:
        dx = _run(base + "_backward", base + "_backward", (p,), (x,) + stats + (dy,), params, ref)
        return (dx,) + tuple(x.new_empty(0) for _ in range(n_param_grads))
    dx, *grads = _run(base + "_backward", base + "_weight_backward", (p,),
                      (x, weight) + stats + (dy,), params, ref)
    return (dx,) + tuple((g if g.dim() == 1 else g.sum(0)).to(weight.dtype) for g in grads)


@_op("rms_norm")
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor]:
    return _norm("rms_norm", x, weight, None, eps,
                 lambda: (reference.rms_norm(x, weight, eps),) + _row_stats(x, eps, False))


@rms_norm.register_fake
def _(x, weight, eps):
    return (torch.empty_like(x),) + _stats_fake(x, 1)


@_op("rms_norm_backward")
def rms_norm_backward(x: Tensor, weight: Optional[Tensor], rstd: Tensor, dy: Tensor,
                      eps: float) -> tuple[Tensor, Tensor]:
    def ref():
        grads = _grads(lambda x, w: reference.rms_norm(x, w, eps), (x, weight), dy)
        return grads[0] if weight is None else tuple(grads)
    return _norm_backward("rms_norm", x, weight, (rstd,), dy, 1, ref)


@rms_norm_backward.register_fake
def _(x, weight, rstd, dy, eps):
    return torch.empty_like(dy), (x.new_empty(0) if weight is None else torch.empty_like(weight))


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.eps = eps
    ctx.mark_non_differentiable(rstd)


def _rms_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    if torch.is_grad_enabled():  # a second derivative will follow (_second_order)
        dx, dw = _second_order(lambda x, w: reference.rms_norm(x, w, ctx.eps), (x, weight), dy)
        return dx, dw, None
    dx, dw = call("rms_norm_backward", x, weight, rstd, dy.contiguous(), ctx.eps)
    return dx, (dw if weight is not None else None), None


_autograd(rms_norm, _rms_grad, _rms_setup)


@_op("layer_norm")
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
               eps: float) -> tuple[Tensor, Tensor, Tensor]:
    return _norm("layer_norm", x, weight, bias, eps,
                 lambda: (reference.layer_norm(x, weight, bias, eps),) + _row_stats(x, eps, True))


@layer_norm.register_fake
def _(x, weight, bias, eps):
    return (torch.empty_like(x),) + _stats_fake(x, 2)


@_op("layer_norm_backward")
def layer_norm_backward(x: Tensor, weight: Optional[Tensor], mean: Tensor, rstd: Tensor,
                        dy: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    def ref():
        if weight is None:
            return _grads(lambda x: reference.layer_norm(x, None, None, eps), (x,), dy)[0]
        return tuple(_grads(lambda x, w, b: reference.layer_norm(x, w, b, eps),
                            (x, weight, torch.zeros_like(weight)), dy))
    return _norm_backward("layer_norm", x, weight, (mean, rstd), dy, 2, ref)


@layer_norm_backward.register_fake
def _(x, weight, mean, rstd, dy, eps):
    if weight is None:
        return torch.empty_like(dy), x.new_empty(0), x.new_empty(0)
    return torch.empty_like(dy), torch.empty_like(weight), torch.empty_like(weight)


def _ln_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.eps = eps
    ctx.mark_non_differentiable(mean, rstd)


def _ln_grad(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    if torch.is_grad_enabled():  # a second derivative will follow (_second_order)
        bias = torch.zeros_like(weight) if ctx.has_bias else None  # (its value is not used)
        dx, dw, db = _second_order(lambda x, w, b: reference.layer_norm(x, w, b, ctx.eps),
                                   (x, weight, bias), dy)
        return dx, dw, db, None
    dx, dw, db = call("layer_norm_backward", x, weight, mean, rstd, dy.contiguous(), ctx.eps)
    return (dx, dw if weight is not None else None, db if ctx.has_bias else None, None)


_autograd(layer_norm, _ln_grad, _ln_setup)


# ---- swiglu ------------------------------------------------------------------------------

@_op("swiglu")
def swiglu(x: Tensor) -> Tensor:
    p = _row_programs(x)
    return _run("swiglu", "swiglu", (p,), (x,), {"programs": p}, lambda: reference.swiglu(x))


@swiglu.register_fake
def _(x):
    return x.new_empty((x.shape[0], x.shape[1] // 2))


@_op("swiglu_backward")
def swiglu_backward(x: Tensor, dy: Tensor) -> Tensor:
    p = _row_programs(x)
    return _run("swiglu_backward", "swiglu_backward", (p,), (x, dy), {"programs": p},
                lambda: _grads(reference.swiglu, (x,), dy)[0])


@swiglu_backward.register_fake
def _(x, dy):
    return torch.empty_like(x)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _swiglu_grad(ctx, dy):
    (x,) = ctx.saved_tensors
    if torch.is_grad_enabled():  # a second derivative will follow (_second_order)
        return _second_order(reference.swiglu, (x,), dy)[0]
    return call("swiglu_backward", x, dy.contiguous())


_autograd(swiglu, _swiglu_grad, _swiglu_setup)


# ---- rope --------------------------------------------------------------------------------

@_op("rope")
def rope(x: Tensor, cos: Tensor, sin: Tensor, inverse: bool = False) -> Tensor:
    return _run("rope", "rope", (x.shape[0], x.shape[1]), (x, cos, sin), {"backward": inverse},
                lambda: reference.rope(x, cos, -sin if inverse else sin))


@rope.register_fake
def _(x, cos, sin, inverse=False):
    return torch.empty_like(x)


def _rope_setup(ctx, inputs, output):
    x, cos, sin, inverse = inputs
    ctx.save_for_backward(cos, sin)
    ctx.inverse = inverse


def _rope_grad(ctx, dy):
    # The rotation is orthogonal: its gradient is the inverse rotation. cos and sin are
    # constants here (functional.rope falls back to PyTorch when they require grad).
    cos, sin = ctx.saved_tensors
    return call("rope", dy.contiguous(), cos, sin, not ctx.inverse), None, None, None


_autograd(rope, _rope_grad, _rope_setup)


def default_scale(head_dim):
    """scaled_dot_product_attention's default scale, 1 / sqrt(E)."""
    return 1.0 / math.sqrt(head_dim)
