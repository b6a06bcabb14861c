"""The published figures the timing model is calibrated against (CALIBRATION.md, with its source
tags), each paired with the calibration kernel and shape that reproduce the measured setup.

A Case is one published number. Cases of one `group` form a progression: the script checks that
the model ranks consecutive steps as the measurement does (a step more than FLAT faster or slower
must be modelled faster or slower; a flat step must be modelled flat).
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

import neuron.language as nl

from . import kernels as K
from . import micro as U

FLAT = 0.05  # steps within 5% of each other count as "not faster" (KO-TRN2 v3/v4/v5: +-0.7%)


@dataclass
class Case:
    group: str            # progression name; "" for a stand-alone figure
    name: str
    target: str
    kernel: Callable
    args: list            # (shape, dtype) per kernel parameter
    published_ns: float
    source: str
    measure: str = "total"   # "total" (kernel span + launch floor) or a micro.* measure name
    kwargs: dict = field(default_factory=dict)
    note: str = ""
    relative_to: Optional[str] = None  # relative figures: ratio against this case's figure
    reference: bool = False  # only the reference of relative figures (not a row of the table)
    faster_than: Optional[str] = None  # a speedup: that case's time over this one's


def _mm(K_, M, N, dt):
    return [((K_, M), dt), ((K_, N), dt)]


def _mamba(ch, seq, state=16):
    f32 = nl.float32
    return [((1, ch, seq), f32), ((1, ch, seq), f32), ((ch, state), f32),
            ((1, state, seq), f32), ((1, state, seq), f32)]


MS, US = 1e6, 1e3


def full_cases():
    bf16, f32 = nl.bfloat16, nl.float32
    big = _mm(8192, 4096, 8192, bf16)
    big32 = _mm(8192, 4096, 8192, f32)
    cases = [
        # [MM-TRN1] matrix-multiplication tutorial, trn1, bf16 [4096,8192]@[8192,8192]
        Case("MM-TRN1", "tiled", "trn1", K.matmul_tiled, big, 51.80 * MS, "MM-TRN1"),
        Case("MM-TRN1", "hoist loads", "trn1", K.matmul_hoisted, big, 42.96 * MS, "MM-TRN1"),
        Case("MM-TRN1", "block free dims 2x2", "trn1", K.matmul_block_free, big, 22.07 * MS,
             "MM-TRN1"),
        Case("MM-TRN1", "fully optimized 16/2/8", "trn1", K.matmul_fully_optimized, big,
             6.97 * MS, "MM-TRN1"),
        # [KO-TRN2] kernel-optimization tutorial, trn2, same shape in fp32 (profile spans)
        Case("KO-TRN2", "v2 tiled", "trn2", K.matmul_tiled, big32, 39.89 * MS, "KO-TRN2"),
        Case("KO-TRN2", "v3 hoisted", "trn2", K.matmul_hoisted, big32, 28.20 * MS, "KO-TRN2"),
        Case("KO-TRN2", "v4 blocked M/N 2x2", "trn2", K.matmul_block_free_per_k, big32,
             28.41 * MS, "KO-TRN2"),
        Case("KO-TRN2", "v5 blocked M/N/K", "trn2", K.matmul_fully_optimized, big32, 28.30 * MS,
             "KO-TRN2", kwargs=dict(BM=8, BN=1, BK=8),
             note="fp32 blocks: 16/2/8 does not fit trn2's SBUF with its operands double-buffered"),
    ]
    # [NA-GEMM] trn2 GEMM size sweep (nki-autotune scoreboard), bf16, lhsT x rhs
    for n, ms in [(512, 0.054), (1024, 0.076), (1536, 0.141), (2048, 0.269), (2560, 0.483),
                  (3072, 0.795), (3584, 1.247), (4096, 1.823), (4608, 2.573), (5120, 3.504)]:
        cases.append(Case("NA-GEMM", f"{n}^3", "trn2", K.gemm_blocked, _mm(n, n, n, bf16),
                          ms * MS, "NA-GEMM"))
    for n, ms in [(2048, 0.288), (4096, 1.886), (5120, 3.603)]:
        cases.append(Case("", f"GEMM lhs x rhs {n}^3 (on-chip transpose)", "trn2",
                          K.gemm_blocked_transposing, [((n, n), bf16), ((n, n), bf16)], ms * MS,
                          "NA-GEMM"))
    # [MAMBA] fused Mamba tutorial, fp32, one NeuronCore (instance not stated: NC-v2 assumed)
    cases += [
        Case("MAMBA-512x256", "v1 [1,512,256,16]", "trn1", K.mamba_v1, _mamba(256, 512),
             172.93 * US, "MAMBA"),
        Case("MAMBA-512x4096", "v1 [1,512,4096,16]", "trn1", K.mamba_v1, _mamba(4096, 512),
             2.34 * MS, "MAMBA"),
        Case("MAMBA-512x4096", "v2 [1,512,4096,16]", "trn1", K.mamba_v2, _mamba(4096, 512),
             1.61 * MS, "MAMBA"),
        Case("MAMBA-8192x4096", "v3 [1,8192,4096,16]", "trn1", K.mamba_v3, _mamba(4096, 8192),
             27.8 * MS, "MAMBA"),
    ]
    for seq, ms in [(1024, 3.3), (2048, 6.6), (4096, 13.3)]:
        cases.append(Case("MAMBA-v3-seq", f"v3 seq_len {seq}", "trn1", K.mamba_v3,
                          _mamba(4096, seq), ms * MS, "MAMBA"))
    cases += U.micro_cases()
    return cases


def reduced_cases():
    """Smaller shapes with the same bottlenecks, for CI: only the rankings are checked; and
    the instruction- and transfer-level figures (tiny kernels at their published shapes, each
    checked against its figure)."""
    bf16, f32 = nl.bfloat16, nl.float32
    mm = _mm(4096, 2048, 8192, bf16)
    mm32 = _mm(4096, 2048, 8192, f32)
    return [
        Case("MM-TRN1", "tiled", "trn1", K.matmul_tiled, mm, 51.80, "MM-TRN1"),
        Case("MM-TRN1", "hoist loads", "trn1", K.matmul_hoisted, mm, 42.96, "MM-TRN1"),
        Case("MM-TRN1", "block free dims 2x2", "trn1", K.matmul_block_free, mm, 22.07, "MM-TRN1"),
        Case("MM-TRN1", "fully optimized", "trn1", K.matmul_fully_optimized, mm, 6.97, "MM-TRN1"),
        Case("KO-TRN2", "v2 tiled", "trn2", K.matmul_tiled, mm32, 39.89, "KO-TRN2"),
        Case("KO-TRN2", "v3 hoisted", "trn2", K.matmul_hoisted, mm32, 28.20, "KO-TRN2"),
        Case("KO-TRN2", "v4 blocked M/N 2x2", "trn2", K.matmul_block_free_per_k, mm32, 28.41,
             "KO-TRN2"),
        Case("KO-TRN2", "v5 blocked M/N/K", "trn2", K.matmul_fully_optimized, mm32, 28.30,
             "KO-TRN2", kwargs=dict(BM=8, BN=1, BK=8)),
        Case("MAMBA", "v1", "trn1", K.mamba_v1, _mamba(1024, 512), 2.34, "MAMBA"),
        Case("MAMBA", "v2", "trn1", K.mamba_v2, _mamba(1024, 512), 1.61, "MAMBA"),
    ] + U.micro_cases()
