"""PyTorch's own functions, captured when neuron.ops is imported (before patch() can replace
torch.nn.functional's names), and the reference math of the operators that PyTorch has no
function for. Fallbacks and the operators' references call these, never torch.nn.functional's
names (which may be ours while patched)."""
import types

import torch
import torch.nn.functional as F

# The originals, by torch.nn.functional name.
original = types.SimpleNamespace(
    scaled_dot_product_attention=F.scaled_dot_product_attention, linear=F.linear,
    rms_norm=F.rms_norm, layer_norm=F.layer_norm, softmax=F.softmax)


def _attention(q, k, v, is_causal, scale, bias=None):
    """(out, lse) of attention over [B, Hq, L, E] / [B, Hkv, S, E|Ev], GQA by repeating kv
    heads, an additive bias (broadcast to [B, Hq, L, S]) on the scaled scores; the math in
    fp32 (float64 for float64), results in q's dtype."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.to(acc)
    if is_causal:
        L, S = s.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = (torch.softmax(s, -1) @ v.to(acc)).to(q.dtype)
    return out, lse.to(torch.float32)


def _rope(x, cos, sin):
    """Rotate-half rotary embedding of x [..., L, D] by cos, sin [L, D/2]."""
    h = x.shape[-1] // 2
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    x1, x2 = x[..., :h].to(acc), x[..., h:].to(acc)
    c, s = cos.to(acc), sin.to(acc)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)


def _swiglu(x):
    """silu(a) * b for x = [a | b] split in halves along the last axis."""
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b


reference = types.SimpleNamespace(
    linear=original.linear,
    attention=_attention,
    rms_norm=lambda x, w, eps: original.rms_norm(x, x.shape[-1:], w, eps),
    layer_norm=lambda x, w, b, eps: original.layer_norm(x, x.shape[-1:], w, b, eps),
    swiglu=_swiglu,
    rope=_rope,
)
