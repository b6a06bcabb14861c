"""The drop-ins: PyTorch's signatures and semantics, computed by the kernel library through the
torch.ops.neuron operators (_operators.py) on CPU tensors of float32, bfloat16 or float16, with
any leading (batch) dimensions and any sizes.

Arguments a kernel does not support (listed in each function's doc) fall back to PyTorch's own
function by DESIGN.md's rule: a FallbackWarning naming the reason the first time, a count in
neuron.torch.fallback_counts() under ("neuron.ops.<name>", kind), or a NeuronError
"unsupported-input" in strict mode (NEURON_STRICT=1 or neuron.ops.strict()). Calls PyTorch
itself rejects (mismatched shapes, a 1-D input to attention) go straight to PyTorch, so its own
error is what the caller sees."""
import math
import sys

import torch
from torch.autograd import forward_ad as _forward_ad

from ..torch import note_fallback
from . import _kernels, _operators, _shapes  # _operators registers torch.ops.neuron.*
from ._reference import original, reference

__all__ = ["scaled_dot_product_attention", "linear", "rms_norm", "layer_norm", "softmax",
           "swiglu", "rope"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_HEAD_DIM = 512  # attention head dims (kernels/attention.hpp kMaxHeadDim: a PSUM bank of fp32)


def _reshaped(t, shape):
    """t.reshape(shape), or t itself when it has that shape already: a reshape to the same
    shape is still a view, and each view is an autograd node (~11 us of a training step)."""
    same = (len(shape) == t.dim() and t.shape[1:] == shape[1:]
            and (shape[0] == -1 or shape[0] == t.shape[0]))
    return t if same else t.reshape(shape)


def _problem(tensors):
    """Why these tensors cannot go to a kernel, as (kind, reason), or None. Meta tensors go
    through (the operators' fake implementations give their shapes)."""
    if torch._C._get_tracing_state() is not None:  # torch.jit.trace
        return "jit-trace", ("torch.jit.trace records aten operators only, and the kernels run "
                             "outside them: the trace would hold uninitialised outputs")
    if _forward_ad._current_level >= 0 and any(  # (one int test when no dual level is open)
            t is not None and _forward_ad.unpack_dual(t).tangent is not None
            for t in tensors.values()):
        return "forward-ad", ("forward-mode AD (torch.func.jvp / jacfwd, forward_ad dual "
                              "tensors): the kernels have no forward derivative, and the "
                              "tangent would be dropped")
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not (t.is_cpu or t.is_meta):  # (not t.device.type: it builds a device object)
            return "device", f"{name} is on {t.device}; neuron kernels run on CPU tensors"
        if t.dtype not in _DTYPES:
            return "dtype", (f"{name} is {t.dtype}; the kernels take float32, bfloat16 or "
                             "float16")
        if t.numel() == 0:
            return "empty", f"{name} has no elements (shape {tuple(t.shape)})"
        first = t.dtype if first is None else first
    if any(t is not None and t.dtype != first for t in tensors.values()):
        return "dtype", "the tensors' dtypes differ: " + ", ".join(
            f"{n} {t.dtype}" for n, t in tensors.items() if t is not None)
    return None


def _autocast(*tensors):
    """The tensors as torch.autocast("cpu") hands them to linear and attention, PyTorch's
    lower-precision ops there: floating tensors in the autocast dtype (None and others as
    they are); the tensors themselves when no CPU autocast region is open."""
    if not torch.is_autocast_enabled("cpu"):
        return tensors
    dt = torch.get_autocast_dtype("cpu")
    return tuple(t.to(dt) if isinstance(t, torch.Tensor) and t.is_cpu and
                 t.is_floating_point() and t.dtype != dt else t for t in tensors)


def _fall_back(fn, kind, reason, call):
    """PyTorch's result for an argument the kernels do not support (DESIGN.md's rule)."""
    if torch.compiler.is_compiling():
        _note_while_tracing(f"neuron.ops.{fn}", kind, reason)
    else:
        note_fallback(f"neuron.ops.{fn}", kind, reason, strict=_kernels.strict,
                      hint=" (strict mode: no fallback to PyTorch)", stacklevel=3)
    return call()


@torch.compiler.assume_constant_result
def _note_while_tracing(op, kind, reason):
    """Under torch.compile, a fallback is noted (warned, counted, or raised in strict mode) once,
    when Dynamo traces the call: Dynamo runs this function then instead of tracing it (it cannot
    trace the bookkeeping), and the graph calls PyTorch's function on every run."""
    note_fallback(op, kind, reason, strict=_kernels.strict,
                  hint=" (strict mode: no fallback to PyTorch)", stacklevel=3)
    return True


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention on the flash attention kernels
    (forward, and backward from the saved logsumexp). query (..., Hq, L, E), key (..., Hkv, S,
    E), value (..., Hkv, S, Ev), the same leading dims; E, Ev <= 512; Hq == Hkv, or a multiple
    with enable_gqa=True. is_causal masks top-left aligned as PyTorch does (key j visible to
    query i when j <= i). An attn_mask (bool, or float added to the scaled scores) broadcast
    to (..., Hq, L, S) runs on the masked kernels. Key and query counts that change between
    calls round up to buckets (_shapes.py), the padding masked, so a decode loop does not
    compile a kernel per step. Falls back to PyTorch for a float attn_mask that requires grad,
    a mask with is_causal=True, a float mask hiding whole rows with finite values below -1000
    when gradients are needed (_huge_rows), dropout_p > 0, head dims over 512, broadcast
    leading dims, other dtypes and devices."""
    def torch_sdpa():
        kw = {"enable_gqa": True} if enable_gqa else {}
        return original.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                                                     is_causal, scale=scale, **kw)

    causal_bias = _causal_bias_kind(attn_mask)
    if causal_bias is not None:
        # torch.nn.attention.bias.CausalBias (causal_upper_left / causal_lower_right) stands for
        # a mask it never stores: as its own __torch_function__ dispatches it (ours received it
        # as a tensor of garbage), upper left (or a square one) is is_causal=True, lower right
        # its materialized mask, and is_causal=True with it PyTorch's ValueError.
        if is_causal:
            raise ValueError("CausalBias should not be used with causal=True")
        upper = causal_bias == "upper"
        return scaled_dot_product_attention(
            query, key, value, None if upper else attn_mask._materialize(query.device),
            dropout_p, upper, scale=scale, enable_gqa=enable_gqa)
    q, k, v = query, key, value
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or \
            min(q.dim(), k.dim(), v.dim()) < 3 or not (q.dim() == k.dim() == v.dim()) or \
            not isinstance(is_causal, bool):
        return torch_sdpa()  # PyTorch decides (and names what is wrong)
    hq, hk = q.shape[-3], k.shape[-3]
    if (hq != hk and not (enable_gqa and hq % hk == 0)) or k.shape[-1] != q.shape[-1] or \
            v.shape[-2] != k.shape[-2] or v.shape[-3] != hk:
        return torch_sdpa()
    name = "scaled_dot_product_attention"
    q, k, v, attn_mask = _autocast(q, k, v, attn_mask)
    query, key, value = q, k, v  # (torch_sdpa's arguments too)
    grad = torch.is_grad_enabled()
    if attn_mask is not None and grad and getattr(attn_mask, "requires_grad", False):
        return _fall_back(name, "mask", "attn_mask requires grad: the masked kernel gives "
                          "no gradient to its mask", torch_sdpa)
    if attn_mask is not None and is_causal:
        # PyTorch's backends disagree: its math path raises, its flash path applies both.
        return _fall_back(name, "mask", "attn_mask with is_causal=True: PyTorch decides",
                          torch_sdpa)
    if not 0 <= dropout_p <= 1:
        return torch_sdpa()  # PyTorch's error
    if dropout_p > 0:
        return _fall_back(name, "dropout", f"dropout_p={dropout_p}; the kernels have no dropout",
                          torch_sdpa)
    if scale is not None and not (float(scale) > 0 and math.isfinite(float(scale))):
        # The kernels' online softmax takes the row maximum of the scaled scores as the maximum
        # of the scores: a positive scale (0 would also read as "the default" there).
        return _fall_back(name, "scale", f"scale={scale}; the kernels take a positive, finite "
                          "scale", torch_sdpa)
    problem = _problem({"query": q, "key": k, "value": v})
    if problem:
        return _fall_back(name, *problem, torch_sdpa)
    if q.shape[:-3] != k.shape[:-3] or q.shape[:-3] != v.shape[:-3]:
        return _fall_back(name, "shape", f"leading dims differ (query {tuple(q.shape)}, key "
                          f"{tuple(k.shape)}, value {tuple(v.shape)}): PyTorch broadcasts them",
                          torch_sdpa)
    e, ev = q.shape[-1], v.shape[-1]
    if e > MAX_HEAD_DIM or ev > MAX_HEAD_DIM:
        return _fall_back(name, "shape", f"head dims {e} and {ev}; the kernels take at most "
                          f"{MAX_HEAD_DIM}", torch_sdpa)
    dtype = q.dtype
    math_path = bool(_torch_uses_math(q, k, v, attn_mask, is_causal, scale, enable_gqa))
    if math_path and dtype != torch.float32:
        # PyTorch's math path computes 16-bit attention in float32 (rounding the inputs'
        # gradients and the output once); its flash kernel, which ours follows, rounds the
        # probabilities to 16 bits. Where PyTorch takes the math path, so do the kernels,
        # and the backward is its softmax's (attention_math_backward: where the softmax
        # saturates the flash backward had up to 23x PyTorch's dq error).
        q, k, v = q.float(), k.float(), v.float()
    lead = q.shape[:-3]
    L, S = q.shape[-2], k.shape[-2]
    bias = None
    if attn_mask is not None:
        bias = _mask_bias(attn_mask, q, lead, hq, L, S)
        if bias is None:
            return torch_sdpa()  # PyTorch decides (its error for a mask that does not fit)
        if grad and (q.requires_grad or k.requires_grad or v.requires_grad) and \
                attn_mask.dtype != torch.bool and _huge_rows(bias):
            return _fall_back(name, "mask", "a row of attn_mask hides every key with a finite "
                              "value below -1000 (finfo.min padding) and gradients are needed: "
                              "the kernels' backward recovers the probabilities from the "
                              "logsumexp, which loses such a row's sum", torch_sdpa)
    q4 = _reshaped(q, (-1, hq, L, e)).contiguous()
    k4 = _reshaped(k, (-1, hk, S, e)).contiguous()
    v4 = _reshaped(v, (-1, hk, S, ev)).contiguous()
    s = _operators.default_scale(e) if scale is None else float(scale)
    g = hq // hk
    rows = L
    if g > 1 and g * L <= 128 and not is_causal:
        # A decode step's few queries: the kv head's group of query heads as the rows of one
        # query tile, so each program reads and transposes its K and V once, not once per
        # query head (rows stay independent: the same bits).
        rows = g * L
        q4 = q4.reshape(q4.shape[0], hk, rows, e)
        if bias is not None and bias.shape[1:3] != (1, 1):
            bias = bias.expand(bias.shape[0], hq, L, S).reshape(bias.shape[0], hk, rows, S)
    q4, k4, v4, bias = _bucketed(q4, k4, v4, bias, bool(is_causal))
    if bias is None:
        out, _ = _operators.call("attention", q4, k4, v4, bool(is_causal), s, math_path)
    else:
        out, _ = _operators.call("attention_bias", q4, k4, v4, bias, bool(is_causal), s,
                                 math_path)
    if out.shape[2] != rows:
        out = out[:, :, :rows].contiguous()
    return _reshaped(out, (*lead, hq, L, ev)).to(dtype)


def _causal_bias_kind(mask):
    """"upper" / "lower" for a torch.nn.attention.bias.CausalBias mask (square ones are
    "upper", as PyTorch treats them), else None. (Its module is loaded if such a mask exists.)"""
    bias = sys.modules.get("torch.nn.attention.bias")
    if bias is None or not isinstance(mask, bias.CausalBias):
        return None
    square = mask.seq_len_q == mask.seq_len_kv
    return "upper" if square or mask.variant == bias.CausalVariant.UPPER_LEFT else "lower"


@torch.compiler.assume_constant_result
def _torch_uses_math(q, k, v, attn_mask, is_causal, scale, enable_gqa):
    """Whether PyTorch's CPU attention takes its math path for this call rather than its flash
    kernel (head dims E != Ev, inputs not 4-D, a 3-D mask over 4-D inputs, ...): its own
    choice, asked of torch._fused_sdp_choice (a microsecond), or by the head dims and rank if
    that private function is gone or refuses. A constant while torch.compile traces (Dynamo
    runs it on the example inputs: a call returning no tensor would break the graph)."""
    try:
        return torch._fused_sdp_choice(q, k, v, attn_mask, 0.0, is_causal, scale=scale,
                                       enable_gqa=enable_gqa) == _SDP_MATH
    except (AttributeError, RuntimeError, TypeError):
        return q.dim() != 4 or q.shape[-1] != v.shape[-1]


_SDP_MATH = int(torch.nn.attention.SDPBackend.MATH)


def _rows(op, x, *sig):
    """(x, rows): x [R, C] with rows appended up to _shapes' bucket of R once the row count
    of `op` is dynamic for these columns, dtype and `sig` (a server's prompt lengths: each new
    one would compile the op's kernel); the caller keeps the first `rows` rows of the result.
    Rows do not mix in these kernels, so the real rows keep their bits, and their gradients
    flow through the padding."""
    r = x.shape[0]
    rb = _shapes.size((op, tuple(x.shape[1:]), x.dtype) + sig, r)
    if rb == r:
        return x, r
    # Copies of the last row, not zeros: a norm with eps=0 divides by a zero row's variance,
    # and its NaN would reach the weight's gradient (a sum over rows).
    return torch.cat([x, x[-1:].expand(rb - r, *x.shape[1:])]), r


def _cut(y, rows):
    """y's first `rows` rows (y itself when it has no more: a slice is an autograd node)."""
    return y if y.shape[0] == rows else y[:rows]


def _mask_bias(mask, q, lead, hq, L, S):
    """sdpa's attn_mask as the masked kernel's bias: fp32 [B or 1, Hq or 1, L or 1, S] (a dim
    the mask broadcasts, by size 1 or stride 0, stays 1), 0 / -inf for a bool mask; None for a
    mask PyTorch should judge (a dtype other than bool, float32 and q's, a shape that does not
    broadcast)."""
    if not isinstance(mask, torch.Tensor) or not 2 <= mask.dim() <= len(lead) + 3 or \
            mask.dtype not in (torch.bool, torch.float32, q.dtype) or mask.device != q.device:
        return None
    try:
        m = mask.reshape((1,) * (len(lead) + 3 - mask.dim()) + tuple(mask.shape))
        m = m.expand(*lead, hq, L, S)
    except RuntimeError:
        return None
    if hq == 1 or m.stride(-3) == 0:
        m = m[..., :1, :, :]
    if L == 1 or m.stride(-2) == 0:
        m = m[..., :1, :]
    n = len(lead)
    if all(m.shape[i] == 1 or m.stride(i) == 0 for i in range(n)):
        m = m[(0,) * n].unsqueeze(0)
    else:
        m = m.reshape(-1, *m.shape[n:])
    if m.dtype == torch.bool:
        return torch.where(m, 0.0, float("-inf")).to(torch.float32).contiguous()
    return m.to(torch.float32).contiguous()


def _huge_rows(bias):
    """Whether some row of the bias has no key above -1000 but a finite one: its scores are so
    large in magnitude that logsumexp = max + log(sum) rounds the log away (exp(0) = 1 per key
    in the backward, gradients S times too large). Rows hidden by -inf are exact (p = 0)."""
    top = bias.amax(-1)
    return bool(((top < -1000.0) & torch.isfinite(top)).any())


def _bucketed(q, k, v, bias, causal):
    """q, k, v, bias with the key count, and the query count, rounded up to _shapes' buckets
    once it has changed between calls of this signature (a decode loop's growing KV cache, a
    server's prompt lengths): zero keys hidden by -inf in the bias (which then exists), zero
    queries whose output rows the caller drops. Visible scores keep their values, and hidden
    keys add exp(-inf) = 0, so the real rows equal the unpadded call's up to the masked
    kernel's rounding (its softmax runs on scale * s + bias)."""
    B, hq, L, e = q.shape
    hk, S, ev = k.shape[1], k.shape[2], v.shape[3]
    sig = (B, hq, hk, e, ev, q.dtype, causal, None if bias is None else bias.shape[:2])
    Sb = _shapes.size(("attention keys",) + sig, S)
    Lb = _shapes.size(("attention queries",) + sig, L)
    if Sb != S:
        k = torch.nn.functional.pad(k, (0, 0, 0, Sb - S))
        v = torch.nn.functional.pad(v, (0, 0, 0, Sb - S))
        if bias is None:
            bias = torch.zeros(1, 1, 1, S, dtype=torch.float32, device=q.device)
        bias = torch.nn.functional.pad(bias, (0, Sb - S), value=float("-inf"))
    if Lb != L:
        q = torch.nn.functional.pad(q, (0, 0, 0, Lb - L))
        if bias is not None and bias.shape[2] == L and L > 1:
            bias = torch.nn.functional.pad(bias, (0, 0, 0, Lb - L))
    return q, k, v, bias


def linear(input, weight, bias=None):
    """torch.nn.functional.linear: input (..., K) @ weight (N, K).T + bias (N), on the matmul
    kernel (fp32 accumulation), backward too; a 1-D weight (K) without bias gives input @ weight
    (the last dim dropped, as PyTorch). Falls back to PyTorch for other dtypes (or mixed ones)
    and devices."""
    def torch_linear():
        return original.linear(input, weight, bias)

    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor) or \
            input.dim() == 0 or weight.dim() not in (1, 2) or \
            input.shape[-1] != weight.shape[-1] or \
            (bias is not None and (not isinstance(bias, torch.Tensor) or bias.dim() > 1 or
                                   bias.numel() not in (1, weight.shape[0]))):
        return torch_linear()
    name = "linear"
    input, weight, bias = _autocast(input, weight, bias)
    if weight.dim() == 1:
        if bias is not None:
            return torch_linear()  # PyTorch rejects a bias with a 1-D weight: its own error
        return linear(input, weight.unsqueeze(0)).squeeze(-1)
    problem = _problem({"input": input, "weight": weight, "bias": bias})
    if problem:
        return _fall_back(name, *problem, torch_linear)
    n, k = weight.shape
    if bias is not None and tuple(bias.shape) != (n,):
        bias = bias.expand(n)  # a one-element bias broadcasts, as in PyTorch
    x, rows = _rows("linear", _reshaped(input, (-1, k)).contiguous(), weight.shape,
                    bias is None)
    y = _operators.call("linear", x, weight.contiguous(),
                        None if bias is None else bias.contiguous())
    return _reshaped(_cut(y, rows), (*input.shape[:-1], n))


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """torch.nn.functional.softmax along `dim` (any), forward and backward on the softmax
    kernels; with dtype, the input is cast first, as PyTorch does. Falls back to PyTorch for
    dim=None (PyTorch's implicit choice), 0-d inputs, other dtypes and devices."""
    def torch_softmax():
        return original.softmax(input, dim, _stacklevel, dtype)

    if not isinstance(input, torch.Tensor):
        return torch_softmax()
    name = "softmax"
    if dim is None:
        return _fall_back(name, "dim", "dim=None (PyTorch picks the dim, deprecated)",
                          torch_softmax)
    if input.dim() == 0:
        return _fall_back(name, "shape", "a 0-d input", torch_softmax)
    if not -input.dim() <= dim < input.dim():
        return torch_softmax()
    x = input if dtype is None else input.to(dtype)
    problem = _problem({"input": x})
    if problem:
        return _fall_back(name, *problem, torch_softmax)
    dim = dim % x.dim()
    last = dim == x.dim() - 1
    xt = (x if last else x.movedim(dim, -1)).contiguous()
    x2, rows = _rows("softmax", _reshaped(xt, (-1, xt.shape[-1])))
    y = _reshaped(_cut(_operators.call("softmax", x2), rows), xt.shape)
    if last:
        return y
    # Contiguous, as PyTorch returns it (a movedim view would refuse .view(...)).
    return y.movedim(-1, dim).contiguous()


def _normalized(input, normalized_shape, params):
    """(rows, D) for a norm over the trailing `normalized_shape`, or None when PyTorch would
    reject the call (then it gives its own error)."""
    if not isinstance(normalized_shape, (tuple, list, torch.Size)):
        return None  # PyTorch takes a sequence of ints only
    shape = tuple(int(d) for d in normalized_shape)
    if not shape or input.dim() < len(shape) or tuple(input.shape[-len(shape):]) != shape:
        return None
    if any(p is not None and tuple(p.shape) != shape for p in params):
        return None
    d = math.prod(shape)
    return input.numel() // d if d else 0, d


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm over the trailing normalized_shape: input * rsqrt(mean(
    input^2) + eps) (* weight); eps None is the epsilon of the dtype PyTorch computes in (its
    opmath type: float32 for bfloat16 / float16 inputs, so torch.finfo(torch.float32).eps).
    Statistics in fp32. Falls back to PyTorch for other dtypes and devices (the weight may be
    another float dtype)."""
    def torch_rms_norm():
        return original.rms_norm(input, normalized_shape, weight, eps)

    if not isinstance(input, torch.Tensor):
        return torch_rms_norm()
    rd = _normalized(input, normalized_shape, (weight,))
    if rd is None:
        return torch_rms_norm()
    problem = _problem({"input": input}) or (weight is not None and _problem({"weight": weight}))
    if problem:
        return _fall_back("rms_norm", *problem, torch_rms_norm)
    rows, d = rd
    # PyTorch's default is numeric_limits<opmath_t>::epsilon(): fp32's for 16-bit floats.
    opmath = torch.float32 if input.dtype in (torch.bfloat16, torch.float16) else input.dtype
    e = torch.finfo(opmath).eps if eps is None else float(eps)
    x, rows = _rows("rms_norm", _reshaped(input, (rows, d)).contiguous(), weight is None, e)
    y, _ = _operators.call("rms_norm", x,
                           None if weight is None else _reshaped(weight, (d,)).contiguous(), e)
    return _reshaped(_cut(y, rows), input.shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing normalized_shape: (input - mean) *
    rsqrt(var + eps) (* weight) (+ bias), the biased variance, statistics in fp32. Falls back
    to PyTorch for other dtypes and devices (weight and bias may be another float dtype)."""
    def torch_layer_norm():
        return original.layer_norm(input, normalized_shape, weight, bias, eps)

    if not isinstance(input, torch.Tensor):
        return torch_layer_norm()
    rd = _normalized(input, normalized_shape, (weight, bias))
    params = [p for p in (weight, bias) if p is not None]
    if rd is None or (any(p.dtype != input.dtype for p in params) and not (
            input.dtype in (torch.bfloat16, torch.float16)
            and all(p.dtype == torch.float32 for p in params))):
        # PyTorch's CPU rule: parameters of the input's dtype, or all float32 for a 16-bit
        # input; anything else is its own "mixed dtype" error.
        return torch_layer_norm()
    problem = _problem({"input": input}) or \
        (weight is not None and _problem({"weight": weight})) or \
        (bias is not None and _problem({"bias": bias}))
    if problem:
        return _fall_back("layer_norm", *problem, torch_layer_norm)
    rows, d = rd
    w = None if weight is None else _reshaped(weight, (d,)).contiguous()
    b = None if bias is None else _reshaped(bias, (d,)).contiguous()
    if b is not None and w is None:
        w = b.new_ones(d)  # the kernels take a bias with a weight
    x, rows = _rows("layer_norm", _reshaped(input, (rows, d)).contiguous(), w is None,
                    b is None, float(eps))
    y, _, _ = _operators.call("layer_norm", x, w, b, float(eps))
    return _reshaped(_cut(y, rows), input.shape)


def swiglu(input):
    """SwiGLU: silu(a) * b for input = [a | b], split in halves along the last dim: input
    (..., 2H) -> (..., H). The same as `a, b = input.chunk(2, -1); F.silu(a) * b`, fused into
    one kernel, forward and backward. Falls back to PyTorch for other dtypes and devices."""
    def torch_swiglu():
        return reference.swiglu(input)

    if not isinstance(input, torch.Tensor) or input.dim() == 0 or input.shape[-1] % 2:
        return torch_swiglu()  # PyTorch's chunk / multiply decide
    problem = _problem({"input": input})
    if problem:
        return _fall_back("swiglu", *problem, torch_swiglu)
    two_h = input.shape[-1]
    x, rows = _rows("swiglu", _reshaped(input, (-1, two_h)).contiguous())
    y = _operators.call("swiglu", x)
    return _reshaped(_cut(y, rows), (*input.shape[:-1], two_h // 2))


def rope(input, cos, sin):
    """Rotary position embedding, rotate-half convention (GPT-NeoX, Llama): for input (..., L,
    D) and cos, sin (L, D/2) (the angle of position l and frequency i), with x1, x2 the halves
    of the last dim,

        out = cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).

    (Models that store cos and sin duplicated to (L, D) pass cos[:, :D // 2].) The backward is
    the inverse rotation. cos and sin are constants: when they require grad, PyTorch's
    autograd of the same math runs instead (a fallback), as for other dtypes and devices."""
    def torch_rope():
        return reference.rope(input, cos, sin)

    if not all(isinstance(t, torch.Tensor) for t in (input, cos, sin)) or input.dim() < 2:
        return torch_rope()
    L, d = input.shape[-2:]
    if d % 2 or tuple(cos.shape) != (L, d // 2) or tuple(sin.shape) != (L, d // 2):
        return torch_rope()  # PyTorch's broadcasting decides
    name = "rope"
    if cos.requires_grad or sin.requires_grad:
        return _fall_back(name, "grad", "cos or sin requires grad; the kernel differentiates "
                          "input only", torch_rope)
    problem = _problem({"input": input}) or _problem({"cos": cos}) or _problem({"sin": sin})
    if problem:
        return _fall_back(name, *problem, torch_rope)
    x = _reshaped(input, (-1, 1, L, d)).contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    lb = _shapes.size(("rope", x.shape[0], d, x.dtype, cos.dtype), L)
    if lb != L:  # positions padded with zero rows, cut from the result
        x = torch.nn.functional.pad(x, (0, 0, 0, lb - L))
        cos, sin = (torch.nn.functional.pad(t, (0, 0, 0, lb - L)) for t in (cos, sin))
    y = _operators.call("rope", x, cos, sin)
    if y.shape[2] != L:
        y = y[:, :, :L].contiguous()
    return _reshaped(y, input.shape)
