# Random numbers (docs/random.md): nl.rand / random_seed / dropout and nisa.rng / rand2 /
# dropout / set_rng_seed / rand_get_state / rand_set_state, natively, on the simulator and in
# eager mode (bit-identical), against a NumPy implementation of the documented generator, plus
# the stream rules (reseeding and restoring a state repeat draws, loops advance) and errors.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

MODES = ("native", "simulate", "eager")
M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_bits(seed, partitions, n, start=0):
    """The documented generator in plain Python integers: [partitions, n] 64-bit draws."""
    out = np.zeros((partitions, n), np.uint64)
    for p in range(partitions):
        key = mix((((seed & 0xffffffff) << 8 | p) * GAMMA + GAMMA) & M64)
        for i in range(n):
            out[p, i] = mix((key + (start + i + 1) * GAMMA) & M64)
    return out


def unit(bits):
    return (bits >> np.uint64(40)).astype(np.float64) * 2.0**-24


def all_modes(fn, *args):
    outs = [neuron.kernel(fn, mode=m)(*args) for m in MODES]
    for o in outs[1:]:
        for a, b in zip(outs[0] if isinstance(o, tuple) else [outs[0]],
                        o if isinstance(o, tuple) else [o]):
            np.testing.assert_array_equal(a, b)
    return outs[0]


def draws(x):
    u = nl.ndarray((16, 40), nl.float32, buffer=nl.shared_hbm)
    bits = nl.ndarray((16, 40), nl.uint32, buffer=nl.shared_hbm)
    r2 = nl.ndarray((16, 40), nl.float32, buffer=nl.shared_hbm)
    d = nl.ndarray((16, 40), nl.float32, buffer=nl.shared_hbm)
    nl.store(u, nl.rand((16, 40), nl.float32))  # seed 0 until a seed is set
    nl.random_seed(12345)
    b = nl.ndarray((16, 40), nl.uint32)
    nisa.rng(b)
    nl.store(bits, b)
    t = nl.ndarray((16, 40), nl.float32)
    nisa.rand2(t, -3.0, 5.0)
    nl.store(r2, t)
    nl.store(d, nl.dropout(nl.load(x), 0.3))
    return u, bits, r2, d


def test_draws_follow_the_documented_generator():
    x = np.random.default_rng(0).uniform(1, 2, (16, 40)).astype(np.float32)
    u, bits, r2, d = all_modes(draws, x)
    np.testing.assert_array_equal(u, unit(reference_bits(0, 16, 40)).astype(np.float32))
    ref = reference_bits(12345, 16, 120)  # rng, rand2, dropout continue one stream
    np.testing.assert_array_equal(bits, (ref[:, :40] & np.uint64(0xffffffff)).astype(np.uint32))
    np.testing.assert_array_equal(r2, (-3.0 + 8.0 * unit(ref[:, 40:80])).astype(np.float32))
    keep = unit(ref[:, 80:]) >= np.float32(0.3)
    np.testing.assert_array_equal(d, np.where(keep, x, 0).astype(np.float32))


def stream(x):
    a = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    c = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    loop = nl.ndarray((4, 128, 64), nl.float32, buffer=nl.shared_hbm)
    seed = nl.load(x)
    nl.random_seed(seed)
    nl.store(a, nl.rand((128, 64), nl.float32))
    nl.random_seed(seed)                       # the same seed: the same draws
    st = nl.ndarray((128, 4), nl.uint32)
    nisa.rand_get_state(st)
    nl.store(b, nl.rand((128, 64), nl.float32))
    nisa.rand_set_state(st)                    # a restored state: the same draws again
    nl.store(c, nl.rand((128, 64), nl.float32))
    for i in nl.affine_range(4):               # a rolled loop advances the stream
        nl.store(loop[i], nl.rand((128, 64), nl.float32))
    return a, b, c, loop


def test_reseeding_and_restoring_repeat_draws_and_loops_advance():
    a, b, c, loop = all_modes(stream, np.array([[99]], np.int32))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    ref = unit(reference_bits(99, 128, 64 * 5)).astype(np.float32)
    np.testing.assert_array_equal(a, ref[:, :64])
    for i in range(4):
        np.testing.assert_array_equal(loop[i], ref[:, 64 * (i + 1):64 * (i + 2)])
    # Statistics of the 32768 loop values: uniform on [0, 1).
    v = loop.astype(np.float64).ravel()
    assert 0.0 <= v.min() and v.max() < 1.0
    assert abs(v.mean() - 0.5) < 0.01 and abs(v.var() - 1 / 12) < 0.003
    hist = np.histogram(v, bins=16, range=(0, 1))[0]
    assert np.all(np.abs(hist - v.size / 16) < 6 * np.sqrt(v.size / 16))


def per_partition_seeds(s):
    out = nl.ndarray((8, 16), nl.float32, buffer=nl.shared_hbm)
    nisa.set_rng_seed(nl.load(s))
    nl.store(out, nl.rand((8, 16), nl.float32))
    return out


def test_per_partition_seeds():
    seeds = np.array([[3], [3], [4], [1 << 31], [7], [8], [9], [10]], np.int64).astype(np.uint32)
    got = all_modes(per_partition_seeds, seeds)
    for p, s in enumerate(seeds[:, 0]):
        want = unit(reference_bits(int(s), p + 1, 16)[p]).astype(np.float32)
        np.testing.assert_array_equal(got[p], want)
    assert not np.array_equal(got[0], got[1])  # same seed, different partitions


def test_grid_programs_each_start_from_seed_zero():
    def k(x):
        out = nl.ndarray((2, 4, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[nl.program_id(0)], nl.rand((4, 8), nl.float32))
        return out
    x = np.zeros((1, 1), np.float32)
    got = neuron.kernel(k, mode="native")[2](x)
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got, neuron.kernel(k, mode="eager")[2](x))


def test_errors_name_the_rule():
    def bad_dtype(x):
        t = nl.ndarray((4, 4), nl.int32)
        nisa.rand2(t, 0.0, 1.0)
        return nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)

    def bad_state(x):
        st = nl.ndarray((4, 3), nl.uint32)
        nisa.rand_get_state(st)
        return nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)

    x = np.zeros((4, 4), np.float32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(bad_dtype)(x)
    assert e.value.rule == "dtype" and "nisa.rand2" in e.value.message
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(bad_state)(x)
    assert e.value.rule == "rng-state" and "[4, 3]" in e.value.message
    assert e.value.line == line_of(bad_state, "nisa.rand_get_state(")


def column_dropout(x, p):
    out = nl.ndarray((128, 256), nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 256), nl.float32)
    nisa.dropout(r, nl.load(x), nl.load(p))  # one probability per partition
    nl.store(out, r)
    return out


def test_dropout_with_a_probability_per_partition():
    x = np.random.default_rng(1).uniform(1, 2, (128, 256)).astype(np.float32)
    p = np.linspace(0, 1, 128, dtype=np.float32).reshape(128, 1)
    got = all_modes(column_dropout, x, p)
    u = unit(reference_bits(0, 128, 256))
    np.testing.assert_array_equal(got, np.where(u >= p, x, 0).astype(np.float32))
    assert (got[0] != 0).all() and (got[127] == 0).all()


def first_draw_in_a_loop(x):
    out = nl.ndarray((3, 8, 16), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):  # the state is declared and seeded before the loop
        nl.store(out[i], nl.rand((8, 16), nl.float32))
    return out


def test_the_first_draw_may_be_inside_a_loop():
    got = all_modes(first_draw_in_a_loop, np.zeros((1, 1), np.float32))
    ref = unit(reference_bits(0, 8, 48)).astype(np.float32)
    for i in range(3):
        np.testing.assert_array_equal(got[i], ref[:, 16 * i:16 * (i + 1)])
    ir = neuron.kernel(first_draw_in_a_loop).trace(np.zeros((1, 1), np.float32))
    text = str(ir)
    assert text.index("rng_state") < text.index("for ")


def narrow_draws(x):
    outs = [nl.ndarray((128, 512), dt, buffer=nl.shared_hbm)
            for dt in (nl.bfloat16, nl.float16, nl.float8_e4m3)]
    nl.random_seed(nl.load(x))
    for out in outs:
        nl.store(out, nl.rand((128, 512), out.dtype))
    return tuple(outs)


def test_narrow_draws_stay_below_one():
    # u rounded to bf16 / fp16 / fp8 reached 1.0 (bf16: about 1 draw in 500); such a draw is
    # the largest value below 1 of that type, every other one is u rounded as documented.
    import ml_dtypes
    seed = np.array([[7]], np.int32)
    outs = all_modes(narrow_draws, seed)
    bits = reference_bits(7, 128, 3 * 512)
    for k, (got, dt) in enumerate(zip(outs, (ml_dtypes.bfloat16, np.float16,
                                              ml_dtypes.float8_e4m3))):
        u = unit(bits[:, 512 * k:512 * (k + 1)]).astype(np.float32).astype(dt)
        raw = np.uint8 if dt is ml_dtypes.float8_e4m3 else np.uint16
        below_one = (np.array([1], dt).view(raw) - 1).view(dt)[0]  # one pattern below 1.0
        want = np.where(u.astype(np.float32) >= 1, below_one, u)
        assert (u.astype(np.float32) >= 1).any()  # the case occurs in these draws
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
        assert got.astype(np.float32).max() < 1


def test_a_drop_probability_outside_0_1_is_an_error():
    def k(x):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.dropout(nl.load(x), 2.0))
        return out

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(k, mode="simulate")(np.ones((4, 8), np.float32))
    assert e.value.rule == "unknown-arg" and "drop probability 2 is not in [0, 1]" in \
        e.value.message
