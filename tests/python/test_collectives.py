# Core collectives between the programs of a grid (python/neuron/collectives.py): nisa.sendrecv
# and nisa.core_barrier across the cores of kernel[n] / an LNC-2 launch, checked against NumPy
# on the simulator and natively; their errors; and nki.collectives (other devices) refused.
import numpy as np
import pytest

import neuron
import neuron.compat

nki = neuron.compat.install()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from helpers import line_of  # noqa: E402

RNG = np.random.default_rng(7)
COMPILED = ("native", "simulate")


def all_reduce(x):
    """Core p loads x[p]; the cores swap tiles with sendrecv; each stores the sum."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[pid])
    theirs = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    total = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
    nisa.dma_copy(dst=out[pid], src=total)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_sendrecv_exchanges_tiles_between_the_two_cores(mode):
    x = RNG.standard_normal((2, 128, 48)).astype(np.float32)
    y = neuron.kernel(all_reduce, mode=mode)[2](x)
    np.testing.assert_array_equal(y, np.broadcast_to(x[0] + x[1], x.shape))


def barrier_through_hbm(x):
    """Core p writes 2 * x[p] into HBM scratch (not returned), waits at the barrier, then reads
    what the other core wrote, tile by tile in affine_range loops."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    for i in nl.affine_range(x.shape[1]):
        t = nl.ndarray(x.shape[2:], x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[pid, i])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=scratch[pid, i], src=t)
    nisa.core_barrier(data=scratch, cores=(0, 1))
    for i in nl.affine_range(x.shape[1]):
        t = nl.ndarray(x.shape[2:], x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=scratch[1 - pid, i])
        nisa.dma_copy(dst=out[pid, i], src=t)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_what_a_core_wrote_before_the_barrier_is_seen_by_the_other_after_it(mode):
    x = RNG.standard_normal((2, 3, 128, 16)).astype(np.float32)
    y = neuron.kernel(barrier_through_hbm, mode=mode)[2](x)
    np.testing.assert_array_equal(y, 2 * x[::-1])


def ring_shift(x):
    """n cores: core p sends its tile to p + 1 and receives from p - 1, in place."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid, n = nl.program_id(0), nl.num_programs(0)
    t = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid])
    nisa.sendrecv(src=t, dst=t, send_to_rank=(pid + 1) % n, recv_from_rank=(pid - 1) % n,
                  pipe_id=0)
    nisa.dma_copy(dst=out[pid], src=t)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_a_ring_of_four_cores_exchanges_in_place(mode):
    x = RNG.standard_normal((4, 32, 8)).astype(np.float32)
    y = neuron.kernel(ring_shift, mode=mode)[4](x)
    np.testing.assert_array_equal(y, np.roll(x, 1, axis=0))


def one_core(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.core_barrier(data=t, cores=(0,))
    u = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=u, send_to_rank=0, recv_from_rank=0, pipe_id=0)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_on_a_grid_of_one_a_barrier_waits_for_nothing_and_sendrecv_copies():
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(neuron.kernel(one_core, mode="simulate")(x), x)


def sends_to_core_one(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
    nisa.dma_copy(dst=out, src=t)
    return out


def only_core_zero_waits(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    if nl.program_id(0) == 0:
        nisa.core_barrier(data=out, cores=(0, 1))
    return out


def unpaired(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    # 0 sends to 1, 1 to 2, 2 to 0, but every core receives from the next one
    nisa.sendrecv(src=t, dst=t, send_to_rank=(pid + 1) % 3, recv_from_rank=(pid + 1) % 3,
                  pipe_id=0)
    nisa.dma_copy(dst=out, src=t)
    return out


def in_a_runtime_loop(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)

    def body(i):
        nisa.core_barrier(data=out, cores=(0, 1))
    nl.fori_loop(0, 2, body)
    return out


@pytest.mark.parametrize("fn,grid,text,words", [
    (sends_to_core_one, 1, "nisa.sendrecv(", "send_to_rank=1, recv_from_rank=1 but the grid has "
                                             "one program"),
    (only_core_zero_waits, 2, "nisa.core_barrier(", "program 1 reaches 0 core collectives"),
    (unpaired, 3, "nisa.sendrecv(", "program 0 sends to program 1, which receives from program 2"),
    (in_a_runtime_loop, 2, "nisa.core_barrier(", "inside a runtime loop or conditional"),
])
def test_collectives_that_cannot_pair_name_the_rule_and_the_line(fn, grid, text, words):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode="simulate")[grid](np.zeros((16, 8), np.float32))
    assert e.value.rule == "collectives" and words in e.value.message, e.value.message
    if fn is not only_core_zero_waits:  # that one is found where the kernel ends
        assert e.value.line == line_of(fn, text)


def test_eager_mode_asks_for_a_compiled_kernel():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(all_reduce, mode="eager")[2](np.zeros((2, 16, 8), np.float32))
    assert e.value.rule == "collectives" and "compiled kernel" in e.value.message
    assert e.value.line == line_of(all_reduce, "nisa.sendrecv(")


def gather_kernel(x):
    import nki.collectives as ncc
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    ncc.all_gather(dsts=[out], srcs=[x], replica_group=ncc.ReplicaGroup([[0, 1]]),
                   collective_dim=0)
    return out


def test_rank_collectives_outside_a_rank_launch_name_run_ranks_at_the_calling_line():
    """nki.collectives exchange between ranks (test_ranks.py); one launch is one rank."""
    with pytest.raises(neuron.NeuronError) as e:
        nki.jit(gather_kernel)[2](np.zeros((128, 4), np.float32))
    assert e.value.rule == "collectives" and "neuron.run_ranks(" in e.value.message
    assert e.value.line == line_of(gather_kernel, "ncc.all_gather(")


def scratch_in_shared_hbm(x):
    """NKI's attention tutorials keep intermediate results in shared_hbm tensors they do not
    return: those are the kernel's scratch."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    tmp = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(tmp, nl.multiply(nl.load(x), 3.0))
    nl.store(out, nl.add(nl.load(tmp), 1.0))
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_a_shared_hbm_tensor_not_returned_is_scratch(mode):
    x = RNG.standard_normal((64, 32)).astype(np.float32)
    y = neuron.kernel(scratch_in_shared_hbm, mode=mode)(x)
    np.testing.assert_allclose(y, x * 3 + 1, rtol=1e-6)


def big_tiles_across_a_barrier(x):
    """Each core keeps a 112 KB-per-partition tile live across the barrier: the two together
    exceed one core's SBUF, as they may, each core having its own."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    big = nl.ndarray((128, 28000), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=big[:, 0:8], src=x[pid])
    nisa.core_barrier(data=out, cores=(0, 1))
    nisa.dma_copy(dst=out[pid], src=big[:, 0:8])
    return out


def test_each_core_has_its_own_sbuf():
    from neuron import _C
    assert _C.sbuf_bytes_per_partition("trn2x2") == 2 * _C.sbuf_bytes_per_partition("trn2")
    assert 28000 * 4 * 2 > _C.sbuf_bytes_per_partition("trn2")
    x = RNG.standard_normal((2, 128, 8)).astype(np.float32)
    for mode in COMPILED:
        np.testing.assert_array_equal(neuron.kernel(big_tiles_across_a_barrier,
                                                    mode=mode)[2](x), x)


def lopsided_sbuf(x):
    """Core 0 keeps two 112 KB-per-partition tiles live across the barrier, core 1 one: 224 KB
    on core 0 is more than a trn2 core's SBUF, though the three fit the two cores' together."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    tiles = [nl.ndarray((128, 28000), nl.float32, buffer=nl.sbuf) for _ in range(2 - pid)]
    for t in tiles:
        nisa.dma_copy(dst=t[:, 0:8], src=x[pid])
    nisa.core_barrier(data=out, cores=(0, 1))
    for t in tiles:
        nisa.dma_copy(dst=out[pid], src=t[:, 0:8])
    return out


def lopsided_psum(x):
    """Core 1 keeps nine [128, 512] fp32 accumulators (a 2 KiB bank each) live across the
    barrier, core 0 one: a trn2 core has 8 banks, the two cores 16."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid])
    accs = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(1 + 8 * pid)]
    for a in accs:
        nisa.tensor_copy(dst=a[:, 0:8], src=t)
    nisa.core_barrier(data=out, cores=(0, 1))
    for a in accs:  # t, read by every fill, is added to after all of them: all nine live
        nisa.tensor_tensor(dst=t, data1=t, data2=a[:, 0:8], op=nl.add)
    nisa.dma_copy(dst=out[pid], src=t)
    return out


@pytest.mark.parametrize("fn,rule,words", [
    (lopsided_sbuf, "sbuf-capacity", "SBUF needs 224000 bytes per partition on core 0 of 2 but "
                                     "trn2 has 212984"),
    (lopsided_psum, "psum-capacity", "PSUM needs 9 banks of 2048 bytes on core 1 of 2 but trn2 "
                                     "has 8"),
])
def test_a_core_cannot_borrow_its_siblings_memory(fn, rule, words):
    """Each core's tiles are checked against that core's SBUF and PSUM, not the grid's total."""
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode="simulate")[2](np.zeros((2, 128, 8), np.float32))
    assert e.value.rule == rule and words in e.value.message, e.value.message


def test_each_cores_tiles_lie_in_its_own_part_of_the_joint_memory():
    """The tiles of core c sit at c * (one core's capacity) + their offset within that core, so
    the cores' tiles never overlap and each core's fit its own memory."""
    from neuron import _C
    cap = _C.sbuf_bytes_per_partition("trn2")
    x = RNG.standard_normal((2, 128, 8)).astype(np.float32)
    k = neuron.kernel(big_tiles_across_a_barrier, mode="simulate")[2]
    np.testing.assert_array_equal(k(x), x)
    import re
    ir = str(k.compile(x).kernel)
    tiles = re.findall(r"(\w+): float32\[128, 28000\] sbuf core=(\d) offset=(\d+)", ir)
    assert sorted((int(c), int(o) // cap) for _, c, o in tiles) == [(0, 0), (1, 1)], ir
    for _, c, o in tiles:
        assert int(c) * cap <= int(o) and int(o) + 28000 * 4 <= (int(c) + 1) * cap


# ---- the legacy nl.all_reduce over the programs of a grid ------------------------------------

import neuronxcc.nki.language as lnl  # noqa: E402  (the legacy API, after compat.install)


def legacy_all_reduce(x):
    """Program (i, j) of a [G0, G1] grid loads x[i, j]; it gets the sum over j (its row of the
    grid) and the max over the whole grid, in bf16 for the max."""
    out = lnl.ndarray(x.shape, x.dtype, buffer=lnl.shared_hbm)
    i, j = lnl.program_id(0), lnl.program_id(1)
    t = lnl.load(x[i, j])
    row_sum = lnl.all_reduce(t, op=np.add, program_axes=[1])
    grid_max = lnl.all_reduce(t, op=lnl.maximum, program_axes=(0, 1), dtype=lnl.bfloat16)
    lnl.store(out[i, j], row_sum + grid_max)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_legacy_all_reduce_combines_the_programs_along_the_axes(mode):
    # Multiples of 1/8 below 16: their sums of three and bf16 maxima are exact.
    x = (RNG.integers(-64, 64, (2, 3, 128, 64)) / 8).astype(np.float32)
    y = neuron.kernel(legacy_all_reduce, mode=mode)[2, 3](x)
    ref = x.astype(np.float64).sum(axis=1, keepdims=True) + x.max(axis=(0, 1), keepdims=True)
    np.testing.assert_array_equal(y, np.broadcast_to(ref, x.shape).astype(np.float32))


def legacy_all_reduce_1d(x):
    out = lnl.ndarray(x.shape, x.dtype, buffer=lnl.shared_hbm)
    t = lnl.load(x)
    lnl.store(out, lnl.all_reduce(t, op=np.add, program_axes=0))
    return out


def test_legacy_all_reduce_on_a_grid_of_one_is_the_tile():
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_array_equal(neuron.kernel(legacy_all_reduce_1d, mode="simulate")(x), x)


def legacy_all_reduce_bad_axis(x):
    out = lnl.ndarray(x.shape, x.dtype, buffer=lnl.shared_hbm)
    t = lnl.load(x)
    lnl.store(out, lnl.all_reduce(t, op=np.add, program_axes=1))
    return out


def test_legacy_all_reduce_names_a_missing_grid_axis_at_the_line():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(legacy_all_reduce_bad_axis, mode="simulate")[2](
            np.zeros((128, 8), np.float32))
    assert e.value.rule == "collectives"
    assert "program_axes=(1,) names axis 1, but the grid (2,) has axes 0 to 0" in e.value.message
    assert e.value.line == line_of(legacy_all_reduce_bad_axis, "lnl.all_reduce(")


def zero_then_shard(x):
    """nki-library's cascaded-max store: every core clears the whole output, then stores its own
    shard. On hardware the two cores of kernel[2] run concurrently, so both clears come before
    either store; run one core after the other, core 1's clear would erase core 0's shard."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    n, p = nl.num_programs(0), nl.program_id(0)
    rows = x.shape[0] // n
    p = min(p, n - 1)  # a Python int: each core is traced on its own
    zeros = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(zeros, 0.0)
    nisa.dma_copy(dst=out, src=zeros)
    shard = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=shard, src=x[p * rows:(p + 1) * rows])
    nisa.tensor_scalar(dst=shard, data=shard, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out[p * rows:(p + 1) * rows], src=shard)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_the_two_cores_of_kernel_2_run_in_lock_step(mode):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    got = nki.jit(zero_then_shard, mode="simulation" if mode == "simulate" else None)[2](x)
    np.testing.assert_array_equal(got, 2 * x)


def zero_then_shard_then_meet(x):
    """The same, followed by a barrier and a sendrecv of each core's shard: between collectives
    the cores run concurrently too, so both clears still come before either store."""
    out = zero_then_shard(x)
    p = nl.program_id(0)
    nisa.core_barrier(data=out, cores=(0, 1))
    rows = x.shape[0] // 2
    mine = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=out[p * rows:(p + 1) * rows])
    theirs = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - p, recv_from_rank=1 - p, pipe_id=0)
    swapped = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=swapped[p * rows:(p + 1) * rows], src=theirs)
    return out, swapped


@pytest.mark.parametrize("mode", COMPILED)
def test_cores_that_meet_at_collectives_run_in_lock_step_between_them(mode):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    out, swapped = neuron.kernel(zero_then_shard_then_meet, mode=mode)[2](x)
    np.testing.assert_array_equal(out, 2 * x)
    np.testing.assert_array_equal(swapped, 2 * np.concatenate([x[4:], x[:4]]))


def zero_then_shard_symbolic(x):
    """zero_then_shard with the program id left symbolic (nl.ds(p * rows, rows)): one body would
    serve both cores, run one after the other; the kernel writes its output both whole and per
    program, so it is traced per program and its cores take turns instead."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    rows = x.shape[0] // 2
    zeros = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(zeros, 0.0)
    nisa.dma_copy(dst=out, src=zeros)
    shard = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=shard, src=x[nl.ds(p * rows, rows)])
    nisa.tensor_scalar(dst=shard, data=shard, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out[nl.ds(p * rows, rows)], src=shard)
    return out


def shard_only(x):
    """Each core stores only its own shard: one symbolic body serves both."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows = x.shape[0] // 2
    shard = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=shard, src=x[nl.ds(nl.program_id(0) * rows, rows)])
    nisa.dma_copy(dst=out[nl.ds(nl.program_id(0) * rows, rows)], src=shard)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_cores_that_write_a_tensor_whole_and_per_program_take_turns(mode):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    k = neuron.kernel(zero_then_shard_symbolic, mode=mode)[2]
    np.testing.assert_array_equal(k(x), 2 * x)
    assert "pid0" not in str(k.trace(x))  # traced per program
    k = neuron.kernel(shard_only, mode=mode)[2]
    np.testing.assert_array_equal(k(x), x)
    assert "pid0" in str(k.trace(x))  # one body for both programs
