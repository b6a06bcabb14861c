"""The iteration plan shared by forward and backward: per query block row, the key blocks to
visit in chunks, read from the BlockMask's block lists at run time.

Each row visits its *full* blocks first (no mask_mod), then its *partial* ones (mask_mod
applied); empty blocks are never visited. Blocks are grouped in chunks of about
`KEYS_PER_CHUNK` keys so one matmul covers several blocks. A chunk whose blocks are the same
consecutive run for every (batch, head) reads K and V as a view (no copy); otherwise they are
gathered by block index.

Layout: heads are viewed as [Hkv, G] (G = Hq / Hkv query heads per kv head); block lists are
broadcast over batch and head as the BlockMask allows, so an index tensor has shape
[Bm, Hi, Gm, C] with Bm in (1, B), and (Hi, Gm) = (Hkv, G) for per-head masks, else (1, 1).
"""
from dataclasses import dataclass

import torch

KEYS_PER_CHUNK = 1024


@dataclass
class Chunk:
    start: int              # the run's first block when `idx` is None (a contiguous view)
    count: int              # blocks in the chunk (C)
    idx: torch.Tensor       # [Bm, Hi, Gm, C] block indices, or None for the contiguous run
    full: torch.Tensor      # [Bm, Hi, Gm, C] bool: block is full (None: all are)
    valid: torch.Tensor     # [Bm, Hi, Gm, C] bool: slot holds a block (None: all do)
    partial: bool           # some block needs mask_mod
    tail: bool              # contains the last key block while S is not a multiple of KB


@dataclass
class Plan:
    QB: int
    KB: int
    nQ: int
    nK: int
    rows: list              # rows[i]: list of Chunk for query block row i


def _bh(t, B, Hq, Hkv):
    """[Bm, Hm, ...] block-mask tensor -> [Bm, Hi, Gm, ...]."""
    Bm, Hm = t.shape[0], t.shape[1]
    if Bm not in (1, B):
        raise ValueError(f"block_mask batch size {Bm} does not broadcast to the batch size {B}")
    if Hm == 1:
        return t.reshape(Bm, 1, 1, *t.shape[2:])
    if Hm != Hq:
        raise ValueError(f"block_mask has {Hm} heads; the query has {Hq} (expected 1 or {Hq})")
    return t.reshape(Bm, Hkv, Hq // Hkv, *t.shape[2:])


def build(block_mask, B, Hq, Hkv, L, S):
    """Plan for a [B, Hq, L] x [.., S] attention; block_mask None means every block full."""
    if block_mask is None:
        QB, KB = 128, 128
        nQ, nK = -(-L // QB), -(-S // KB)
        rows = []
        for _ in range(nQ):
            rows.append(_runs(0, nK, nK, KB, S, partial=False))
        return Plan(QB, KB, nQ, nK, rows)
    QB, KB = block_mask.BLOCK_SIZE
    nQ, nK = -(-L // QB), -(-S // KB)
    kn = block_mask.kv_num_blocks
    ki = block_mask.kv_indices
    if kn.dim() != 3:
        raise ValueError(f"block_mask.kv_num_blocks must be [B, H, Q_BLOCKS], got "
                         f"{tuple(kn.shape)}")
    fn, fi = block_mask.full_kv_num_blocks, block_mask.full_kv_indices
    if fn is None:
        fn = torch.zeros_like(kn)
        fi = torch.zeros_like(ki[..., :1])
    kn, ki, fn, fi = (_bh(t, B, Hq, Hkv)[..., :nQ, :] if t.dim() == 4 else
                      _bh(t, B, Hq, Hkv)[..., :nQ] for t in (kn, ki, fn, fi))
    Wf, Wp = fi.shape[-1], ki.shape[-1]
    ar_f = torch.arange(Wf)
    ar_p = torch.arange(Wp)
    idx = torch.cat([fi.long(), ki.long()], -1)                    # [Bm, Hi, Gm, nQ, W]
    valid = torch.cat([ar_f < fn.unsqueeze(-1), ar_p < kn.unsqueeze(-1)], -1)
    full = torch.cat([torch.ones_like(fi, dtype=torch.bool),
                      torch.zeros_like(ki, dtype=torch.bool)], -1)
    # Valid slots first (full ones, then partial ones), stably.
    order = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)
    idx, valid, full = (torch.gather(t, -1, order) for t in (idx, valid, full))
    idx = torch.where(valid, idx, 0).clamp_(0, nK - 1)
    count = (fn + kn).to(torch.int64)                             # [Bm, Hi, Gm, nQ]
    nfull = fn.to(torch.int64)
    uniform = idx.shape[0] == 1 and idx.shape[1] == 1 and idx.shape[2] == 1
    rows = []
    per = max(1, KEYS_PER_CHUNK // KB)
    for i in range(nQ):
        n = int(count[..., i].max())
        f_lo, f_hi = int(nfull[..., i].min()), int(nfull[..., i].max())
        # Split at the full/partial boundary when it is the same for every head, so chunks of
        # full blocks never evaluate mask_mod.
        bounds = [0, f_lo, n] if f_lo == f_hi else [0, n]
        chunks = []
        for a, b in zip(bounds, bounds[1:]):
            for s in range(a, b, per):
                e = min(b, s + per)
                ci, cv, cf = idx[..., i, s:e], valid[..., i, s:e], full[..., i, s:e]
                all_valid = bool(cv.all())
                all_full = bool((cf | ~cv).all())
                tail = bool((cv & (ci == nK - 1)).any()) and S % KB != 0
                if uniform and all_valid:
                    run = ci.reshape(-1)
                    first = int(run[0])
                    if torch.equal(run, torch.arange(first, first + (e - s))):
                        chunks.append(Chunk(first, e - s, None, None if all_full else cf,
                                            None, not all_full, tail))
                        continue
                chunks.append(Chunk(0, e - s, ci, None if all_full else cf,
                                    None if all_valid else cv, not all_full, tail))
        rows.append(chunks)
    return Plan(QB, KB, nQ, nK, rows)


def _runs(first, n, nK, KB, S, partial):
    per = max(1, KEYS_PER_CHUNK // KB)
    out = []
    for s in range(first, first + n, per):
        e = min(first + n, s + per)
        out.append(Chunk(s, e - s, None, None, None, partial, e == nK and S % KB != 0))
    return out
