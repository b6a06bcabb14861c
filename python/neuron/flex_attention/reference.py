"""The dense fallback for mods the tracer cannot express: FLEX.md's reference semantics with
plain torch operations (memory B*H*L*S), differentiable by torch autograd. The mods are called
as PyTorch's eager flex_attention calls them: once per element, vectorized by torch.vmap over
kv_idx, q_idx, h and b (0-dim index tensors; `t[idx]` of a captured tensor an index), so a mod
that works there (torch.dot of captured rows, `interval = intervals[i]; interval[0]`) works
here."""
import contextlib
import math

import torch

# (b, h, q_idx, kv_idx) in_dims of each vmap level, innermost (kv_idx) first
_BHQKV = ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None),
          (0, None, None, None))


def vmapped(mod, score):
    """mod(score, b, h, q, kv) (score=True) or mod(b, h, q, kv) for 1-D index tensors b, h, q,
    kv (and a [B, H, L, S] score): [B, H, L, S], the mod applied to each element."""
    fn = mod
    for dims in _BHQKV:
        fn = torch.vmap(fn, in_dims=((0,) if score else ()) + dims, out_dims=0)
    return fn


def getitem_as_index():
    """PyTorch's context that makes `t[i]` with a tensor i an index op under vmap (as its
    eager flex_attention does), or nothing where this private helper is gone."""
    try:
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
        return TransformGetItemToIndex()
    except ImportError:
        return contextlib.nullcontext()


def mod_values(mod, score, *args):
    """The mod's values over the grid of 1-D index tensors args[-4:] (a [B, H, L, S] tensor,
    broadcast if the mod returned a number)."""
    B, H, L, S = (a.numel() for a in args[-4:])
    if 0 in (B, H, L, S):  # nothing to call it on (vmap cannot map a size-0 dim)
        return args[0] * 0 if score else torch.zeros(B, H, L, S, dtype=torch.bool)
    with getitem_as_index():
        out = vmapped(mod, score)(*args)
    return torch.broadcast_to(torch.as_tensor(out), (B, H, L, S))


def attention(q, k, v, score_mod, mask_mod, block_dense, scale, blocks):
    """block_dense: [Bm, Hm, nQ, nK] 0/1 computed blocks or None; blocks: (QB, KB)."""
    wd = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Hq, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    kx = k.to(wd).repeat_interleave(G, dim=1)
    vx = v.to(wd).repeat_interleave(G, dim=1)
    s = torch.matmul(q.to(wd), kx.transpose(-1, -2)) * scale
    idx = (torch.arange(B), torch.arange(Hq), torch.arange(L), torch.arange(S))
    if score_mod is not None:
        s = mod_values(score_mod, True, s, *idx).to(wd)
    keep = torch.ones((), dtype=torch.bool)
    if mask_mod is not None:
        keep = mod_values(mask_mod, False, *idx).to(torch.bool)
    if block_dense is not None:
        QB, KB = blocks
        bd = block_dense.bool().repeat_interleave(QB, -2).repeat_interleave(KB, -1)
        keep = keep & bd[..., :L, :S]
    s = torch.where(keep, s, torch.tensor(-math.inf, dtype=wd))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), 0.0, m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    seen = l != 0  # (a NaN score makes l NaN: the row is NaN, as in PyTorch, not empty)
    out = torch.matmul(p / torch.where(seen, l, 1.0), vx)
    lse = torch.where(seen, torch.log(torch.where(seen, l, 1.0)) + m, -math.inf).squeeze(-1)
    mx = s.amax(-1)
    return out.to(q.dtype), lse, mx.detach()
