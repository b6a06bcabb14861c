# Names of the current NKI API that production kernels import (../shared/NKI_API.md §2, §5.5):
# the enums of nki.isa (and nki.isa.constants), NKIObject config classes as compile-time
# parameters, NumPy conversions with nl dtypes, and the constants of nl.
import dataclasses

import ml_dtypes
import numpy as np
import pytest

import neuron.compat

neuron.compat.install()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.isa.constants as constants  # noqa: E402
import nki.language as nl  # noqa: E402
import neuronxcc.nki.language as lnl  # noqa: E402


def test_isa_enums_have_the_current_values():
    assert constants is nisa.constants and constants.engine is nisa.engine
    assert (nisa.engine.dma, nisa.engine.vector, nisa.vector_engine) == (4, 5, nisa.engine.vector)
    assert (nisa.reduce_cmd.reset_reduce, nisa.reduce_cmd.load_reduce) == (3, 4)
    assert (nisa.dge_mode.unknown, nisa.dge_mode.none) == (0, 3)  # renumbered in NKI 0.3
    assert nisa.nc_version.gen4 == 4 and nisa.get_nc_version() == nisa.nc_version.gen3
    assert nisa.matmul_perf_mode.double_row.value == "double_row"
    assert nisa.dma_engine.gpsimd_dma == 2


def test_nl_constants_and_numpy_dtypes():
    assert nl.private_hbm == nl.hbm
    assert nl.fp32.min == float(np.finfo(np.float32).min)
    # the legacy bf16 limits and finfo (NKI_API.md 3.1): 0xff80 is bf16's -inf
    assert lnl.bfp16.min == float(np.frombuffer(np.uint16(0xFF80).tobytes(),
                                                ml_dtypes.bfloat16)[0]) == float("-inf")
    assert lnl.bfp16.max == float(np.frombuffer(np.uint16(0x7F7F).tobytes(),
                                                ml_dtypes.bfloat16)[0])
    assert lnl.finfo(lnl.float32).max == np.finfo(np.float32).max
    assert lnl.finfo(lnl.bfloat16).eps == 2.0 ** -7
    assert lnl.finfo(lnl.float8_e4m3fn).max == 448.0
    assert (lnl.tile_size.psum_min_align, lnl.tile_size.sbuf_min_align) == (4, 1)
    assert nl.tile_size.total_available_sbuf_size > 0
    # NKI dtypes are NumPy dtypes: array.astype(nl.bfloat16) (the pipelined-attention sample)
    x = np.array([1.0, 2.5], np.float64)
    assert x.astype(lnl.bfloat16).dtype.name == "bfloat16"
    assert np.zeros(2, nl.float32).dtype == np.float32
    assert np.zeros(2, nl.float8_e4m3fn).dtype == np.dtype(ml_dtypes.float8_e4m3fn)


@dataclasses.dataclass(frozen=True)
class Cfg(nl.NKIObject):
    scale: float = 1.0
    name: str = "x"


@nki.jit
def scaled(a, cfg=Cfg()):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), cfg.scale))
    return out


def test_nkiobject_configs_are_compile_time_parameters():
    a = np.linspace(-1, 1, 128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(scaled(a), a)
    np.testing.assert_array_equal(scaled(a, Cfg(2.0)), a * 2)
    np.testing.assert_array_equal(scaled(a, cfg=Cfg(-3.0, "y")), a * -3)
