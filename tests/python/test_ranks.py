# nki.collectives between the ranks of a neuron.run_ranks launch (python/neuron/ranks.py): each
# rank runs the kernel on its own tensors; all_reduce, all_gather, reduce_scatter, all_to_all,
# collective_permute and rank_id against NumPy, natively and on the simulator; ranks launched on
# a grid (kernel[2] per rank, an LNC of 2); their errors.
import numpy as np
import pytest

import neuron
import neuron.compat

nki = neuron.compat.install()
import nki.collectives as ncc  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from nki.collectives import ReplicaGroup  # noqa: E402
from helpers import line_of  # noqa: E402

RNG = np.random.default_rng(11)
COMPILED = ("native", "simulate")


def all_reduce_hbm(input, replica_group, op="add"):
    """nki-library's HBM all-reduce: the collective reads and writes HBM tensors of the kernel's
    own, copied from the input and to the output."""
    src = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="dst")
    out = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=input)
    ncc.all_reduce(dsts=[dst], srcs=[src], op=getattr(nl, op), replica_group=replica_group)
    nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_all_reduce_sums_over_each_rank_list_in_rank_order(mode):
    # 4 ranks in two lists; [200, 300] takes two row blocks of 128 through SBUF
    x = RNG.standard_normal((4, 200, 300)).astype(np.float32)
    rg = ReplicaGroup([[0, 2], [1, 3]])
    outs = neuron.run_ranks(all_reduce_hbm, [dict(input=x[r], replica_group=rg)
                                             for r in range(4)], mode=mode)
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, x[r % 2] + x[r % 2 + 2])


@pytest.mark.parametrize("mode", COMPILED)
def test_all_reduce_max_over_three_ranks_in_bf16(mode):
    from ml_dtypes import bfloat16
    x = RNG.standard_normal((3, 64, 40)).astype(bfloat16)
    rg = ReplicaGroup.from_partition_op(3, ncc.rg_partition_op.div, 4)
    assert rg == ReplicaGroup([[0, 1, 2]])
    outs = neuron.run_ranks(all_reduce_hbm, [(x[r], rg, "maximum") for r in range(3)],
                            mode=mode)
    for o in outs:
        np.testing.assert_array_equal(o, x.max(axis=0))


def in_place_all_reduce_on_chip(x, replica_group):
    """The collective on SBUF tiles, its source also its destination."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    ncc.all_reduce(srcs=[t], dsts=[t], replica_group=replica_group, op=nl.add)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_an_in_place_all_reduce_of_sbuf_tiles_reads_every_source_first(mode):
    x = RNG.standard_normal((2, 128, 64)).astype(np.float32)
    rg = ReplicaGroup([[0, 1]])
    outs = neuron.run_ranks(in_place_all_reduce_on_chip, [(x[0], rg), (x[1], rg)], mode=mode)
    for o in outs:
        np.testing.assert_array_equal(o, x[0] + x[1])


def gather_reduce_scatter_all_to_all(x, replica_group, n):
    """Three collectives in a row on HBM tensors: x gathered along dim 0, x reduced and
    scattered along dim 0, and x's n row chunks exchanged all to all."""
    H, W = x.shape
    src = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    gathered = nl.ndarray((H * n, W), x.dtype, buffer=nl.shared_hbm)
    ncc.all_gather(srcs=[src], dsts=[gathered], replica_group=replica_group, collective_dim=0)
    scattered = nl.ndarray((H // n, W), x.dtype, buffer=nl.shared_hbm)
    ncc.reduce_scatter(srcs=[src], dsts=[scattered], replica_group=replica_group,
                       collective_dim=0, op=nl.add)
    exchanged = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all(srcs=[src], dsts=[exchanged], replica_group=replica_group, collective_dim=0)
    return gathered, scattered, exchanged


@pytest.mark.parametrize("mode", COMPILED)
def test_gather_reduce_scatter_and_all_to_all_over_four_ranks(mode):
    n, H, W = 4, 8, 24
    x = RNG.standard_normal((n, H, W)).astype(np.float32)
    rg = ReplicaGroup([list(range(n))])
    outs = neuron.run_ranks(gather_reduce_scatter_all_to_all,
                            [dict(x=x[r], replica_group=rg, n=n) for r in range(n)], mode=mode)
    total = ((x[0] + x[1]) + x[2]) + x[3]
    c = H // n
    for r, (gathered, scattered, exchanged) in enumerate(outs):
        np.testing.assert_array_equal(gathered, x.reshape(n * H, W))
        np.testing.assert_array_equal(scattered, total[r * c:(r + 1) * c])
        np.testing.assert_array_equal(exchanged, np.concatenate([x[q, r * c:(r + 1) * c]
                                                                 for q in range(n)]))


def sbuf_all_gather_tiled(x, replica_group, n):
    """nki-library's tiled SBUF all-gather: per column tile (an affine_range loop), the tiles of
    every rank side by side along the free dim (collective_dim=1)."""
    P, F = x.shape
    T = F // 2
    out = nl.ndarray((P, F * n), x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        src = nl.ndarray((P, T), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x[:, i * T:(i + 1) * T])
        dst = nl.ndarray((P, T * n), x.dtype, buffer=nl.sbuf)
        ncc.all_gather(srcs=[src], dsts=[dst], replica_group=replica_group, collective_dim=1)
        for r in range(n):
            nisa.dma_copy(dst=out[:, r * F + i * T:r * F + (i + 1) * T],
                          src=dst[:, r * T:(r + 1) * T])
    return out


@pytest.mark.parametrize("mode", COMPILED)
def test_a_collective_in_an_affine_range_loop_gathers_sbuf_tiles(mode):
    x = RNG.standard_normal((2, 128, 32)).astype(np.float32)
    rg = ReplicaGroup([[0, 1]])
    outs = neuron.run_ranks(sbuf_all_gather_tiled, [(x[r], rg, 2) for r in range(2)], mode=mode)
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate([x[0], x[1]], axis=1))


def ring_and_rank(x, pairs):
    """collective_permute along `pairs`, and rank_id() as an .ap() scalar offset selecting this
    rank's row block of x."""
    n, H, W = x.shape
    mine = nl.ndarray((H, W), x.dtype, buffer=nl.shared_hbm)
    rank = ncc.rank_id()
    nisa.dma_copy(dst=mine, src=x.ap(pattern=[[W, H], [1, W]], scalar_offset=rank,
                                     indirect_dim=0))
    got = nl.ndarray((H, W), x.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((H, W), x.dtype, buffer=nl.sbuf)
    nisa.memset(zeros, 0.0)
    nisa.dma_copy(dst=got, src=zeros)
    ncc.collective_permute(srcs=[mine], dsts=[got], source_target_pairs=pairs)
    return mine, got


@pytest.mark.parametrize("mode", COMPILED)
def test_collective_permute_moves_along_the_pairs_and_rank_id_is_the_rank(mode):
    x = RNG.standard_normal((3, 16, 8)).astype(np.float32)
    pairs = [(0, 1), (1, 2)]  # rank 0 is no target: it keeps its zeros
    outs = neuron.run_ranks(ring_and_rank, [(x, pairs)] * 3, mode=mode)
    for r, (mine, got) in enumerate(outs):
        np.testing.assert_array_equal(mine, x[r])
        np.testing.assert_array_equal(got, x[r - 1] if r else np.zeros_like(x[0]))


def test_one_rank_is_a_launch_whose_collectives_exchange_with_itself():
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    (out,) = neuron.run_ranks(all_reduce_hbm, [(x, ReplicaGroup([[0]]))], mode="simulate")
    np.testing.assert_array_equal(out, x)


def gathers_wrong_size(x, replica_group):
    dst = nl.ndarray((x.shape[0] * 3, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    ncc.all_gather(srcs=[x], dsts=[dst], replica_group=replica_group, collective_dim=0)
    return dst


def implicit_ring(x, replica_group):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    ncc.collective_permute_implicit(srcs_by_channel=[[x]], dsts_by_channel=[[out]],
                                    replica_group=replica_group)
    return out


@pytest.mark.parametrize("fn,group,words", [
    (gathers_wrong_size, [[0, 1]], "rank 0's destination has shape [48, 8], but its source "
                                   "[16, 8] over 2 ranks needs [32, 8]"),
    (all_reduce_hbm, [[0]], "rank 1 is in 0 rank-lists of ReplicaGroup([[0]])"),
    (all_reduce_hbm, [[0, 1, 2]], "names rank 2, but the launch has 2 ranks"),
    (implicit_ring, [[0, 1]], "nki.collectives.collective_permute_implicit is not supported"),
])
def test_collectives_that_cannot_run_name_the_rule_and_the_line(fn, group, words):
    x = np.zeros((16, 8), np.float32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.run_ranks(fn, [(x, ReplicaGroup(group))] * 2, mode="simulate")
    assert e.value.rule == "collectives" and words in e.value.message, e.value.message
    assert e.value.line == line_of(fn, "ncc.")


def test_ranks_pass_equal_parameters_and_same_shaped_tensors():
    # (every rank traces the same Python with equal parameters and same-shaped tensors, so the
    # ranks reach the same collectives in the same order)
    x = np.zeros((16, 8), np.float32)
    with pytest.raises(ValueError, match="the same on every rank"):
        neuron.run_ranks(all_reduce_hbm, [(x, ReplicaGroup([[0, 1]])),
                                          (x, ReplicaGroup([[1, 0]]))])
    with pytest.raises(ValueError, match=r"tensor 'input' is float32\[8, 8\] on rank 1 but "
                                         r"float32\[16, 8\] on rank 0"):
        neuron.run_ranks(all_reduce_hbm, [(x, ReplicaGroup([[0, 1]])),
                                          (x[:8], ReplicaGroup([[0, 1]]))])
    with pytest.raises(ValueError, match="66 cores, and a launch simulates at most 64"):
        neuron.run_ranks(nki.jit(all_reduce_hbm)[2], [(x, ReplicaGroup([[0]]))] * 33)


# ---- ranks launched on a grid: kernel[2] per rank (an LNC of 2) -----------------------------

def lnc_gather_and_sum(x, replica_group, n):
    """Launched as kernel[2]: each program of a rank (one of its two cores) takes its half of
    x's rows into SBUF, gathers that half from the n ranks of its rank-list side by side
    (collective_dim=1) and sums it over them, into the rank's shared outputs."""
    rows, F = x.shape
    P = rows // nl.num_programs(0)
    q = nl.program_id(0)
    gathered = nl.ndarray((rows, F * n), x.dtype, buffer=nl.shared_hbm)
    summed = nl.ndarray((rows, F), x.dtype, buffer=nl.shared_hbm)
    half = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=half, src=x[q * P:(q + 1) * P, :])
    g = nl.ndarray((P, F * n), x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[half], dsts=[g], replica_group=replica_group, collective_dim=1)
    nisa.dma_copy(dst=gathered[q * P:(q + 1) * P, :], src=g)
    s = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[half], dsts=[s], replica_group=replica_group, op=nl.add)
    nisa.dma_copy(dst=summed[q * P:(q + 1) * P, :], src=s)
    return gathered, summed


@pytest.mark.parametrize("mode", COMPILED)
@pytest.mark.parametrize("lists", [[[0, 1]], [[0, 2], [1, 3]]], ids=["2ranks", "4ranks"])
def test_ranks_on_a_grid_of_two_exchange_program_by_program(mode, lists):
    # program q of each rank meets program q of the others: each half of the rows is gathered
    # and summed on its own, and the rank's two programs fill its one pair of outputs
    n = sum(len(g) for g in lists)
    x = RNG.standard_normal((n, 256, 16)).astype(np.float32)
    k = nki.jit(lnc_gather_and_sum)
    outs = neuron.run_ranks(k[2], [(x[r], ReplicaGroup(lists), 2) for r in range(n)], mode=mode)
    for r, (gathered, summed) in enumerate(outs):
        mine = next(g for g in lists if r in g)
        np.testing.assert_array_equal(gathered, np.concatenate([x[q] for q in mine], axis=1))
        np.testing.assert_array_equal(summed, x[mine[0]] + x[mine[1]])


def lnc_swap_then_reduce(x, lookup, replica_group):
    """Launched as kernel[2]: the rank's two programs swap their halves of x's rows with
    nisa.sendrecv (between the rank's own cores), then sum what they received over the ranks;
    rank_id() on both programs is the rank (a row of `lookup` by indirect DMA)."""
    rows, F = x.shape
    P = rows // 2
    q = nl.program_id(0)
    mine = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[q * P:(q + 1) * P, :])
    other = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=other, send_to_rank=1 - q, recv_from_rank=1 - q)
    s = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[other], dsts=[s], replica_group=replica_group, op=nl.add)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[q * P:(q + 1) * P, :], src=s)
    rank = nl.ndarray((1, F), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=rank, src=lookup.ap(pattern=[[F, 1], [1, F]], scalar_offset=ncc.rank_id(),
                                          indirect_dim=0))
    return out, rank


@pytest.mark.parametrize("mode", COMPILED)
def test_the_programs_of_a_rank_meet_each_other_at_core_collectives(mode):
    n, P, F = 3, 64, 8
    x = RNG.standard_normal((n, 2 * P, F)).astype(np.float32)
    lookup = np.repeat(np.arange(n, dtype=np.float32)[:, None], F, axis=1)
    rg = ReplicaGroup([list(range(n))])
    outs = neuron.run_ranks(nki.jit(lnc_swap_then_reduce)[2],
                            [dict(x=x[r], lookup=lookup, replica_group=rg) for r in range(n)],
                            mode=mode)
    total = (x[0] + x[1]) + x[2]
    for r, (out, rank) in enumerate(outs):
        np.testing.assert_array_equal(out, np.concatenate([total[P:], total[:P]]))
        np.testing.assert_array_equal(rank, np.full((1, F), r, np.float32))


def lnc_sum_into_cache(x, cache, replica_group):
    """Launched as kernel[2]: each program sums its half of x's rows over the ranks into that
    half of `cache`, an output argument (written in place and returned)."""
    P = x.shape[0] // 2
    q = nl.program_id(0)
    t = nl.ndarray((P, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[q * P:(q + 1) * P, :])
    s = nl.ndarray((P, x.shape[1]), x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[t], dsts=[s], replica_group=replica_group, op=nl.add)
    nisa.dma_copy(dst=cache[q * P:(q + 1) * P, :], src=s)
    return cache


@pytest.mark.parametrize("mode", COMPILED)
def test_each_rank_on_a_grid_writes_its_own_output_argument(mode):
    x = RNG.standard_normal((2, 128, 8)).astype(np.float32)
    caches = [np.zeros((128, 8), np.float32) for _ in range(2)]
    rg = ReplicaGroup([[0, 1]])
    outs = neuron.run_ranks(nki.jit(lnc_sum_into_cache)[2],
                            [dict(x=x[r], cache=caches[r], replica_group=rg) for r in range(2)],
                            mode=mode)
    for out, cache in zip(outs, caches):
        assert out is cache  # the caller's own array, written back
        np.testing.assert_array_equal(cache, x[0] + x[1])


def cache_through_reshapes(x, cache):
    """Writes x into cache [R, 1, F] through a squeezed view and returns the cache re-expanded
    (a reshape of a reshape: a new view object of the whole input, as nki-library's attention
    block returns its updated KV caches)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, t)
    squeezed = cache.reshape((cache.shape[0], cache.shape[2]))
    nl.store(squeezed, t)
    return out, squeezed.reshape(cache.shape)


@pytest.mark.parametrize("mode", COMPILED + ("eager",))
def test_an_input_returned_through_views_is_the_callers_array(mode):
    x = RNG.standard_normal((2, 16, 8)).astype(np.float32)
    caches = [np.zeros((16, 1, 8), np.float32) for _ in range(2)]
    k = neuron.kernel(cache_through_reshapes, mode=mode)
    out, back = k(x[0], caches[0])
    assert back is caches[0]
    np.testing.assert_array_equal(caches[0][:, 0], x[0])
    if mode == "eager":  # the ranks meet in a compiled kernel
        return
    for r, (o, c) in enumerate(neuron.run_ranks(k, [dict(x=x[r], cache=caches[r])
                                                    for r in range(2)])):
        assert c is caches[r]
        np.testing.assert_array_equal(o, x[r])
        np.testing.assert_array_equal(caches[r][:, 0], x[r])


def programs_disagree(x, replica_group):
    out = nl.ndarray((x.shape[0] * 2, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    if nl.program_id(0) == 0:
        ncc.all_reduce(srcs=[x], dsts=[out[0:x.shape[0], :]], replica_group=replica_group,
                       op=nl.add)
    else:
        ncc.all_gather(srcs=[x], dsts=[out], replica_group=replica_group, collective_dim=0)
    return out


def test_programs_of_ranks_on_a_grid_must_call_the_same_collectives():
    x = np.zeros((16, 8), np.float32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.run_ranks(nki.jit(programs_disagree)[2], [(x, ReplicaGroup([[0, 1]]))] * 2,
                         mode="simulate")
    assert e.value.rule == "collectives", e.value.message
    assert ("collective #1: rank 0's program 0 calls nki.collectives.all_reduce (line "
            f"{line_of(programs_disagree, 'ncc.all_reduce')}) where rank 1's program 1 calls "
            "nki.collectives.all_gather; every program of every rank must call the same "
            "collectives in the same order") in e.value.message, e.value.message
