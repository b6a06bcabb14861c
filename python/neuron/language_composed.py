"""nki.language functions (current API) that neuron composes from its instructions and nl
functions: reductions NKI has and the toolkit has no nl.reduce for (prod, all, var), softmax,
rms_norm, element-wise abs_max / abs_min / logical_not / invert, expand_dims, shared_identity_matrix,
shared_constant and load_transpose2d. Each returns a new tile, as the nl functions do (NKI_API.md 6.4)."""
from . import _C
from . import eager as _eager
from ._span import user_span
from .dtypes import to_dtype
from .errors import user_error
from .language import _operand, _tensor_arg

_f32 = _C.DType.float32


def _axes(x, axis):
    """axis (an int or a list, negative counting from the end) as a sorted list of dims."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    return sorted(a + len(x.shape) if a < 0 else a for a in axes)


def _reduce_into(op, x, axis, dtype, keepdims, span):
    """A new tile holding op reduced over axis (NKI's result shape rule, _C.reduction)."""
    axes, full, kept = _C.reduction(list(x.shape), _axes(x, axis), bool(keepdims), span)
    dst = _C.ndarray([full[d] for d in kept], x.dtype if dtype is None else to_dtype(dtype),
                     _C.Memory.sbuf, "", span)
    _C.tensor_reduce(dst, op, x, axes, False, span)
    return dst


@_eager.op()
def prod(x, axis, dtype=None, keepdims=False):
    """The product over the free axes `axis`."""
    _tensor_arg(x, "prod")
    return _reduce_into("multiply", x, axis, dtype, keepdims, user_span())


@_eager.op()
def all(x, axis, dtype=None):
    """1 where every element over the free axes `axis` is non-zero, else 0."""
    _tensor_arg(x, "all")
    return _reduce_into("logical_and", x, axis, dtype, False, user_span())


@_eager.op()
def var(x, axis, dtype=None, keepdims=False):
    """The (population, divisor N) variance over the free axes `axis`; reduced dims are kept
    (keepdims is accepted and ignored, as NKI documents it)."""
    _tensor_arg(x, "var")
    span = user_span()
    axes = _axes(x, axis)
    m = _C.reduce("mean", x, axes, _f32, True, span)
    d = _C.binary("subtract", x, m, _f32, span)
    return _C.reduce("mean", _C.binary("multiply", d, d, _f32, span), axes,
                     x.dtype if dtype is None else to_dtype(dtype), True, span)


@_eager.op()
def softmax(x, axis=-1, dtype=None, compute_dtype=None):
    """exp(x - max) / sum over the free axes `axis` (compute_dtype: the exp's dtype)."""
    _tensor_arg(x, "softmax")
    span = user_span()
    axes = _axes(x, axis)
    m = _C.reduce("max", x, axes, None, True, span)
    e = _C.unary("exp", _C.binary("subtract", x, m, None, span),
                 None if compute_dtype is None else to_dtype(compute_dtype), span)
    s = _C.unary("reciprocal", _C.reduce("sum", e, axes, None, True, span), None, span)
    return _C.binary("multiply", e, s, x.dtype if dtype is None else to_dtype(dtype), span)


@_eager.op()
def rms_norm(x, w, axis, n, epsilon=1e-6, dtype=None, compute_dtype=None):
    """x / sqrt(sum(x^2 over axis) / n + epsilon) * w."""
    _tensor_arg(x, "rms_norm")
    span = user_span()
    axes = _axes(x, axis)
    ms = _C.binary("multiply", _C.reduce("sum", _C.unary("square", x, _f32, span), axes, None,
                                         True, span), 1.0 / n, None, span)
    r = _C.unary("rsqrt", _C.binary("add", ms, float(epsilon), None, span), None, span)
    return _C.binary("multiply", _C.binary("multiply", x, r, None, span), _operand(w),
                     x.dtype if dtype is None else to_dtype(dtype), span)


def _by_magnitude(cmp, x, y, dtype, span):
    ax = abs(x) if not isinstance(x, _C.Tensor) else _C.unary("abs", x, _f32, span)
    ay = abs(y) if not isinstance(y, _C.Tensor) else _C.unary("abs", y, _f32, span)
    if not isinstance(x, _C.Tensor) and not isinstance(y, _C.Tensor):
        raise TypeError("nl.abs_max / nl.abs_min take at least one tile")
    if not isinstance(ax, _C.Tensor):  # the comparison needs a tile on the left
        cmp, ax, ay = {"greater": "less", "less": "greater"}[cmp], ay, ax
    pick_x = _C.binary(cmp, ax, _operand(ay), _f32, span)
    if dtype is None:
        tiles = [t.dtype for t in (x, y) if isinstance(t, _C.Tensor)]
        dtype = tiles[0] if len(tiles) == 1 else _C.promote(*tiles)
    return _C.where(pick_x, _operand(x), _operand(y), to_dtype(dtype), span)


@_eager.op()
def abs_max(x, y, dtype=None):
    """Element-wise, the signed operand with the larger magnitude (y on ties)."""
    return _by_magnitude("greater", _operand(x), _operand(y), dtype, user_span())


@_eager.op()
def abs_min(x, y, dtype=None):
    """Element-wise, the signed operand with the smaller magnitude (y on ties)."""
    return _by_magnitude("less", _operand(x), _operand(y), dtype, user_span())


@_eager.op()
def logical_not(x, dtype=None):
    """1 where x == 0, else 0 (in x's dtype unless dtype is given)."""
    _tensor_arg(x, "logical_not")
    return _C.binary("equal", x, 0.0, x.dtype if dtype is None else to_dtype(dtype),
                     user_span())


_ALL_ONES = {"int8": -1.0, "int16": -1.0, "int32": -1.0, "uint8": 255.0, "uint16": 65535.0,
             "uint32": 4294967295.0}


@_eager.op()
def invert(x, dtype=None):
    """Bitwise NOT of an integer tile (an XOR with all ones)."""
    _tensor_arg(x, "invert")
    span = user_span()
    ones = _ALL_ONES.get(x.dtype.name_)
    if ones is None:
        user_error("dtype", f"invert: '{x.name}' is {x.dtype.name_}; bitwise NOT takes an integer "
                   "tile (int8 ... uint32)", span)
    return _C.binary("bitwise_xor", x, ones, None if dtype is None else to_dtype(dtype), span)


@_eager.op()
def expand_dims(x, axis):
    """A new SBUF tile of x's values with a size-1 dim inserted at `axis` (not 0: dim 0 is the
    partition dim)."""
    _tensor_arg(x, "expand_dims")
    span = user_span()
    shape = list(x.shape)
    a = axis + len(shape) + 1 if isinstance(axis, int) and axis < 0 else axis
    if not isinstance(a, int) or isinstance(a, bool) or not 1 <= a <= len(shape):
        user_error("shape", f"expand_dims(axis={axis!r}) of a tile of shape {shape}: axis must "
                   f"be 1 to {len(shape)} (dim 0 is the partition dim)", span)
    dst = _C.ndarray(shape[:a] + [1] + shape[a:], x.dtype, _C.Memory.sbuf, "", span)
    if x.buffer in (_C.Memory.hbm, _C.Memory.shared_hbm):
        _C.dma_copy(dst, x, span)
    else:
        _C.tensor_copy(dst, x, span)
    return dst


@_eager.op(writes=("dst",))
def shared_identity_matrix(n, dtype=_C.DType.uint8, dst=None):
    """The n x n identity (n <= 128) as an SBUF tile (written into dst when given)."""
    span = user_span()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 128:
        user_error("shape", f"shared_identity_matrix(n={n!r}): n must be an int from 1 to 128 "
                   "(the rows are partitions)", span)
    if dst is None:
        dst = _C.ndarray([n, n], to_dtype(dtype), _C.Memory.sbuf, "", span)
    elif list(dst.shape) != [n, n]:
        user_error("shape", f"shared_identity_matrix(n={n}): dst has shape {list(dst.shape)}, "
                   f"not [{n}, {n}]", span)
    diff = _C.ndarray([n, n], _C.DType.int32, _C.Memory.sbuf, "", span)
    _C.iota(diff, [(-1, n)], 0, 1, span)  # p - f: 0 on the diagonal
    _C.tensor_scalar(dst, diff, "equal", 0.0, False, None, None, False, span)
    return dst


def shared_constant(constant, dtype=None):
    """A constant HBM tensor holding constant (a NumPy array, anything np.asarray takes, or a
    .npy path), cast to dtype: a hidden input of the kernel (shared_constants.py); load it to
    use it."""
    from . import shared_constants
    span = user_span()
    launch = _eager._state.launch
    if launch is None:
        return shared_constants.request(constant, dtype, span)
    from .eager_values import _Base  # eager mode: a read-only HBM tensor of the values
    a = shared_constants.as_array(constant, dtype)
    return _eager.EagerTensor(_Base(a, _C.Memory.shared_hbm, to_dtype(a.dtype),
                                    "shared_constant", span, True))


@_eager.op()
def load_transpose2d(src, dtype=None):
    """HBM [a, b] -> a new SBUF tile [b, a] (b <= 128), by DMA (with a cast to dtype)."""
    from .isa_composed import transpose_by_dma
    _tensor_arg(src, "load_transpose2d")
    span = user_span()
    if len(src.shape) != 2:
        user_error("shape", f"load_transpose2d: src has shape {list(src.shape)}; it takes a 2-D "
                   "HBM tensor", span)
    a, b = src.shape
    t = _C.ndarray([b, a], src.dtype, _C.Memory.sbuf, "", span)
    transpose_by_dma(t, src, None, "load_transpose2d", span)
    if dtype is None or to_dtype(dtype) == src.dtype:
        return t
    out = _C.ndarray([b, a], to_dtype(dtype), _C.Memory.sbuf, "", span)
    _C.tensor_copy(out, t, span)
    return out


__all__ = ["prod", "all", "var", "softmax", "rms_norm", "abs_max", "abs_min", "logical_not",
           "invert",
           "expand_dims", "shared_identity_matrix", "shared_constant", "load_transpose2d"]


# ---- random numbers (neuron.isa's generator: docs/random.md) ---------------------------------

def rand(shape, dtype=_f32, buffer=None, name=""):
    """A new tile of uniform values in [0, 1) (float dtypes) or 32 random bits (integers)."""
    from . import isa, language
    t = language.ndarray(shape, dtype, buffer=language.sbuf if buffer is None else buffer,
                         name=name)
    isa.rng(t)
    return t


def random_seed(seed):
    """Seeds the kernel's generator: a number or a [1, 1] integer tile; the same seed gives the
    same draws."""
    from . import isa
    isa.set_rng_seed(seed)


def dropout(x, rate, dtype=None):
    """x with each element zeroed with probability rate (a number or a [P, 1] tile); the kept
    values are not rescaled (NKI's rule)."""
    from . import isa, language
    t = language.ndarray(list(x.shape), x.dtype if dtype is None else dtype)
    isa.dropout(t, x, rate)
    return t
