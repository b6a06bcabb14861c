"""The dense fallback for mods the tracer cannot express: FLEX.md's reference semantics with
plain torch operations (memory B*H*L*S), differentiable by torch autograd."""
import math

import torch


def attention(q, k, v, score_mod, mask_mod, block_dense, scale, blocks):
    """block_dense: [Bm, Hm, nQ, nK] 0/1 computed blocks or None; blocks: (QB, KB)."""
    wd = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Hq, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    kx = k.to(wd).repeat_interleave(G, dim=1)
    vx = v.to(wd).repeat_interleave(G, dim=1)
    s = torch.matmul(q.to(wd), kx.transpose(-1, -2)) * scale
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(Hq).view(1, Hq, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    if score_mod is not None:
        s = torch.as_tensor(score_mod(s, b, h, qi, ki)).to(wd)
    keep = torch.ones((), dtype=torch.bool)
    if mask_mod is not None:
        keep = torch.as_tensor(mask_mod(b, h, qi, ki)).to(torch.bool)
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
