"""flex_attention: the public entry point, argument checks with PyTorch's wording, tracing
of the mods, autograd wiring and the return conventions (out / (out, lse) / (out, AuxOutput))."""
import math
import os
import sys
import warnings
from typing import NamedTuple, Optional

import torch

from .. import lru
from . import backward as _bwd
from . import codegen, kernel as _kernel, kernel_bwd as _kernel_bwd, plan as _plan
from . import reference, tracing
from .block_mask import _LARGE_BLOCK, BlockMask, _sliced_mask_mod_error, ordered_to_dense
from .._span import warning_stacklevel
from .fallback import warn_fallback
from .forward import Problem, forward as _fwd


class AuxRequest(NamedTuple):
    """Which auxiliary outputs flex_attention returns."""
    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    """Auxiliary outputs; a field is None unless requested."""
    lse: Optional[torch.Tensor] = None
    max_scores: Optional[torch.Tensor] = None


_warned_lse = False


def _validate(query, key, value, block_mask, enable_gqa):
    # q, k and v may differ in dtype (PyTorch checks them with allow_lowp_kv=True: a bf16 KV
    # cache under an fp32 query); k and v are used in the query's dtype (flex_attention below).
    if not all(t.is_floating_point() for t in (query, key, value)):
        raise ValueError(f"flex_attention needs floating-point inputs, got query {query.dtype}, "
                         f"key {key.dtype} and value {value.dtype}")
    if query.device != key.device or query.device != value.device:
        raise ValueError(
            f"Expected query, key, and value to have the same device type, but got "
            f"query.device: {query.device}, key.device: {key.device}, and value.device: "
            f"{value.device} instead.")
    if query.device.type != "cpu":
        raise ValueError(f"neuron.flex_attention runs on CPU tensors; got {query.device}")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise NotImplementedError("NYI: query, key, and value must be 4D tensors")
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"Expect query and key/value to have the same embedding dimension but got "
            f"E={query.size(-1)} and E={key.size(-1)}.")
    if key.shape[:3] != value.shape[:3]:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must agree in "
                         "batch, heads and sequence length")
    if (not enable_gqa) and query.size(-3) != key.size(-3):
        raise ValueError(
            f"Expect query and key/value to have the same number of heads but got "
            f"Hq={query.size(-3)} and Hkv={key.size(-3)}. Try setting enable_gqa=True for GQA.")
    if query.size(1) == 0 or key.size(1) == 0:
        raise ValueError(f"flex_attention needs at least one head; got Hq={query.size(1)} and "
                         f"Hkv={key.size(1)}")
    if enable_gqa and query.size(1) % key.size(1) != 0:
        raise ValueError(
            f"Expect number of query heads to be a multiple of kv heads for GQA but got "
            f"Hq={query.size(1)} and Hkv={key.size(1)}.")
    if query.size(0) != key.size(0) and key.size(0) != 1:
        if block_mask is None:
            raise ValueError(
                f"Expect query and key/value to have the same batch size, or non-none "
                f"block_mask, but got block_mask=None, Bq={query.size(0)}, and "
                f"Bkv={key.size(0)}.")
        if block_mask.kv_num_blocks.size(0) != query.size(0):
            raise ValueError(
                f"Expect query and key/value to have the same batch size, or block_mask and "
                f"query to have the same batch size, but got Bq={query.size(0)}, "
                f"Bkv={key.size(0)}, B_block_mask={block_mask.kv_num_blocks.size(0)}.")
        raise ValueError(f"key/value batch {key.size(0)} must be 1 or the query's "
                         f"{query.size(0)}")
    if block_mask is not None:
        # (PyTorch's sliced BlockMask too: its module is loaded if its masks exist.)
        theirs = getattr(sys.modules.get("torch.nn.attention.flex_attention"),
                         "_sliced_mask_mod_error", None)
        if getattr(block_mask, "mask_mod", None) in (_sliced_mask_mod_error, theirs):
            raise RuntimeError("Cannot use mask_mod from a sliced BlockMask")
        if tuple(block_mask.BLOCK_SIZE) == (_LARGE_BLOCK, _LARGE_BLOCK):
            return None
        qlen, kvlen = block_mask.shape[-2], block_mask.shape[-1]
        L, S = query.size(-2), key.size(-2)
        if L > qlen or S > kvlen:
            raise ValueError(
                f"block_mask was created for block_mask.shape={block_mask.shape} but got "
                f"q_len={L} and kv_len={S}. As the block mask was created for a smaller length "
                "than you're using it for, you likely need to create a new block mask.")
        if L < qlen or S < kvlen:
            raise ValueError(
                f"block_mask was created for block_mask.shape={block_mask.shape} but got "
                f"q_len={L} and kv_len={S}. As the block mask was created for a larger length "
                "than you're using it for, you can either 1. create a new block mask with the "
                "correct length, or 2. 'adjust' the existing block mask to the correct length "
                "by calling block_mask._adjust(q_len, kv_len). This essentially 'crops' the "
                "block mask to the upper left corner, which does not work for all mask_mods!")
        if block_mask.kv_num_blocks.device != query.device:
            raise RuntimeError(
                f"Expect q/k/v and block_mask to be on the same device but got {query.device} "
                f"and {block_mask.kv_num_blocks.device}.")
        _check_block_lists(block_mask, S)
    return block_mask


def _check_block_lists(block_mask, S):
    """The blocks the lists count must be key blocks: a -1 (attention-gym's paged attention
    maps unreserved pages so) or a block past S would read other memory; PyTorch's eager path
    ignores the lists, its kernels read them. Checked once per mask and contents (the tensors'
    versions: an in-place edit checks again), not on every call of a decode loop."""
    lists = [getattr(block_mask, n) for n in ("kv_num_blocks", "kv_indices",
                                              "full_kv_num_blocks", "full_kv_indices")]
    key = (S,) + tuple(None if t is None else (id(t), t._version) for t in lists)
    if getattr(block_mask, "_neuron_lists_checked", None) == key:
        return
    nK = -(-S // block_mask.BLOCK_SIZE[1])
    for num_name, idx_name in (("kv_num_blocks", "kv_indices"),
                               ("full_kv_num_blocks", "full_kv_indices")):
        num, idx = getattr(block_mask, num_name), getattr(block_mask, idx_name)
        if num is None:
            continue
        if bool(((num < 0) | (num > idx.shape[-1])).any()):
            raise ValueError(f"block_mask.{num_name} holds counts outside 0..{idx.shape[-1]} "
                             f"(the length of {idx_name}'s last dim)")
        counted = torch.arange(idx.shape[-1]) < num.unsqueeze(-1)
        bad = counted & ((idx < 0) | (idx >= nK))
        if bool(bad.any()):
            at = tuple(bad.nonzero()[0].tolist())
            raise ValueError(
                f"block_mask.{idx_name}{list(at)} is {int(idx[at])}, not one of the {nK} key "
                f"blocks 0..{nK - 1} of kv_len={S} ({num_name} counts it); build the lists so "
                "that every counted entry names a key block")
    try:
        block_mask._neuron_lists_checked = key
    except AttributeError:  # a mask class without a __dict__: checked on every call
        pass


def _tiled(block_mask, B, Hq):
    """A block mask whose batch (or head) count is neither 1 nor the query's: PyTorch's kernels
    read its row b % Bm (head h % Hm), so a mask made for a batch of 8 serves a last batch of
    3; its tables tiled so to [B, Hq] (mask_mod still sees the query's own b and h)."""
    Bm, Hm = block_mask.kv_num_blocks.shape[:2]
    rows = torch.arange(B) % Bm if Bm not in (1, B) else None
    heads = torch.arange(Hq) % Hm if Hm not in (1, Hq) else None
    if rows is None and heads is None:
        return block_mask

    def tile(t):
        if t is None:
            return None
        t = t if rows is None else t.index_select(0, rows)
        return t if heads is None else t.index_select(1, heads)
    return BlockMask(block_mask.seq_lengths,
                     *(tile(getattr(block_mask, n)) for n in BlockMask._TENSOR_ATTRS),
                     block_mask.BLOCK_SIZE, block_mask.mask_mod)


class _Flex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, prob, grad_idx, q, k, v, *score_inputs):
        out, lse, mx = _fwd(prob)
        ctx.prob, ctx.grad_idx = prob, grad_idx
        ctx.dtypes = (q.dtype, k.dtype, v.dtype)
        # The unrounded out: the backward's rowsum(dout * out) from a 16-bit out cost dq up to
        # 1.25x the error of PyTorch's 16-bit math (peaked softmaxes, attention-gym's mods).
        ctx.save_for_backward(out, lse)
        ctx.mark_non_differentiable(mx)
        ctx.set_materialize_grads(False)
        return out.to(q.dtype), lse, mx

    @staticmethod
    def backward(ctx, dout, dlse, dmx):
        out, lse = ctx.saved_tensors
        dq, dk, dv, dins = _bwd.backward(ctx.prob, out, lse, dout, dlse, ctx.grad_idx)
        grads = [None] * len(ctx.prob.score_inputs)
        for n, i in enumerate(ctx.grad_idx):
            grads[i] = dins[n].to(ctx.prob.score_inputs[i].dtype)
        qd, kd, vd = ctx.dtypes
        return (None, None, dq.to(qd), dk.to(kd), dv.to(vd), *grads)


_BACKENDS = ("auto", "host", "native", "simulator")
_warned_kernel = set()
# With BACKEND "auto" (the default) a call of at least this many scores (B * Hq * L * S) runs
# the native kernel when it can, from the second call of its signature on: a kernel's first
# call for a new mod graph, shape or dtype compiles for about a second (then the disk cache
# serves it in milliseconds), which a repeated call this large repays within a few calls
# (1.6-2x faster warm than the host path from L = 256 on, Zen 4), while a one-off call, on the
# host path, compiles nothing. Smaller calls, and calls the kernel cannot run, take the host
# path without a warning.
AUTO_KERNEL_SCORES = 1 << 24
_AUTO_SEEN_MAX = 4096
_auto_seen = lru.Lru(_AUTO_SEEN_MAX)  # signatures "auto" has seen once


def _kernel_backend(kernel_options):
    """'native' / 'simulator': run the forward as a neuron kernel (kernel.py); 'host': the
    torch-vectorized path; 'auto' (the default, and PyTorch's own BACKEND values): the kernel for
    large calls (AUTO_KERNEL_SCORES). kernel_options={"BACKEND": ...} or NEURON_FLEX_BACKEND."""
    b = (kernel_options or {}).get("BACKEND") or os.environ.get("NEURON_FLEX_BACKEND", "auto")
    b = b.lower()
    if b in ("triton", "triton_decode", "flash"):  # PyTorch's values: ours decides
        return "auto"
    if b not in _BACKENDS:
        raise ValueError(f"kernel_options BACKEND={b!r}; neuron.flex_attention knows "
                         f"{', '.join(_BACKENDS)}")
    return None if b == "host" else b


def _kernel_why(q, k, v, score_graph, mask_graph, block_mask):
    """None when the neuron kernels can run this call, else the reason."""
    why = _kernel.why_not(q, k, v, score_graph, mask_graph, block_mask)
    if why is None and _needs_grad(q, k, v, score_graph):
        why = _kernel_bwd.why_not(block_mask, score_graph, q.size(0), q.size(1), q.size(2),
                                  k.size(2))
    return why


def _kernel_ok(q, k, v, score_graph, mask_graph, block_mask):
    """Whether the neuron kernels can run this call; else warns once why and returns False."""
    why = _kernel_why(q, k, v, score_graph, mask_graph, block_mask)
    if why is None:
        return True
    if why not in _warned_kernel:
        _warned_kernel.add(why)
        warnings.warn(f"neuron.flex_attention: the neuron kernel cannot run this call ({why}); "
                      "using the host path", RuntimeWarning, stacklevel=warning_stacklevel())
    return False


def _auto_kernel(q, k, v, score_graph, mask_graph, block_mask):
    """BACKEND "auto": whether this call takes the native kernel (large, fp32 or bf16 CPU
    tensors of one dtype, a signature seen before, and nothing the kernel cannot run)."""
    B, Hq, L, _ = q.shape
    if (B * Hq * L * k.size(2) < AUTO_KERNEL_SCORES or
            q.dtype not in (torch.float32, torch.bfloat16) or not k.dtype == v.dtype == q.dtype):
        return False
    sig = (tuple(q.shape), tuple(k.shape), tuple(v.shape), q.dtype,
           score_graph.key() if score_graph is not None else None,
           mask_graph.key() if mask_graph is not None else None,
           tuple(block_mask.BLOCK_SIZE) if block_mask is not None else None,
           _needs_grad(q, k, v, score_graph))
    first = sig not in _auto_seen
    _auto_seen[sig] = True
    if first:  # the first call: the host path, no compile
        return False
    return _kernel_why(q, k, v, score_graph, mask_graph, block_mask) is None


def _use_kernel(backend, q, k, v, score_graph, mask_graph, block_mask):
    """Whether this call runs the neuron kernels: never on the host path (None), by the
    size rule for "auto", else when they can (warning once why not)."""
    if backend is None:
        return False
    if backend == "auto":
        return _auto_kernel(q, k, v, score_graph, mask_graph, block_mask)
    return _kernel_ok(q, k, v, score_graph, mask_graph, block_mask)


def _needs_grad(q, k, v, score_graph):
    return torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad or
        (score_graph is not None and any(t.requires_grad for t in score_graph.inputs)))


class _FlexKernel(torch.autograd.Function):
    """The neuron-kernel forward (kernel.py) with the neuron-kernel backward (kernel_bwd.py)."""

    @staticmethod
    def forward(ctx, call, q, k, v, *learnable):
        # learnable: score_mod's captured tensors that require grad (inputs here so that
        # autograd routes their gradients through backward). out in fp32, kept unrounded for
        # the backward's rowsum(dout * out) (as _Flex).
        out, lse, mx = _kernel.forward(q, k, v, *call, out_fp32=True)
        ctx.learnable_dtypes = [t.dtype for t in learnable]
        ctx.call = call
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(mx)
        ctx.set_materialize_grads(False)
        return out.to(q.dtype), lse, mx

    @staticmethod
    def backward(ctx, dout, dlse, dmx):
        q, k, v, out, lse = ctx.saved_tensors
        block_mask, score_graph, mask_graph, scale, simulate = ctx.call
        dq, dk, dv, dcaps = _kernel_bwd.backward(q, k, v, out, lse, dout, dlse, block_mask,
                                                 score_graph, mask_graph, scale, simulate)
        return (None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype),
                *(g.to(dt) for g, dt in zip(dcaps, ctx.learnable_dtypes)))


def _trace(mod, names):
    try:
        return tracing.trace(mod, names), None
    except tracing.UnsupportedModError as e:
        return None, e


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None, *, return_aux=None):
    """Drop-in for torch.nn.attention.flex_attention.flex_attention (docs/flex_attention.md).
    Runs on CPU tensors, forward and backward."""
    # A graph break under torch.compile, also for torch.compile(flex_attention) itself (what
    # attention-gym's examples write): torch.compile unwraps a disabled function it is handed
    # and traced these internals, 34 graphs and seconds a new shape; a disabled callee stays
    # opaque.
    return _flex_attention(query, key, value, score_mod, block_mask, scale, enable_gqa,
                           return_lse, kernel_options, return_aux)


@torch.compiler.disable
def _flex_attention(query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse,
                    kernel_options, return_aux):
    if torch.is_autocast_enabled("cpu"):
        # As PyTorch's flex_attention under autocast: q, k and v in the autocast dtype, the
        # rest (score_mod included) without autocast.
        dt = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(dt) if t.is_floating_point() and t.is_cpu and
                             t.dtype != torch.float64 else t for t in (query, key, value))
        with torch.autocast("cpu", enabled=False):
            return _flex_attention(query, key, value, score_mod, block_mask, scale, enable_gqa,
                                   return_lse, kernel_options, return_aux)
    result = _flex_attention_impl(query, key, value, score_mod, block_mask, scale, enable_gqa,
                                  return_lse, kernel_options, return_aux)
    if isinstance(result, tuple):
        return (_in_query_layout(result[0], query),) + result[1:]
    return _in_query_layout(result, query)


def _in_query_layout(out, query):
    """out [B, H, L, Ev] with its dims laid out in the order of query's strides, as PyTorch
    returns it (after `q.view(B, L, H, E).transpose(1, 2)`, `out.transpose(1, 2).view(B, L,
    H * Ev)` works); out itself when that is the contiguous order."""
    fill = sorted(range(out.dim()), key=lambda d: query.stride(d))  # innermost first (stable)
    strides, step = [0] * out.dim(), 1
    for d in fill:
        strides[d] = step
        step *= out.size(d)
    if tuple(strides) == out.stride() or out.numel() == 0:
        return out
    laid = out.new_empty(out.shape).as_strided(out.shape, strides)
    laid.copy_(out)
    return laid


def _flex_attention_impl(query, key, value, score_mod, block_mask, scale, enable_gqa,
                         return_lse, kernel_options, return_aux):
    global _warned_lse
    block_mask = _validate(query, key, value, block_mask, enable_gqa)
    if block_mask is not None:
        block_mask = _tiled(block_mask, query.size(0), query.size(1))
    if key.dtype != query.dtype or value.dtype != query.dtype:  # a low-precision KV cache
        key, value = key.to(query.dtype), value.to(query.dtype)
    if return_lse and return_aux is not None:
        raise ValueError(
            "Cannot specify both return_lse and return_aux. return_lse is deprecated, please "
            "use return_aux=AuxRequest(lse=True) instead.")
    if return_lse and not _warned_lse:
        _warned_lse = True
        warnings.warn("return_lse is deprecated and will be removed in v2.10. Please use "
                      "return_aux=AuxRequest(lse=True) instead.", FutureWarning,
                      stacklevel=warning_stacklevel())
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    B, Hq, L, _ = query.shape
    Hkv, S = key.size(1), key.size(2)

    score_graph = mask_graph = None
    error = None
    if score_mod is not None:
        score_graph, error = _trace(score_mod, tracing.ARGS_SCORE)
    mask_mod = getattr(block_mask, "mask_mod", None) if block_mask is not None else None
    if error is None and mask_mod is not None:
        mask_graph, error = _trace(mask_mod, tracing.ARGS_MASK)
    if mask_graph is not None and any(t.requires_grad for t in mask_graph.inputs):
        raise RuntimeError("flex_attention: a tensor captured by mask_mod requires grad; masks "
                           "are not differentiable (detach it or capture it in score_mod)")

    if error is not None or B == 0:
        if error is not None:
            warn_fallback(error)
        # An empty batch has nothing to run: the dense reference returns the empty results.
        dense = None
        blocks = (1, 1)
        if block_mask is not None:
            dense = ordered_to_dense(block_mask.kv_num_blocks, block_mask.kv_indices)
            if block_mask.full_kv_num_blocks is not None:
                dense = dense | ordered_to_dense(block_mask.full_kv_num_blocks,
                                                 block_mask.full_kv_indices)
            blocks = tuple(block_mask.BLOCK_SIZE)
        out, lse, mx = reference.attention(query, key, value, score_mod, mask_mod, dense,
                                           scale, blocks)
    elif _use_kernel(backend := _kernel_backend(kernel_options), query, key, value,
                     score_graph, mask_graph, block_mask):
        call = (block_mask, score_graph, mask_graph, scale, backend == "simulator")
        if _needs_grad(query, key, value, score_graph):
            learnable = [t for t in (score_graph.inputs if score_graph is not None else ())
                         if t.requires_grad and t.is_floating_point()]
            out, lse, mx = _FlexKernel.apply(call, query, key, value, *learnable)
        else:
            out, lse, mx = _kernel.forward(query, key, value, *call)
    else:
        score_fn = codegen.compile_graph(score_graph) if score_graph is not None else None
        mask_fn = codegen.compile_graph(mask_graph) if mask_graph is not None else None
        score_inputs = list(score_graph.inputs) if score_graph is not None else []
        mask_inputs = [t.detach() for t in mask_graph.inputs] if mask_graph is not None else []
        p = _plan.build(block_mask, B, Hq, Hkv, L, S)
        prob = Problem(query, key, value, scale, p, score_fn, score_inputs, mask_fn,
                       mask_inputs)
        if score_graph is not None:
            prob.score_fn_inplace = codegen.compile_graph(score_graph, inplace=True)
        grad_idx = tuple(i for i, t in enumerate(score_inputs)
                         if t.requires_grad and t.is_floating_point())
        needs_grad = torch.is_grad_enabled() and (
            query.requires_grad or key.requires_grad or value.requires_grad or grad_idx)
        if needs_grad:
            out, lse, mx = _Flex.apply(prob, grad_idx, query, key, value, *score_inputs)
        else:
            out, lse, mx = _fwd(prob)
            out = out.to(query.dtype)
    lse_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    lse = lse.to(lse_dtype)
    if return_aux is not None:
        return out, AuxOutput(lse=lse if return_aux.lse else None,
                              max_scores=mx.to(lse_dtype) if return_aux.max_scores else None)
    if return_lse:
        return out, lse
    return out
