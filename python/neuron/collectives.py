"""nki.collectives and the cross-core nki.isa instructions (`core_barrier`, `sendrecv`): present
so that kernels which import them load, and refused at the calling line when a kernel reaches
one (rule `collectives`).

Why they are not emulated: neuron runs the programs of a launch grid (`kernel[2]`, `nl.nc(2)`)
one after another on one simulated core, so there is no second core running at the same time
to wait for or exchange data with, and a barrier between programs that run in sequence would
silently order writes differently from the hardware. Kernels that take a collective path only
when sharded across cores (an LNC of 2) run here with a grid of 1 (docs/nki-compat.md)."""
from ._span import user_span
from .errors import user_error

_WHY = ("neuron runs the programs of a launch grid one after another on one simulated core, "
        "so there is no other core or rank to synchronize or exchange data with; run the "
        "kernel unsharded (a grid of 1, LNC=1)")


def _refused(qualified):
    def call(*args, **kwargs):
        user_error("collectives", f"{qualified} is not supported: {_WHY}", user_span())
    call.__name__ = qualified.rsplit(".", 1)[-1]
    call.__qualname__ = call.__name__
    call.__doc__ = f"{qualified}: refused when called (neuron.collectives)."
    return call


class ReplicaGroup:
    """nki.collectives.ReplicaGroup: the ranks taking part in a collective. Constructing one is
    allowed (kernels build them up front); passing it to a collective is refused."""

    def __init__(self, *groups, **kwargs):
        self.groups, self.options = groups, kwargs

    def __repr__(self):
        return f"ReplicaGroup{self.groups!r}"


# The names of NKI's collectives module (all_reduce, all_gather, ...), each refused when called.
NAMES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
         "collective_permute_implicit", "collective_permute_implicit_current_processing_rank_id",
         "rank_id", "send", "recv", "broadcast")
for _name in NAMES:
    globals()[_name] = _refused(f"nki.collectives.{_name}")

core_barrier = _refused("nisa.core_barrier")
sendrecv = _refused("nisa.sendrecv")
