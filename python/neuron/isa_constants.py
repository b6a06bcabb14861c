"""The enums of the current NKI API's `nki.isa` (also `nki.isa.constants`), with the current
generation's values (../shared/NKI_API.md §5.5; the legacy values are neuron.legacy.isa's).
Instructions here accept them as hints: the compiler picks engines, DMA queues and matmul modes
itself. `oob_mode` is neuron.isa's own (it decides what an indirect DMA does)."""
import enum

from . import _C


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.IntEnum):  # renumbered from the legacy API's
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class dma_engine(enum.IntEnum):
    dma = 1
    gpsimd_dma = 2


oob_mode = _C.oob_mode

# the module-level engine aliases (deprecated in the current API, still accepted)
unknown_engine, tensor_engine, scalar_engine, gpsimd_engine, vector_engine, sync_engine = (
    engine.unknown, engine.tensor, engine.scalar, engine.gpsimd, engine.vector, engine.sync)

def get_nc_version():
    """NC-v3: kernels are traced once for every target, and trn2 is the default one."""
    return nc_version.gen3


def get_nc_sub_version():
    """The revision within the generation get_nc_version() names: 0 (neuron models one
    revision of each)."""
    return 0
