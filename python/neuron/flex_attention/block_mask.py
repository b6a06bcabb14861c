"""BlockMask and create_block_mask: which Q_BLOCK x KV_BLOCK blocks attention computes.

Same fields, methods and values as torch.nn.attention.flex_attention.BlockMask. Blocks are
classified without a dense B*H*Q*KV mask: the traced mask_mod is evaluated over whole blocks
with interval arithmetic (intervals.py), and only the blocks it cannot decide (the diagonal of
a causal mask, the edges of documents) are evaluated element by element, a chunk of blocks at
a time, by the compiled graph (codegen.py). Memory is O(blocks + chunk).
"""
import functools
import inspect
import itertools
import operator
import warnings

import torch

from . import codegen, intervals, reference, tracing
from .._span import warning_stacklevel
from .fallback import warn_fallback

DEFAULT_BLOCK = 128
_LARGE_BLOCK = 1 << 30
_CHUNK_ELEMENTS = 1 << 22  # elements evaluated per chunk of undecided blocks


def noop_mask(batch, head, token_q, token_kv):
    """Attends everywhere (PyTorch's parameter names)."""
    return batch.new_ones(size=(), dtype=torch.bool)


def _check_callables(mods):
    if not all(callable(m) for m in mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mods}")


def or_masks(*mask_mods):
    """The union of mask_mods."""
    _check_callables(mask_mods)

    def or_mask(b, h, q_idx, kv_idx):
        result = b.new_zeros((), dtype=torch.bool)
        for m in mask_mods:
            result = result | m(b, h, q_idx, kv_idx)
        return result
    return or_mask


def and_masks(*mask_mods):
    """The intersection of mask_mods."""
    _check_callables(mask_mods)

    def and_mask(b, h, q_idx, kv_idx):
        result = b.new_ones((), dtype=torch.bool)
        for m in mask_mods:
            result = result & m(b, h, q_idx, kv_idx)
        return result
    return and_mask


def _sliced_mask_mod_error(b, h, q_idx, kv_idx):
    raise RuntimeError("Cannot use mask_mod from a sliced BlockMask")


# --- the ordered (BCSR-like) form: per row, a count and the column indices, set ones first.

def ordered_to_dense(num, indices):
    """[..., rows] counts + [..., rows, cols] indices -> [..., rows, cols] int32 0/1."""
    cols = indices.shape[-1]
    valid = torch.arange(cols, device=indices.device) < num.unsqueeze(-1)
    idx = torch.where(valid, indices.long(), cols)
    dense = torch.zeros(*indices.shape[:-1], cols + 1, dtype=torch.int32, device=indices.device)
    dense.scatter_(-1, idx, 1)
    return dense[..., :cols].contiguous()


def dense_to_ordered(dense):
    dense = dense.to(torch.int32)
    num = dense.sum(dim=-1, dtype=torch.int32)
    # Set columns in ascending order, then the unset ones ascending: PyTorch's layout (a
    # stable descending sort), so the fields compare equal, not just equivalent. Placing each
    # column at its rank is O(n) where the sort was the slowest step at 128k lengths.
    ones = torch.cumsum(dense, dim=-1, dtype=torch.int32)
    cols = torch.arange(dense.shape[-1], dtype=torch.int32, device=dense.device)
    pos = torch.where(dense.bool(), ones - 1, num.unsqueeze(-1) + cols - ones)
    indices = torch.empty_like(dense)
    indices.scatter_(-1, pos.long(), cols.expand_as(dense).contiguous())
    return num.contiguous(), indices.contiguous()


def transpose_ordered(num, indices):
    return dense_to_ordered(ordered_to_dense(num, indices).transpose(-2, -1))


def _adjust_ordered(num, indices, rows, cols):
    indices = indices[:, :, :rows, :cols]
    num = torch.clamp(num[:, :, :rows], max=cols)
    num = (indices < num[:, :, :, None]).sum(dim=-1, dtype=torch.int32)
    return num, indices


class BlockMask:
    """Block-sparse mask: kv_num_blocks/kv_indices list the *partial* blocks of each query
    block row, full_kv_num_blocks/full_kv_indices the *full* ones (mask_mod skipped);
    the q_* fields are the transposes used by the backward pass."""

    _TENSOR_ATTRS = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                     "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"]
    _CONTEXT_ATTRS = ["seq_lengths", "BLOCK_SIZE", "mask_mod"]

    def __init__(self, seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks,
                 full_kv_indices, q_num_blocks, q_indices, full_q_num_blocks, full_q_indices,
                 BLOCK_SIZE, mask_mod):
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise AssertionError(
                "full_kv_num_blocks and full_kv_indices must be both provided or omitted")
        if (full_q_num_blocks is None) != (full_q_indices is None):
            raise AssertionError(
                "full_q_num_blocks and full_q_indices must be both provided or omitted")
        self.seq_lengths = tuple(seq_lengths)
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.q_num_blocks, self.q_indices = q_num_blocks, q_indices
        self.full_q_num_blocks, self.full_q_indices = full_q_num_blocks, full_q_indices
        self.BLOCK_SIZE = tuple(BLOCK_SIZE)
        self.mask_mod = mask_mod

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None,
                       full_kv_indices=None, BLOCK_SIZE=DEFAULT_BLOCK, mask_mod=None,
                       seq_lengths=None, compute_q_blocks=True):
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise AssertionError(
                "full_kv_num_blocks and full_kv_indices must be both provided or omitted")
        q_num = q_idx = fq_num = fq_idx = None
        if compute_q_blocks:
            q_num, q_idx = transpose_ordered(kv_num_blocks, kv_indices)
            if full_kv_num_blocks is not None:
                fq_num, fq_idx = transpose_ordered(full_kv_num_blocks, full_kv_indices)
        if isinstance(BLOCK_SIZE, int):
            BLOCK_SIZE = (BLOCK_SIZE, BLOCK_SIZE)
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * BLOCK_SIZE[0],
                           kv_indices.shape[-1] * BLOCK_SIZE[1])
        return cls(seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                   q_num, q_idx, fq_num, fq_idx, BLOCK_SIZE,
                   mask_mod if mask_mod is not None else noop_mask)

    def as_tuple(self, flatten=True):
        bs = tuple(self.BLOCK_SIZE) if flatten else (self.BLOCK_SIZE,)
        sl = tuple(self.seq_lengths) if flatten else (self.seq_lengths,)
        return (*sl, self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks,
                self.full_kv_indices, self.q_num_blocks, self.q_indices,
                self.full_q_num_blocks, self.full_q_indices, *bs, self.mask_mod)

    @property
    def shape(self):
        return tuple(self.kv_indices.shape[:-2]) + tuple(self.seq_lengths)

    def numel(self):
        return functools.reduce(operator.mul, self.shape, 1)

    def sparsity(self):
        """Percent of the blocks' area that is not computed."""
        computed = int(self.kv_num_blocks.sum())
        if self.full_kv_num_blocks is not None:
            computed += int(self.full_kv_num_blocks.sum())
        area = computed * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1]
        return 100 * (1 - area / self.numel())

    def to_dense(self):
        dense = ordered_to_dense(self.kv_num_blocks, self.kv_indices)
        if self.full_kv_num_blocks is not None:
            dense = dense | ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices)
        return dense

    def to_string(self, grid_size=(20, 20), limit=4):
        dense = self.to_dense()
        *batch, rows, cols = dense.shape
        if isinstance(grid_size, int):  # -1 too, as PyTorch: a step of 1, the whole mask
            max_r = max_c = grid_size
        else:
            max_r, max_c = grid_size
        rs = max(1, -(-rows // max_r))
        cs = max(1, -(-cols // max_c))
        out = []
        for i, bidx in enumerate(itertools.product(*[range(n) for n in batch])):
            if i == limit:
                out += ["...", "To print out more, set BlockMask.to_string(limit=N)",
                        "You can also index (BlockMask[batch, head]) to choose a specific "
                        "batch or head"]
                break
            m = dense[bidx] if bidx else dense
            text = f"{bidx}\n"
            for r in range(0, rows, rs):
                for c in range(0, cols, cs):
                    frac = m[r:r + rs, c:c + cs].float().mean().item()
                    text += ("█" if frac == 1 else " " if frac == 0 else "░") * 2
                text += "\n"
            out.append(text)
        return "\n".join(out)

    def __str__(self):
        return (f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, \n"
                f"{self.to_string().strip()}\n)")

    def __repr__(self):
        def shp(x):
            return x.shape if x is not None else None
        name = getattr(self.mask_mod, "__name__", self.mask_mod)
        return (f"BlockMask(\n    kv_num_blocks={self.kv_num_blocks.shape},\n"
                f"    kv_indices={self.kv_indices.shape},\n"
                f"    full_kv_num_blocks={shp(self.full_kv_num_blocks)},\n"
                f"    full_kv_indices={shp(self.full_kv_indices)},\n"
                f"    q_num_blocks={shp(self.q_num_blocks)},\n"
                f"    q_indices={shp(self.q_indices)},\n"
                f"    full_q_num_blocks={shp(self.full_q_num_blocks)},\n"
                f"    full_q_indices={shp(self.full_q_indices)},\n"
                f"    BLOCK_SIZE={self.BLOCK_SIZE},\n    shape={self.shape},\n"
                f"    sparsity={self.sparsity():.2f}%,\n    mask_mod={name}\n)")

    def __getitem__(self, index):
        """Indexes batch / head / query-block dims; an int keeps its dimension (size 1)."""
        index = index if isinstance(index, tuple) else (index,)
        padded = (*index, slice(None), slice(None), slice(None))[:3]
        sizes = self.kv_num_blocks.shape[:3]
        index = tuple((slice(i + n, i + n + 1) if -n <= i < 0 else slice(i, i + 1))
                      if isinstance(i, int) else i for i, n in zip(padded, sizes))
        full_num = full_idx = None
        if self.full_kv_num_blocks is not None:
            full_num, full_idx = self.full_kv_num_blocks[index], self.full_kv_indices[index]
        return BlockMask.from_kv_blocks(
            self.kv_num_blocks[index], self.kv_indices[index], full_num, full_idx,
            BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=_sliced_mask_mod_error,
            seq_lengths=self.seq_lengths, compute_q_blocks=self.q_indices is not None)

    def _adjust(self, new_q_len, new_kv_len):
        rows = -(-new_q_len // self.BLOCK_SIZE[0])
        cols = -(-new_kv_len // self.BLOCK_SIZE[1])
        num, idx = _adjust_ordered(self.kv_num_blocks, self.kv_indices, rows, cols)
        fnum = fidx = None
        if self.full_kv_num_blocks is not None:
            fnum, fidx = _adjust_ordered(self.full_kv_num_blocks, self.full_kv_indices, rows,
                                         cols)
        return self.from_kv_blocks(num, idx, fnum, fidx, self.BLOCK_SIZE, self.mask_mod)

    def to(self, device):
        vals = [getattr(self, a) for a in self._TENSOR_ATTRS]
        vals = [v.to(device) if v is not None else None for v in vals]
        return BlockMask(self.seq_lengths, *vals, self.BLOCK_SIZE, self.mask_mod)

    # PyTorch's pytree helpers (torch.utils._pytree.register_pytree_node takes them): the
    # tensors, and a context of seq_lengths, BLOCK_SIZE and the mask_mod (wrapped so that two
    # contexts of the same function compare equal).
    def _flatten(self):
        return (tuple(getattr(self, a) for a in self._TENSOR_ATTRS),
                tuple(_wrapped(a, getattr(self, a)) for a in self._CONTEXT_ATTRS))

    def _flatten_with_keys(self):
        from torch.utils._pytree import GetAttrKey
        return (tuple((GetAttrKey(a), getattr(self, a)) for a in self._TENSOR_ATTRS),
                tuple((GetAttrKey(a), _wrapped(a, getattr(self, a)))
                      for a in self._CONTEXT_ATTRS))

    @classmethod
    def _unflatten(cls, tensors, context):
        kw = {a: v.fn if isinstance(v, _ModInContext) else v
              for a, v in zip(cls._CONTEXT_ATTRS, context)}
        kw.update(zip(cls._TENSOR_ATTRS, tensors))
        return cls(**kw)


class _ModInContext:
    """A mask_mod in a pytree context: equal to another for the same function, or the same
    code over equal captured values (a closure made anew on each forward)."""
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def __eq__(self, other):
        if not isinstance(other, _ModInContext):
            return False
        a, b = self.fn, other.fn
        if a is b:
            return True
        if not (inspect.isfunction(a) and inspect.isfunction(b)) or a.__code__ != b.__code__:
            return False
        cells = [tuple(c.cell_contents for c in f.__closure__ or ()) for f in (a, b)]
        return len(cells[0]) == len(cells[1]) and all(map(_same_value, *cells))

    def __hash__(self):
        return hash(self.fn.__code__ if inspect.isfunction(self.fn) else self.fn)

    def __repr__(self):
        return f"_ModInContext({self.fn!r})"


def _same_value(x, y):
    if x is y:
        return True
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return False  # (a captured tensor is the same one or another)
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001 (an == that gives no truth value: not equal)
        return False


def _wrapped(attr, value):
    return _ModInContext(value) if attr == "mask_mod" else value


# --- building a mask from a mask_mod

def is_score_mod(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.default is inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 5


def _ranges(n_blocks, block, length):
    lo = torch.arange(n_blocks, dtype=torch.float64) * block
    hi = torch.clamp(lo + block, max=length) - 1
    return lo, hi


class _Gather:
    """Interval bounds of captured-tensor reads over blocks: a dim indexed by q_idx or
    kv_idx itself is reduced per block (min/max over the block's rows: exact for document
    ids), a dim indexed by a point (b, h, constants) is read directly, anything else is
    bounded by the whole dim."""

    def __init__(self, graph, blocks):
        self.graph, self.blocks = graph, blocks  # blocks: arg -> (n, size, length, index)
        self._cache = {}

    def __call__(self, node, idx_iv):
        t = self.graph.inputs[node.args[0].args[0]]
        if t.dtype == torch.bool:
            t = t.to(torch.int8)
        modes, index = [], []
        for d, (inode, iv) in enumerate(zip(node.args[1:], idx_iv)):
            name = inode.args[0] if inode.op == "arg" else None
            if name in self.blocks:
                modes.append(("block", name))
                index.append(self.blocks[name][3])
            elif bool(torch.all(iv[0] == iv[1])) and bool(torch.all(torch.isfinite(iv[0]))):
                modes.append(("point",))
                index.append(iv[0].long())
            else:
                modes.append(("all",))
                index.append(0)
        key = (node.args[0].args[0], tuple(modes))
        if key not in self._cache:
            lo, hi = t.to(torch.float64), t.to(torch.float64)
            for d, m in enumerate(modes):
                if m[0] == "block":
                    n, size, length, _ = self.blocks[m[1]]
                    upto = max(1, min(t.shape[d], length))
                    sel = torch.clamp(torch.arange(n * size), max=upto - 1)
                    shape = lambda x: x.shape[:d] + (n, size) + x.shape[d + 1:]  # noqa: E731
                    lo = lo.index_select(d, sel).reshape(shape(lo)).amin(d + 1)
                    hi = hi.index_select(d, sel).reshape(shape(hi)).amax(d + 1)
                elif m[0] == "all":
                    lo = lo.amin(d, keepdim=True)
                    hi = hi.amax(d, keepdim=True)
            self._cache[key] = (lo, hi)
        lo, hi = self._cache[key]
        ix = tuple(index)
        if not ix:
            return lo, hi
        return lo[ix], hi[ix]


def _classify(graph, B, H, Q_LEN, KV_LEN, QB, KB):
    """Returns (partial, full) int8 [B', H', nQ, nK] where B' / H' are 1 when the mask does
    not depend on b / h."""
    nQ, nK = -(-Q_LEN // QB), -(-KV_LEN // KB)
    Bc = B if graph.uses("b") else 1
    Hc = H if graph.uses("h") else 1
    b = torch.arange(Bc, dtype=torch.float64).view(Bc, 1, 1, 1)
    h = torch.arange(Hc, dtype=torch.float64).view(1, Hc, 1, 1)
    qlo, qhi = _ranges(nQ, QB, Q_LEN)
    klo, khi = _ranges(nK, KB, KV_LEN)
    args = {"b": (b, b), "h": (h, h), "q_idx": (qlo.view(1, 1, nQ, 1), qhi.view(1, 1, nQ, 1)),
            "kv_idx": (klo.view(1, 1, 1, nK), khi.view(1, 1, 1, nK))}
    blocks = {"q_idx": (nQ, QB, Q_LEN, torch.arange(nQ).view(1, 1, nQ, 1)),
              "kv_idx": (nK, KB, KV_LEN, torch.arange(nK).view(1, 1, 1, nK))}
    lo, hi = intervals.evaluate(graph, args, _Gather(graph, blocks))
    shape = (Bc, Hc, nQ, nK)
    yes = torch.broadcast_to((lo > 0) | (hi < 0) if graph.output.kind != "bool" else lo >= 1,
                             shape)
    no = torch.broadcast_to((lo == 0) & (hi == 0), shape)
    whole = ((torch.arange(nQ) + 1) * QB <= Q_LEN).view(nQ, 1) & \
        ((torch.arange(nK) + 1) * KB <= KV_LEN).view(1, nK)
    full = yes & whole
    partial = yes & ~whole   # padding counts as masked, as in PyTorch: never full
    undecided = ~yes & ~no
    full, partial = full.clone(), partial.clone()
    if bool(undecided.any()):
        _evaluate_blocks(graph, undecided.nonzero(), full, partial, Q_LEN, KV_LEN, QB, KB)
    return partial.to(torch.int8), full.to(torch.int8)


def _evaluate_blocks(graph, blocks, full, partial, Q_LEN, KV_LEN, QB, KB):
    """Element-wise evaluation of the undecided blocks, a chunk of blocks at a time."""
    fn = codegen.compile_graph(graph)
    inputs = [t.detach() for t in graph.inputs]
    per = max(1, _CHUNK_ELEMENTS // (QB * KB))
    ar_q = torch.arange(QB).view(1, QB, 1)
    ar_k = torch.arange(KB).view(1, 1, KB)
    for s in range(0, blocks.shape[0], per):
        blk = blocks[s:s + per]
        b, h, qi, ki = (blk[:, i].view(-1, 1, 1) for i in range(4))
        q = qi * QB + ar_q
        kv = ki * KB + ar_k
        valid = (q < Q_LEN) & (kv < KV_LEN)
        m = fn(b, h, torch.clamp(q, max=Q_LEN - 1), torch.clamp(kv, max=KV_LEN - 1), *inputs)
        m = torch.as_tensor(m).to(torch.bool) & valid
        cnt = m.sum(dim=(1, 2))
        idx = tuple(blk.t())
        full[idx] = cnt == QB * KB
        partial[idx] = (cnt > 0) & (cnt < QB * KB)


def _dense_blocks(mask_mod, B, H, Q_LEN, KV_LEN, QB, KB):
    """Fallback for mods the tracer cannot express: mask_mod's values per element, as
    PyTorch's eager path computes them (reference.mod_values), one row of query blocks at a
    time (memory B*H*QB*KV_LEN)."""
    nQ, nK = -(-Q_LEN // QB), -(-KV_LEN // KB)
    full = torch.zeros(B, H, nQ, nK, dtype=torch.bool)
    partial = torch.zeros_like(full)
    b, h = torch.arange(B), torch.arange(H)
    kv = torch.arange(nK * KB)
    for i in range(nQ):
        q = i * QB + torch.arange(QB)
        valid = (q.view(QB, 1) < Q_LEN) & (kv.view(1, -1) < KV_LEN)
        m = reference.mod_values(mask_mod, False, b, h, torch.clamp(q, max=Q_LEN - 1),
                                 torch.clamp(kv, max=KV_LEN - 1))
        m = m.to(torch.bool) & valid
        cnt = m.view(B, H, QB, nK, KB).sum(dim=(2, 4))
        full[:, :, i] = cnt == QB * KB
        partial[:, :, i] = (cnt > 0) & (cnt < QB * KB)
    return partial.to(torch.int8), full.to(torch.int8)


def trace_mask(mask_mod):
    """The traced graph of mask_mod, or None (after a one-time warning) when it cannot be
    traced and strict mode is off."""
    try:
        return tracing.trace(mask_mod, tracing.ARGS_MASK)
    except tracing.UnsupportedModError as e:
        warn_fallback(e)
        return None


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=DEFAULT_BLOCK,
                      _compile=False):
    """Block mask of mask_mod(b, h, q_idx, kv_idx) -> bool for a [B, H, Q_LEN, KV_LEN]
    attention; B or H None means 1 (broadcast)."""
    # Opaque to torch.compile, also as torch.compile(create_block_mask) (PyTorch's advice for
    # long sequences, and attention-gym's): traced, these internals took 11-17 s a new length
    # against 2 ms eager. (flex_attention does the same: api.py.)
    return _create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device, BLOCK_SIZE, _compile)


@torch.compiler.disable
def _create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device, BLOCK_SIZE, _compile):
    if is_score_mod(mask_mod):
        raise AssertionError(f"create-block_mask requires a mask_mod function! Got {mask_mod}")
    if _compile:  # deprecated in PyTorch, which warns the same way
        warnings.warn("create_block_mask(_compile=True) is deprecated (as in PyTorch): compile "
                      "the call instead, torch.compile(create_block_mask); here the flag changes "
                      "nothing", DeprecationWarning, stacklevel=warning_stacklevel())
    B = 1 if B is None else B
    H = 1 if H is None else H
    QB, KB = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else tuple(BLOCK_SIZE)
    graph = trace_mask(mask_mod)
    if graph is not None:
        partial, full = _classify(graph, B, H, Q_LEN, KV_LEN, QB, KB)
    else:
        partial, full = _dense_blocks(mask_mod, B, H, Q_LEN, KV_LEN, QB, KB)
    partial = partial.expand(B, H, *partial.shape[2:])
    full = full.expand(B, H, *full.shape[2:])
    pn, pi = dense_to_ordered(partial)
    fn, fi = dense_to_ordered(full)
    bm = BlockMask.from_kv_blocks(pn, pi, fn, fi, BLOCK_SIZE=(QB, KB), mask_mod=mask_mod,
                                  seq_lengths=(Q_LEN, KV_LEN))
    return bm.to(device) if device is not None and torch.device(device).type != "cpu" else bm


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):
    """The dense [B, H, Q_LEN, KV_LEN] bool mask of a mask_mod, or of a score_mod (True
    where it does not return -inf for a zero score)."""
    B = 1 if B is None else B
    H = 1 if H is None else H
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    q = torch.arange(Q_LEN).view(1, 1, Q_LEN, 1)
    kv = torch.arange(KV_LEN).view(1, 1, 1, KV_LEN)
    score = is_score_mod(mod_fn)
    if score:
        names = tracing.ARGS_SCORE
        call_args = (torch.zeros(B, H, Q_LEN, KV_LEN), b, h, q, kv)
    else:
        names = tracing.ARGS_MASK
        call_args = (b, h, q, kv)
    try:
        g = tracing.trace(mod_fn, names)
        out = codegen.compile_graph(g)(*call_args, *[t.detach() for t in g.inputs])
    except tracing.UnsupportedModError as e:
        warn_fallback(e)
        out = reference.mod_values(mod_fn, score, *call_args[:-4],
                                   *(t.flatten() for t in call_args[-4:]))
    out = torch.broadcast_to(torch.as_tensor(out), (B, H, Q_LEN, KV_LEN))
    if names is tracing.ARGS_SCORE:
        out = ~torch.isneginf(out)
    out = out.to(torch.bool)
    return out.to(device) if device is not None else out
