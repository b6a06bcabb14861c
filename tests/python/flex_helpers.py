# Shared by the test_flex_*.py files: the float64 golden reference (FLEX.md's semantics with
# plain torch operations, differentiable by torch autograd), FLEX.md's judgement rule, and
# the mods of PyTorch's FlexAttention examples.
import math
import warnings

import torch
import torch.nn.attention.flex_attention as tfa

tfa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True  # torch's eager path without a compile
warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
warnings.filterwarnings("ignore", category=FutureWarning, message=".*return_lse is deprecated.*")

FUDGE = {torch.float32: 10.0, torch.bfloat16: 1.1, torch.float16: 1.1, torch.float64: 10.0}


def dense_reference(q, k, v, score_mod=None, mask_mod=None, scale=None):
    """out, lse of FLEX.md's reference in q's dtype (float64 inputs: the golden result)."""
    B, Hq, L, E = q.shape
    S = k.shape[2]
    G = Hq // k.shape[1]
    k = k.repeat_interleave(G, 1)
    v = v.repeat_interleave(G, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(E))
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(Hq).view(1, Hq, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    if score_mod is not None:
        s = torch.broadcast_to(torch.as_tensor(score_mod(s, b, h, qi, ki)).to(s.dtype), s.shape)
    if mask_mod is not None:
        s = torch.where(mask_mod(b, h, qi, ki), s, torch.tensor(-math.inf, dtype=s.dtype))
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), 0, m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    out = (p / torch.where(l > 0, l, 1)) @ v
    lse = torch.where(l > 0, torch.log(torch.where(l > 0, l, 1)) + m, -math.inf).squeeze(-1)
    return out, lse


def torch_math(q, k, v, score_mod=None, mask_mod=None, scale=None):
    """out of PyTorch's own eager flex_attention (torch._higher_order_ops.flex_attention's
    math_attention: scores in fp32, probabilities rounded to q's dtype before the value
    matmul), differentiable: the reference in q's dtype FLEX.md judges against, which PyTorch's
    CPU flex_attention computes forward but refuses to differentiate."""
    from torch._higher_order_ops.flex_attention import math_attention
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, _, _ = math_attention(q, k, v, score_mod or (lambda s, b, h, m, n: s),
                               (mask_mod or tfa.noop_mask,), scale, {})
    return out


def judge(name, ours, golden, ref):
    """FLEX.md: mean|golden - ours| <= fudge * mean|golden - ref| (ref: the reference in the
    same dtype), and no NaN."""
    assert not torch.isnan(ours).any(), f"{name}: NaN"
    g = golden.double()
    e_ours = (ours.double() - g).abs().mean().item()
    e_ref = (ref.double() - g).abs().mean().item()
    fudge = FUDGE[ours.dtype]
    # A floor at the dtype's resolution: when the reference happens to be exact (a zero
    # gradient), ours may still differ by rounding.
    floor = torch.finfo(ours.dtype).eps * g.abs().mean().item() + 1e-12
    assert e_ours <= fudge * e_ref + floor, \
        f"{name}: mean error {e_ours:.3g} > {fudge} x reference's {e_ref:.3g}"


def lse_close(name, ours, golden, tol=2e-2):
    both_inf = torch.isneginf(ours) & torch.isneginf(golden)
    assert torch.equal(torch.isneginf(ours), torch.isneginf(golden)), f"{name}: -inf rows differ"
    d = torch.where(both_inf, 0, ours.double() - golden.double()).abs().max().item()
    assert d <= tol, f"{name}: lse differs by {d:.3g}"


# --- mods from PyTorch's FlexAttention examples

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(w):
    def mask(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= w) & (q_idx >= kv_idx)
    return mask


def prefix_lm(prefix):
    def mask(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (q_idx >= kv_idx)
    return mask


def document(doc_id):
    def mask(b, h, q_idx, kv_idx):
        return (doc_id[q_idx] == doc_id[kv_idx]) & (q_idx >= kv_idx)
    return mask


def alibi(H):
    slopes = torch.exp2(-8.0 * (torch.arange(H) + 1) / H)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def rel_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.05


def softcap(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return score_mod


def doc_lengths(total, lengths):
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    assert ids.numel() == total
    return ids
