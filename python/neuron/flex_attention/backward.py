"""Backward of the block-sparse attention: dq, dk, dv, the gradient through lse, and the
gradients of captured score_mod tensors that require grad.

Recomputes each chunk of the forward from the saved lse (flash-attention style, no L x S
matrix kept): p = exp(s' - lse) on kept positions, dp = dout @ v^T,
ds' = p * (dp - rowsum(dout * out) + dlse). The gradient through score_mod is the vector-
Jacobian product of the compiled graph, taken by torch autograd on the chunk (so it is derived
from the traced graph, not written by hand); it also yields the gradients of captured tensors.
dk and dv of a chunk are scattered back onto the key blocks they came from. A row that sees no
key has p = 0 everywhere: zero gradients, no NaN.
"""
import torch

from .forward import bmm, drop_subnormal_weights, masked


def backward(prob, out, lse, dout, dlse, grad_inputs):
    """out [B, Hq, L, Ev], lse [B, Hq, L] (working precision); dout / dlse may be None.
    grad_inputs: indices into prob.score_inputs that need gradients.
    Returns (dq, dk, dv, [d score_inputs[i] for i in grad_inputs])."""
    p_ = prob.plan
    B, Hkv, G, L, E, Ev = prob.B, prob.Hkv, prob.G, prob.L, prob.E, prob.Ev
    wd = prob.wd
    do = (torch.zeros(B, Hkv, G, L, Ev, dtype=wd) if dout is None
          else dout.to(wd).reshape(B, Hkv, G, L, Ev))
    o = out.to(wd).reshape(B, Hkv, G, L, Ev)
    lse = lse.to(wd).reshape(B, Hkv, G, L)
    dl = None if dlse is None else dlse.to(wd).reshape(B, Hkv, G, L)
    delta = (do * o).sum(-1)
    lse_safe = torch.where(torch.isneginf(lse), 0.0, lse)
    dq = torch.zeros(B, Hkv, G, L, E, dtype=wd)
    dkb = torch.zeros_like(prob.kb)
    dvb = torch.zeros_like(prob.vb)
    leaves = [t.detach().to(wd).requires_grad_(i in grad_inputs)
              if t.is_floating_point() else t
              for i, t in enumerate(prob.score_inputs)]
    d_inputs = [torch.zeros_like(leaves[i]) for i in grad_inputs]
    need_graph = prob.score_fn is not None
    for i, chunks in enumerate(p_.rows):
        q0 = i * p_.QB
        qr = min(p_.QB, L - q0)
        if qr <= 0:
            break
        qi = prob.qw[..., q0:q0 + qr, :]
        doi = do[..., q0:q0 + qr, :]
        rows = slice(q0, q0 + qr)
        corr = delta[..., rows] if dl is None else delta[..., rows] - dl[..., rows]
        for ch in chunks:
            kc = prob.kv_chunk(ch, "k")
            vc = prob.kv_chunk(ch, "v")
            with torch.enable_grad():
                raw = bmm(qi, kc, transpose=True).mul_(prob.scale).detach()
                if need_graph:
                    raw.requires_grad_(True)
                _, s, keep = prob.scores(qi, q0, ch, kc, score_inputs=leaves, raw=raw)
            s_d = s.detach()
            lse_rows = lse_safe[..., rows]
            x = masked(s_d, keep) - lse_rows.unsqueeze(-1)
            p = drop_subnormal_weights(x, s_d.amin() - lse_rows.max()).exp_()
            if keep is not None:
                p = torch.where(keep, p, 0.0)
            dp = bmm(doi, vc, transpose=True)
            ds = p * (dp - corr.unsqueeze(-1))
            if need_graph and (s.requires_grad):
                # Captured tensors take their gradients from kept positions only (masked
                # and padding ones: a separate evaluation, kept_scores).
                split = keep is not None and grad_inputs
                wrt = [raw] + ([] if split else [leaves[j] for j in grad_inputs])
                grads = torch.autograd.grad(s, wrt, ds, allow_unused=True)
                ds_raw = grads[0] if grads[0] is not None else torch.zeros_like(raw)
                if split:
                    with torch.enable_grad():
                        s_kept, kept = prob.kept_scores(raw.detach(), q0, ch, keep, leaves)
                    grads = (None,) + (torch.autograd.grad(
                        s_kept, [leaves[j] for j in grad_inputs], ds.expand(kept.shape)[kept],
                        allow_unused=True) if s_kept.requires_grad else ())
                for n, g in enumerate(grads[1:]):
                    if g is not None:
                        d_inputs[n] += g
            elif need_graph:
                ds_raw = torch.zeros_like(ds)  # score_mod ignores the score: no dq, dk
            else:
                ds_raw = ds
            if keep is not None and need_graph:
                # Masked positions (and the padding of the last key block) get no gradient,
                # as through PyTorch's where(): 0 * inf from the mod's vjp must not become NaN.
                ds_raw = torch.where(keep, ds_raw, 0.0)
            ds_raw = ds_raw * prob.scale
            dq[..., rows, :] += bmm(ds_raw, kc)
            _scatter(prob, ch, dkb, torch.matmul(ds_raw.transpose(-1, -2), qi))
            _scatter(prob, ch, dvb, torch.matmul(p.transpose(-1, -2), doi))
    S = prob.S
    dk = dkb.reshape(prob.Bk, Hkv, -1, E)[:, :, :S]
    dv = dvb.reshape(prob.Bk, Hkv, -1, Ev)[:, :, :S]
    return (dq.reshape(B, prob.Hq, L, E), dk, dv, d_inputs)


def _scatter(prob, ch, dst, val):
    """Adds a chunk's [B, Hkv, G, C*KB, D] gradient onto the key blocks it read."""
    C, KB = ch.count, prob.plan.KB
    D = val.shape[-1]
    Gm = 1 if ch.idx is None else ch.idx.shape[2]
    if val.shape[2] != Gm:
        val = val.sum(2, keepdim=True)
    if prob.Bk == 1 and val.shape[0] != 1 and (ch.idx is None or ch.idx.shape[0] == 1):
        val = val.sum(0, keepdim=True)  # (per-batch block lists accumulate through index_put)
    if ch.idx is None:
        dst[:, :, ch.start:ch.start + C] += val.reshape(val.shape[0], val.shape[1], C, KB, D)
        return
    idx = ch.idx
    shape = torch.broadcast_shapes(prob.bsel.shape, prob.hsel.shape, idx.shape)
    val = val.reshape(*val.shape[:3], C, KB, D).expand(*shape, KB, D)
    dst.index_put_((prob.bsel, prob.hsel, idx), val, accumulate=True)

