"""Instruction- and transfer-level calibration points (CALIBRATION.md sections 3 and 4): tiny
kernels whose profile isolates one published duration, and the measure that reads it back.

A measure takes the Profile and returns nanoseconds. Instruction durations are an event's
start to end (the instruction's occupancy plus its pipeline latency, as the vendor profiler's
tooltip shows them); chains are measured start to start.
"""
import neuron.isa as nisa
import neuron.language as nl


def _events(prof, opcode):
    names = [i[0] for i in prof.instrs]
    return [e for e in prof.events if names[e[0]] == opcode]


def duration(opcode, which=-1):
    """The duration of one `opcode` event (the last by default: warm, after any table load)."""
    def m(prof):
        e = _events(prof, opcode)[which]
        return e[3] - e[2]
    return m


def start_to_start(opcode):
    """Mean time between the starts of consecutive `opcode` events (a dependent chain)."""
    def m(prof):
        ev = _events(prof, opcode)
        return (ev[-1][2] - ev[0][2]) / (len(ev) - 1)
    return m


def table_load(prof):
    """Time an activation whose function differs from the previous one costs over one that
    does not: alternating exp/tanh minus repeated exp, per instruction (ACT_TABLE_LOAD)."""
    ev = _events(prof, "activation")
    half = len(ev) // 2
    same = (ev[half - 1][3] - ev[0][2]) / half
    alternating = (ev[-1][3] - ev[half][2]) / (len(ev) - half)
    return alternating - same


def dma_data(which=0):
    """The data movement of a dma_copy (the first by default): from its first byte on any DMA
    engine to its last, without the trigger and completion latency."""
    def m(prof):
        e = _events(prof, "dma_copy")[which]
        return e[6] if len(e) > 6 else e[3] - e[2]  # models without it: the whole transfer
    return m


def span(*opcodes):
    """First start to last end of the events of these opcodes (a group of instructions run
    back to back, their engine's time for them)."""
    def m(prof):
        names = [i[0] for i in prof.instrs]
        ev = [e for e in prof.events if names[e[0]] in opcodes]
        return max(e[3] for e in ev) - min(e[2] for e in ev)
    return m


def dma_pending(prof):
    """Trigger to completion of the one dma_copy."""
    e = _events(prof, "dma_copy")[0]
    return e[3] - e[2]


def dma_throughput_bytes_per_ns(total_bytes):
    """Bytes over trigger-of-first to completion-of-last of the loads (the final store left out)."""
    def m(prof):
        ev = _events(prof, "dma_copy")[:-1]
        return total_bytes / (max(e[3] for e in ev) - min(e[2] for e in ev))
    return m


# ---- kernels ----

def act_chain(x):
    """A RAW-dependent chain of 1-element activations (PG fig16)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in range(32):
        u = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.activation(u, nl.copy, t)
        t = u
    nl.store(out, t)
    return out


def one_tensor_tensor(x, y):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(r, a, b, nl.add)
    nl.store(out, r)
    return out


def one_activation(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.activation(r, nl.exp, a)
    nisa.activation(r, nl.exp, a)  # the second is measured: its table is already loaded
    nl.store(out, r)
    return out


def one_matmul(stat, mov):
    out = nl.ndarray((stat.shape[1], mov.shape[1]), nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(stat), nl.load(mov)
    acc = nl.ndarray((stat.shape[1], mov.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b, accumulate=False)
    nl.store(out, nl.copy(acc))
    return out


def matmul_stream(stat, mov):
    """64 back-to-back matmuls accumulating into one PSUM tile on resident operands (KO v3's
    TensorE stream over K)."""
    out = nl.ndarray((stat.shape[1], mov.shape[1]), nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(stat), nl.load(mov)
    acc = nl.ndarray((stat.shape[1], mov.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b, accumulate=False)
    for i in nl.affine_range(63):
        nisa.nc_matmul(acc, a, b, accumulate=True)
    nl.store(out, nl.copy(acc))
    return out


def table_switch(x):
    """16 exp (one table), then 16 alternating exp/tanh (a table load each)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    for i in range(16):
        nisa.activation(r, nl.exp, a)
    for i in range(16):
        nisa.activation(r, nl.tanh if i % 2 == 0 else nl.exp, a)
    nl.store(out, r)
    return out


def one_load(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, t)
    return out


def one_store(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(t, 0.0)
    nl.store(out, t)
    return out


def loads_of_width(x, cols=512):
    """Many [128, cols] loads out of a wide [128, W] tensor: `cols` contiguous elements per
    partition row and transfer (the DMA overview's bytes-per-partition sweep)."""
    W = x.shape[1]
    out = nl.ndarray((128, 1), x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, W // cols, cols), x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(W // cols):
        nisa.dma_copy(acc[:, i, :], x[:, i * cols:(i + 1) * cols])
    nl.store(out, acc[:, 0, 0:1])
    return out


# ---- the performance guide's ratios (PG, CALIBRATION.md 1.6): two ways to the same result ----

_REPEAT = 8  # independent instructions per variant, each writing its own slice


def _rows_out(x):
    return (nl.ndarray((x.shape[0], _REPEAT, x.shape[1]), x.dtype, buffer=nl.shared_hbm),
            nl.ndarray((x.shape[0], _REPEAT, x.shape[1]), x.dtype, buffer=nl.sbuf))


def act_fused(x, b):
    """exp(2 x + b) as one activation (scale and bias are part of the instruction)."""
    out, r = _rows_out(x)
    a, bb = nl.load(x), nl.load(b)
    for i in range(_REPEAT):
        nisa.activation(r[:, i, :], nl.exp, a, bias=bb, scale=2.0)
    nl.store(out, r)
    return out


def act_unfused(x, b):
    """exp(2 x + b) as three ScalarE instructions: multiply, add, exp."""
    out, r = _rows_out(x)
    _, m = _rows_out(x)
    _, t = _rows_out(x)
    a, bb = nl.load(x), nl.load(b)
    for i in range(_REPEAT):
        nisa.activation(m[:, i, :], nl.copy, a, scale=2.0)
        nisa.activation(t[:, i, :], nl.copy, m[:, i, :], bias=bb)
        nisa.activation(r[:, i, :], nl.exp, t[:, i, :])
    nl.store(out, r)
    return out


def _row_sums(x, parts):
    """Row sums of a [128, F] tile, _REPEAT times, each as `parts` tensor_reduces of
    128 / parts partitions."""
    out = nl.ndarray((128, _REPEAT), x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    r = nl.ndarray((128, _REPEAT), x.dtype, buffer=nl.sbuf)
    rows = 128 // parts
    for i in range(_REPEAT):
        for p in range(parts):
            nisa.tensor_reduce(r[p * rows:(p + 1) * rows, i:i + 1], nl.add,
                               a[p * rows:(p + 1) * rows], axis=1)
    nl.store(out, r)
    return out


def reduce_128(x):
    """One 128-partition tensor_reduce a row sum."""
    return _row_sums(x, 1)


def reduce_64x2(x):
    """Two 64-partition tensor_reduces a row sum."""
    return _row_sums(x, 2)


def _scan(x, fused):
    """A dependent scan h = 0.5 h + 1 at one element per partition (Mamba's scan): each step
    one tensor_scalar with two ops (fused), or one instruction per op."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    h = nl.load(x)
    for _ in range(16):
        nxt = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        if fused:
            nisa.tensor_scalar(nxt, h, nl.multiply, 0.5, op1=nl.add, operand1=1.0)
        else:
            m = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(m, h, nl.multiply, 0.5)
            nisa.tensor_scalar(nxt, m, nl.add, 1.0)
        h = nxt
    nl.store(out, h)
    return out


def scan_two_ops(x):
    return _scan(x, True)


def scan_one_op_each(x):
    return _scan(x, False)


def micro_cases():
    from .cases import Case  # noqa: circular at import time only
    bf16, f32 = nl.bfloat16, nl.float32
    cases = [
        Case("", "ScalarE dependent 1-element activations, start to start", "trn1", act_chain,
             [((128, 1), f32)], 189, "PG fig16", measure=start_to_start("activation")),
        Case("", "VectorE tensor_tensor fp32 [64, 8192]", "trn1", one_tensor_tensor,
             [((64, 8192), f32)] * 2, 14968, "PG fig17", measure=duration("tensor_tensor")),
        Case("", "VectorE tensor_tensor fp32 [128, 8192]", "trn1", one_tensor_tensor,
             [((128, 8192), f32)] * 2, 14987, "PG fig10", measure=duration("tensor_tensor")),
        Case("", "ScalarE activation fp32 [128, 8192]", "trn1", one_activation,
             [((128, 8192), f32)], 6000, "PG fig10 (bar)", measure=duration("activation")),
        Case("", "TensorE matmul bf16 128x1 stationary, 128 moving", "trn1", one_matmul,
             [((128, 1), bf16), ((128, 128), bf16)], 188, "PG fig20-21",
             measure=duration("nc_matmul")),
        Case("", "TensorE matmul bf16 128x96 stationary, 128 moving", "trn1", one_matmul,
             [((128, 96), bf16), ((128, 128), bf16)], 219, "PG fig18",
             measure=duration("nc_matmul")),
        Case("", "TensorE fp32 nc_matmul 128x128x512, back to back", "trn2", matmul_stream,
             [((128, 128), f32), ((128, 512), f32)], 28.16e6 / 32768, "KO-TRN2 v3 (derived)",
             measure=start_to_start("nc_matmul")),
        Case("", "ScalarE activation table load", "trn1", table_switch, [((128, 1), f32)], 368,
             "legacy profiling guide", measure=table_load),
        Case("", "ScalarE exp bf16 [4, 4096]", "trn2", one_activation, [((4, 4096), bf16)], 3750,
             "DMAO example 1 (bar)", measure=duration("activation")),
        Case("", "ScalarE exp bf16 [128, 128]", "trn2", one_activation, [((128, 128), bf16)], 450,
             "DMAO example 2 (bar)", measure=duration("activation")),
        Case("", "DMA 32 KiB [4, 4096] bf16 HBM->SBUF: trigger to completion", "trn2", one_load,
             [((4, 4096), bf16)], 2400, "DMAO example 1 (bar)", measure=dma_pending),
        Case("", "DMA [128, 128] bf16 HBM->SBUF: trigger to completion", "trn2", one_load,
             [((128, 128), bf16)], 1250, "DMAO example 2 (bar)", measure=dma_pending),
        Case("", "DMA 4 MiB SBUF->HBM spill [128, 8192] fp32", "trn1", one_store,
             [((128, 8192), f32)], 16955, "PG fig14", measure=dma_pending),
        Case("", "DMA 32 KiB [4, 4096] bf16 on one engine: data movement", "trn2", one_load,
             [((4, 4096), bf16)], 1416, "DMAO example 1 (text)", measure=dma_data()),
        Case("", "DMA [128, 128] bf16, 16 x 2 KiB packets: data movement", "trn2", one_load,
             [((128, 128), bf16)], 97, "DMAO example 2", measure=dma_data()),
        Case("", "DMA 32 KiB on one engine (modelled as a store [4, 2048] fp32)", "trn1",
             one_store, [((4, 2048), f32)], 1810, "PG fig30", measure=dma_data(-1),
             note="direction not stated; as a load the trn1 read rate gives 4.8 us"),
    ]
    cases.append(Case("", "ScalarE 1-element activation in a dependent chain, duration", "trn1",
                      act_chain, [((128, 1), f32)], 159, "PG fig16",
                      measure=duration("activation")))
    # The performance guide's stated speedups: the slow variant is the reference, the row is
    # its time over the fast variant's (published "3x faster", "2x faster", "2x speedup").
    row, col = [((128, 512), f32), ((128, 1), f32)], [((128, 512), f32)]
    for name, fast, slow, args, ops, factor in [
            ("activation(exp, x, bias, scale) vs multiply, add, exp [128, 512] fp32, speedup",
             act_fused, act_unfused, row, ("activation",), 3.0),
            ("one 128-partition tensor_reduce vs two of 64 [128, 512] fp32, speedup",
             reduce_128, reduce_64x2, col, ("tensor_reduce",), 2.0),
            ("scan step as one two-op tensor_scalar vs two, 1 element, speedup",
             scan_two_ops, scan_one_op_each, [((128, 1), f32)], ("tensor_scalar",), 2.0)]:
        ref = f"{name} (slow variant)"
        cases.append(Case("", ref, "trn1", slow, args, 1, "PG", measure=span(*ops),
                          reference=True))
        cases.append(Case("", name, "trn1", fast, args, factor, "PG (ratio)",
                          measure=span(*ops), faster_than=ref))
    # DMA overview: relative throughput vs bytes per partition (32 KiB = 100%), 128 partitions
    total = 128 * 128 * 1024  # bytes moved per point: 128 KiB per partition (SBUF holds it)
    for bpp, pct in [(32, 1.5), (64, 2.5), (128, 5), (256, 10), (512, 21), (1024, 42),
                     (2048, 81), (4096, 97), (8192, 98), (16384, 99)]:
        cols = bpp // 4
        cases.append(Case("", f"DMA throughput at {bpp} B/partition (% of 32 KiB)", "trn2",
                          loads_of_width, [((128, total // 128 // 4), f32)], pct,
                          "DMAO fig (relative)", measure=dma_throughput_bytes_per_ns(total),
                          kwargs=dict(cols=cols), relative_to="DMA32K"))
    cases.append(Case("", "DMA32K", "trn2", loads_of_width, [((128, total // 128 // 4), f32)],
                      100, "DMAO fig (relative)", measure=dma_throughput_bytes_per_ns(total),
                      kwargs=dict(cols=8192), reference=True))
    return cases
