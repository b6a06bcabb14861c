"""NeuronCore-v4 tensor indirection (NKI 0.5+): `t.indirect(index, num_elem=None)` is an
instruction operand whose columns of the on-chip tile `t` are chosen at run time by an SBUF
index tile, read (a gather) or, as the destination, written (a scatter).

The rule (NKI's language reference, `NkiTensor.indirect`, and the "Tensor indirection"
sections of its ISA reference): partitions go in groups of G adjacent ones, G = 16 for the
Vector, Scalar and GpSimd engines and 32 for the Tensor engine (nc_matmul, nc_matmul_mx).
Every partition of a group uses the same offsets, read from the group's own rows of the index
in a snake: offset i of group g is index[g*G + i % G, i // G]. The view is [P, num_elem] and
its element (p, i) is t[p, offset i of p's group], an offset counting t's free elements in
row-major order. The index has t's partitions (index.shape[0] == t.shape[0]).

There is no indirect operand in the IR (the engines take dense views), so an instruction with
such operands is run as a composition, traced and eager alike: each view is gathered into a
temporary tile (the offsets spread to every partition of their group through an HBM scratch,
then one nc_n_gather), the instruction runs on the temporaries, and a destination's temporary
is scattered back one offset of one group at a time (a copy at a register-held column). A
written view is gathered first too, so accumulating matmuls and predicated copies keep what they
do not write. Offsets out of the tile are an error when the gather or the scatter runs; an offset
named twice in a destination keeps the last of its values.
"""
import math

from . import _C
from ._span import user_span
from .errors import user_error

_ON_CHIP = (_C.Memory.sbuf, _C.Memory.psum)

# The instructions NKI documents with tensor-indirection operands (per name: the parameters
# that may be indirect); the Tensor engine reads offsets in groups of 32 partitions.
SUPPORTED = {
    "tensor_copy": ("dst", "src"),
    "tensor_copy_predicated": ("dst", "predicate"),
    "nc_matmul": ("dst", "stationary", "moving"),
    "nc_matmul_mx": ("dst", "stationary", "moving", "stationary_scale", "moving_scale"),
    "tensor_tensor": ("dst", "data1", "data2"),
    "tensor_scalar": ("dst", "data"),
    "tensor_reduce": ("dst", "data"),
    "tensor_scalar_cumulative": ("dst", "src"),
    "activation": ("dst", "data"),
    "activation_reduce": ("dst", "data"),
    "activate2": ("dst", "data"),
    "exponential": ("dst", "src"),
    "tensor_scalar_reduce": ("dst", "data"),
}
_TENSOR_ENGINE = ("nc_matmul", "nc_matmul_mx")
# nc_matmul's indirect operands must be Tensor-engine float dtypes (NKI's ISA reference).
_MATMUL_DTYPES = (_C.DType.float16, _C.DType.bfloat16, _C.DType.float8_e4m3,
                  _C.DType.float8_e5m2, _C.DType.float8_e4m3fn)


class TensorIndirection:
    """`data.indirect(index, num_elem)`: [P, num_elem] columns of the on-chip view `data`."""

    def __init__(self, data, index, num_elem):
        self.data, self.index, self.num_elem = data, index, num_elem
        self.shape = (data.shape[0], num_elem)
        self.dtype, self.buffer = data.dtype, data.buffer
        self.name = f"{getattr(data, 'name', 'tile')}.indirect"

    ndim = 2

    @property
    def size(self):
        return self.shape[0] * self.shape[1]

    def is_indirect(self):
        return True

    def __repr__(self):
        return (f"TensorIndirection({self.name}, shape={list(self.shape)}, "
                f"index {list(self.index.shape)})")


def make(data, index, num_elem=None):
    """data.indirect(index, num_elem), checked where the view is made."""
    span = user_span()
    name = getattr(data, "name", "tile")
    if data.buffer not in _ON_CHIP:
        user_error("indirection", f"'{name}'.indirect(...) chooses columns of an SBUF or PSUM "
                   f"tile; '{name}' is in {data.buffer.name}. Rows of an HBM tensor chosen at run "
                   "time are .vector_select(0, offsets) or .ap(..., vector_offset=offsets)", span)
    if len(data.shape) < 2:
        user_error("indirection", f"'{name}'.indirect(...) needs a tile with free dims; "
                   f"'{name}' has shape {list(data.shape)}", span)
    if not hasattr(index, "shape") or not hasattr(index, "buffer") or \
            type(index) is TensorIndirection:
        raise TypeError(f"{name}.indirect: index must be an SBUF tile of offsets, got "
                        f"{type(index).__name__}")
    if index.buffer != _C.Memory.sbuf or len(index.shape) != 2 or index.dtype.is_float:
        user_error("indirection", f"'{name}'.indirect(index): the index must be a 2-D SBUF "
                   f"tile of integer offsets (uint16 in NKI); got {list(index.shape)} "
                   f"{index.dtype.name} in {index.buffer.name}", span)
    if index.shape[0] != data.shape[0]:
        user_error("indirection", f"'{name}'.indirect(index): the index has {index.shape[0]} "
                   f"partitions but '{name}' has {data.shape[0]}; NKI wants index.shape[0] == "
                   "the tile's (each group of partitions reads its offsets from its own rows)",
                   span)
    if num_elem is None:
        num_elem = math.prod(index.shape)  # NKI's default: index.size
    if isinstance(num_elem, bool) or not isinstance(num_elem, int) or num_elem < 1:
        user_error("indirection", f"'{name}'.indirect(index, num_elem={num_elem!r}): num_elem "
                   "must be a positive int (the offsets used)", span)
    return TensorIndirection(data, index, num_elem)


def run(spec, fn, call, args, kwargs):
    """An nl/nisa call with tensor-indirection operands, as the composition above; `call` is the
    decorated function (eager.op), called again with the temporaries."""
    span = user_span()
    name = fn.__name__
    bound = spec.signature.bind(*args, **kwargs)
    views = {k: v for k, v in bound.arguments.items() if type(v) is TensorIndirection}
    allowed = SUPPORTED.get(name) if fn.__module__.startswith("neuron.isa") else None
    for k, v in views.items():
        if allowed is None or k not in allowed:
            where = f"{name}" if allowed is None else f"{name}'s '{k}'"
            ops = ", ".join(f"{n}({'/'.join(p)})" for n, p in SUPPORTED.items())
            user_error("indirection", f"{where} does not take a tensor-indirection view "
                       f"('{k}' is {v.name}); NKI takes them as {ops}. Copy the columns into a "
                       "tile first: nisa.tensor_copy(tile, view)", span)
    group = 32 if name in _TENSOR_ENGINE else 16
    if name == "nc_matmul":
        if bound.arguments.get("is_transpose") and "moving" in views:
            user_error("indirection", "nc_matmul(is_transpose=True): moving cannot be a "
                       "tensor-indirection view (NKI rule)", span)
        if tuple(bound.arguments.get("tile_position") or (0, 0)) != (0, 0):
            user_error("indirection", "nc_matmul: tensor indirection cannot be combined with PE "
                       "tiling; tile_position must be (0, 0) or unset (NKI rule)", span)
        for k in ("stationary", "moving"):
            if k in views and views[k].dtype not in _MATMUL_DTYPES:
                user_error("indirection", f"nc_matmul: an indirect {k} must be float16, "
                           f"bfloat16 or an fp8 dtype (NKI rule); '{views[k].name}' is "
                           f"{views[k].dtype.name}", span)
    temps = {}  # by id: one view passed twice (in place) is one temporary
    for k, v in views.items():
        if id(v) not in temps:
            temps[id(v)] = _gather(v, group, span)
        bound.arguments[k] = temps[id(v)]
    call(*bound.args, **bound.kwargs)
    written = [v for k, v in views.items() if k in spec.writes]
    for v in {id(v): v for v in written}.values():
        _scatter(temps[id(v)], v, group, span)


def _groups(v, group, span):
    P, K = v.data.shape[0], v.index.shape[1]
    if P % group:
        user_error("indirection", f"'{v.name}' spans {P} partitions; this engine reads "
                   f"offsets per group of {group} partitions, so the tile needs a multiple of "
                   f"{group}", span)
    if v.num_elem > group * K:
        user_error("indirection", f"'{v.name}' uses {v.num_elem} offsets, but each group of "
                   f"{group} partitions has {group * K} (index[g*{group} + i % {group}, i // "
                   f"{group}] of an index with {K} columns); pass num_elem <= {group * K}", span)
    return P // group, K


def _gather(v, group, span):
    """The view's values in a new [P, num_elem] tile (in PSUM when the data is)."""
    import neuron.isa as nisa
    import neuron.language as nl
    groups, K = _groups(v, group, span)
    P, n, ix = v.data.shape[0], v.num_elem, v.index
    # Offsets to every partition: row q of group g gets index[g*G + r, c] at column c*G + r,
    # the snake read down the group's rows, through an HBM copy of the index.
    scratch = nl.ndarray((P, K), ix.dtype, buffer=nl.hbm, name="indirect_index")
    nisa.dma_copy(scratch, ix)
    spread = nl.ndarray((P, group * K), ix.dtype, buffer=nl.sbuf, name="indirect_offsets")
    for g in range(groups):
        nisa.dma_copy(spread[g * group:(g + 1) * group, :],
                      scratch.ap([[0, group], [1, K], [K, group]], offset=g * group * K))
    offsets = nl.ndarray((P, n), nl.uint32, buffer=nl.sbuf, name="indirect_flat_offsets")
    nisa.tensor_copy(offsets, spread[:, 0:n])
    data = v.data
    if data.buffer == _C.Memory.psum:  # nc_n_gather reads SBUF (the GpSimd engine)
        data = nl.ndarray(tuple(v.data.shape), v.dtype, buffer=nl.sbuf, name="indirect_data")
        nisa.tensor_copy(data, v.data)
    out = nl.ndarray((P, n), v.dtype, buffer=nl.sbuf, name="indirect_values")
    nisa.nc_n_gather(out, data, offsets)
    if v.buffer != _C.Memory.psum:
        return out
    in_psum = nl.ndarray((P, n), v.dtype, buffer=nl.psum, name="indirect_values")
    nisa.tensor_copy(in_psum, out)
    return in_psum


def _scatter(values, v, group, span):
    """values[:, i] into v.data's column offset i of each group, in order (the last wins): a
    copy of the group's rows at a register-held column. A 16-partition copy must start on a
    multiple of 32 (the engines' rule), so a group starting between them is copied with the
    group below it under a predicate that keeps only its own rows."""
    import neuron.isa as nisa
    import neuron.language as nl
    groups, _ = _groups(v, group, span)
    P, n = v.data.shape[0], v.num_elem
    flat = v.data
    if len(flat.shape) > 2:  # offsets count the free elements row-major
        flat = flat.reshape((P, math.prod(flat.shape[1:])))
    upper = None  # [32, 1]: 0 on the first 16 partitions, so reverse_pred keeps the last 16
    r = nisa.register_alloc()
    for g in range(groups):
        lo = g * group
        for i in range(n):
            row = lo + i % group
            nisa.register_load(r, v.index[row:row + 1, i // group:i // group + 1])
            if lo % 32 == 0:
                nisa.tensor_copy(flat[lo:lo + group, nl.ds(r, 1)], values[lo:lo + group, i:i + 1])
                continue
            if upper is None:
                upper = nl.ndarray((32, 1), nl.uint8, buffer=nl.sbuf, name="indirect_rows")
                nisa.memset(upper, 0)
                nisa.memset(upper[0:16, :], 1)
            nisa.tensor_copy_predicated(flat[lo - 16:lo + 16, nl.ds(r, 1)],
                                        values[lo - 16:lo + 16, i:i + 1], upper,
                                        reverse_pred=True)
