"""neuron.isa (import as nisa): NKI `nki.isa` instructions, current generation: the destination
comes first and nothing is returned; the output dtype is the destination's. `name=` (a
scheduling label) and `engine=` are accepted and ignored: the compiler picks the engine."""
from . import _C
from . import eager as _eager
from ._span import user_span
from .errors import user_error
from .language import _Fn, _int, _operand


def _op(f):
    if isinstance(f, _Fn):
        return f.name
    if isinstance(f, str):
        return f
    name = getattr(f, "__name__", None)  # numpy ufuncs (np.add) and the like
    if isinstance(name, str):
        return name
    raise TypeError(f"expected an nl function as the operator, got {f!r}")


def _pattern(pattern):
    return [tuple(_int(v, "a pattern [stride, count] entry") for v in p) for p in pattern]


@_eager.op(writes=("dst",), matmul=True)
def nc_matmul(dst, stationary, moving, accumulate=None, name=None):
    """dst[M,N] (PSUM) = stationary[K,M].T @ moving[K,N] in fp32; accumulate None (or -1) lets
    the compiler decide (first write overwrites, later ones add), False overwrites, True adds."""
    _C.nc_matmul(dst, stationary, moving, -1 if accumulate is None else int(accumulate),
                 user_span())


@_eager.op(writes=("dst",))
def nc_transpose(dst, data, engine=None, name=None):
    _C.nc_transpose(dst, data, user_span())


@_eager.op(writes=("dst", "reduce_res"))
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               name=None):
    _C.activation(dst, _op(op), data, bias, _operand(scale),
                  None if reduce_op is None else _op(reduce_op), reduce_res, user_span())


@_eager.op(writes=("dst",))
def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    _C.tensor_tensor(dst, data1, data2, _op(op), user_span())


@_eager.op(writes=("dst",))
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, name=None):
    _C.tensor_scalar(dst, data, _op(op0), _operand(operand0), bool(reverse0),
                     None if op1 is None else _op(op1),
                     None if operand1 is None else _operand(operand1), bool(reverse1),
                     user_span())


@_eager.op(writes=("dst",))
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    # dst keeps the reduced dims as size 1 either way: keepdims only shapes NKI's result view.
    axes = [axis] if isinstance(axis, int) else list(axis)
    _C.tensor_reduce(dst, _op(op), data, axes, bool(negate), user_span())


@_eager.op(writes=("dst",))
def tensor_copy(dst, src, engine=None, name=None):
    _C.tensor_copy(dst, src, user_span())


@_eager.op(writes=("dst",))
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    if reverse_pred:
        user_error("unsupported", "tensor_copy_predicated(reverse_pred=True) is not supported "
                   "yet; invert the predicate with nl.equal(predicate, 0.0)", user_span())
    _C.tensor_copy_predicated(dst, src, predicate, user_span())


@_eager.op(writes=("dst",))
def memset(dst, value, engine=None, name=None):
    _C.memset(dst, float(value), user_span())


@_eager.op(writes=("dst",))
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """dst[p, f...] = offset + p * channel_multiplier + sum(stride_i * f_i); pattern is
    [[stride, count], ...] over the free dims."""
    _C.iota(dst, _pattern(pattern), _int(offset, "iota offset"),
            _int(channel_multiplier, "iota channel_multiplier"), user_span())


@_eager.op(writes=("dst",))
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
                  offset=0, name=None):
    _C.affine_select(dst, _pattern(pattern), _int(channel_multiplier, "channel_multiplier"),
                     on_true_tile,
                     float(on_false_value), "equal" if cmp_op is None else _op(cmp_op),
                     _int(offset, "affine_select offset"), user_span())


@_eager.op(writes=("dst",))
def dma_copy(dst, src, name=None):
    _C.dma_copy(dst, src, user_span())
