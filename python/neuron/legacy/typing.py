"""neuronxcc.nki.typing (import as nt): kernel parameter annotations.

`nt.tensor[128, 512]`, `nt.tensor[[128, 512], nl.float32]` (shape, and dtype) are checked
against the argument when a kernel is traced (as parameter annotations; annotations of local
variables are never evaluated by Python, so they are accepted unchecked). `nt.mutable_tensor`
marks a parameter the kernel writes (and returns); `nt.scalar`, `nt.mutable` and
`nt.immutable` are accepted without a check."""
from .. import language as _nl


class TensorType:
    def __init__(self, shape=None, dtype=None, mutable=False):
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self.dtype = None if dtype is None else _nl.to_dtype(dtype)
        self.mutable = mutable

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) == 2 and isinstance(keys[0], (list, tuple)):
            return TensorType(keys[0], keys[1], self.mutable)
        if len(keys) == 1 and isinstance(keys[0], (list, tuple)):
            return TensorType(keys[0], None, self.mutable)
        return TensorType(keys, None, self.mutable)

    def __repr__(self):
        name = "nt.mutable_tensor" if self.mutable else "nt.tensor"
        if self.shape is None:
            return name
        dt = "" if self.dtype is None else f", {self.dtype.name}"
        return f"{name}[{list(self.shape)}{dt}]"

    def __instancecheck__(self, obj):
        """isinstance(x, nt.tensor) (NxD's top-k checks its input so): x is a tensor or a view
        of one (a Reshaped HBM view, a grid-indexed view), matching the annotation's shape and
        dtype when it has them."""
        from .. import _C
        from .views import GridView, Reshaped
        if not isinstance(obj, (_C.Tensor, GridView, Reshaped)):
            return False
        return self.mismatch(obj) is None

    def mismatch(self, t):
        """Why tensor t does not match this annotation, or None."""
        if self.shape is not None and tuple(t.shape) != self.shape:
            return f"has shape {list(t.shape)} but is annotated {self!r}"
        if self.dtype is not None and t.dtype != self.dtype:
            return f"is {t.dtype.name} but is annotated {self!r}"
        return None


class _Qualifier:
    def __init__(self, name):
        self.name = name

    def __getitem__(self, key):
        return self

    def __repr__(self):
        return f"nt.{self.name}"


tensor = TensorType()
mutable_tensor = TensorType(mutable=True)
scalar = _Qualifier("scalar")
mutable = _Qualifier("mutable")
immutable = _Qualifier("immutable")
