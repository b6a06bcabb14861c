"""Calibration kernels: our own versions, in the Python DSL, of the loop structures of the
published tutorials that CALIBRATION.md quotes measurements for (the tutorials' code stays in its
repository). They are written the way the vendor compiler lowers the tutorial code, so that the
timing model, not our compiler, is what gets compared:

- a matmul accumulates in PSUM (`nisa.nc_matmul(acc, ..., accumulate=True)`), which is what
  `res_psum += nl.matmul(lhsT_tile, rhs_tile, transpose_x=True)` becomes there, and the first
  matmul of an accumulation overwrites (`accumulate=False`) instead of a memset of the zeroed
  PSUM tile;
- a tile loaded into a slot of a block tile is one DMA (`nisa.dma_copy` into the view), which is
  what `tiles[k] = nl.load(...)` becomes there.

Shapes follow each tutorial: out[M, N] = lhsT[K, M].T @ rhs[K, N]; the first dim of every
on-chip tile is the partition dim (NKI's `nl.par_dim`).
"""
import neuron.isa as nisa
import neuron.language as nl

TM, TK, TN = 128, 128, 512  # stationary free size, partitions (contraction), moving free size


def _psum_tile():
    return nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)


def _k_loop(n, body, sequential=False):
    """body(k, first) for k in 0..n-1: the first iteration peeled so that its matmul overwrites
    PSUM (the vendor compiler's zero-initialised accumulation), the rest a rolled loop."""
    body(0, True)
    for k in (nl.sequential_range if sequential else nl.affine_range)(1, n):
        body(k, False)


# ---- matrix-multiplication tutorial (trn1 bf16) / kernel-optimization tutorial (trn2 fp32) ----

def matmul_tiled(lhsT, rhs):
    """Step 1 (trn1 "tiled", trn2 v2): both operand tiles reloaded for every output tile."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = _psum_tile()

            def step(k, first):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a, b, accumulate=not first)
            _k_loop(K // TK, step)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], nl.copy(acc, dtype=out.dtype))
    return out


def matmul_hoisted(lhsT, rhs):
    """Step 2 (trn1 "hoist loads", trn2 v3): a column of lhsT tiles loaded once per m, a column
    of rhs tiles once per (m, n)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT = K // TK
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a = nl.ndarray((TK, KT, TM), lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            nisa.dma_copy(a[:, k, :], lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for n in nl.affine_range(N // TN):
            b = nl.ndarray((TK, KT, TN), rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                nisa.dma_copy(b[:, k, :], rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
            acc = _psum_tile()
            _k_loop(KT, lambda k, first: nisa.nc_matmul(acc, a[:, k, :], b[:, k, :],
                                                         accumulate=not first))
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], nl.copy(acc, dtype=out.dtype))
    return out


def matmul_block_free(lhsT, rhs, BM=2, BN=2):
    """Step 3 (trn1 "block free dims", trn2 v4): BM x BN output tiles per block share their
    operand columns."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT = K // TK
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (BM * TM)):
        a = nl.ndarray((TK, BM, KT, TM), lhsT.dtype, buffer=nl.sbuf)
        for bm in nl.affine_range(BM):
            for k in nl.affine_range(KT):
                nisa.dma_copy(a[:, bm, k, :],
                              lhsT[k * TK:(k + 1) * TK, (m * BM + bm) * TM:(m * BM + bm + 1) * TM])
        for n in nl.affine_range(N // (BN * TN)):
            b = nl.ndarray((TK, BN, KT, TN), rhs.dtype, buffer=nl.sbuf)
            for bn in nl.affine_range(BN):
                for k in nl.affine_range(KT):
                    nisa.dma_copy(b[:, bn, k, :],
                                  rhs[k * TK:(k + 1) * TK, (n * BN + bn) * TN:(n * BN + bn + 1) * TN])
            for bm in nl.affine_range(BM):
                for bn in nl.affine_range(BN):
                    acc = _psum_tile()
                    _k_loop(KT, lambda k, first: nisa.nc_matmul(
                        acc, a[:, bm, k, :], b[:, bn, k, :], accumulate=not first))
                    nl.store(out[(m * BM + bm) * TM:(m * BM + bm + 1) * TM,
                                 (n * BN + bn) * TN:(n * BN + bn + 1) * TN],
                             nl.copy(acc, dtype=out.dtype))
    return out


def matmul_block_free_per_k(lhsT, rhs, BM=2, BN=2):
    """trn2 fp32 v4 ("blocked M/N"): BM x BN output tiles per block, each K slice's BM lhsT and BN
    rhs tiles loaded inside the block and shared by its BM*BN PSUM accumulators. (Hoisting a
    2x2 block's fp32 rhs column, as the bf16 step 3 does, needs 256 KiB per partition: more than
    trn2's SBUF.)"""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (BM * TM)):
        for n in nl.affine_range(N // (BN * TN)):
            acc = [[_psum_tile() for _ in range(BN)] for _ in range(BM)]

            def step(k, first):
                a = nl.ndarray((TK, BM, TM), lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, BN, TN), rhs.dtype, buffer=nl.sbuf)
                for bm in range(BM):
                    nisa.dma_copy(a[:, bm, :], lhsT[k * TK:(k + 1) * TK,
                                                    (m * BM + bm) * TM:(m * BM + bm + 1) * TM])
                for bn in range(BN):
                    nisa.dma_copy(b[:, bn, :], rhs[k * TK:(k + 1) * TK,
                                                   (n * BN + bn) * TN:(n * BN + bn + 1) * TN])
                for bm in range(BM):
                    for bn in range(BN):
                        nisa.nc_matmul(acc[bm][bn], a[:, bm, :], b[:, bn, :],
                                       accumulate=not first)
            _k_loop(K // TK, step)
            for bm in range(BM):
                for bn in range(BN):
                    nl.store(out[(m * BM + bm) * TM:(m * BM + bm + 1) * TM,
                                 (n * BN + bn) * TN:(n * BN + bn + 1) * TN],
                             nl.copy(acc[bm][bn], dtype=out.dtype))
    return out


def matmul_fully_optimized(lhsT, rhs, BM=16, BN=2, BK=8):
    """Step 4 (trn1 "fully optimized", trn2 v5): blocks over M, N and K. Per N block the result
    stays in SBUF (accumulated over the K blocks by VectorE from PSUM) and is stored at the end;
    rhs loads move [128, BN*512] and lhsT loads [128, BM*128] per DMA."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    NBM, NBN, NBK = M // (BM * TM), N // (BN * TN), K // (BK * TK)
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(NBN):
        res = nl.zeros((TM, NBM, BM, BN, TN), lhsT.dtype, buffer=nl.sbuf)
        for k in nl.sequential_range(NBK):
            b = nl.ndarray((TK, BK, BN * TN), rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(BK):
                nisa.dma_copy(b[:, bk, :], rhs[(k * BK + bk) * TK:(k * BK + bk + 1) * TK,
                                               n * BN * TN:(n + 1) * BN * TN])
            for m in nl.affine_range(NBM):
                a = nl.ndarray((TK, BK, BM * TM), lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(BK):
                    nisa.dma_copy(a[:, bk, :], lhsT[(k * BK + bk) * TK:(k * BK + bk + 1) * TK,
                                                    m * BM * TM:(m + 1) * BM * TM])
                for bn in nl.affine_range(BN):
                    for bm in nl.affine_range(BM):
                        acc = _psum_tile()
                        _k_loop(BK, lambda bk, first: nisa.nc_matmul(
                            acc, a[:, bk, bm * TM:(bm + 1) * TM], b[:, bk, bn * TN:(bn + 1) * TN],
                            accumulate=not first))
                        nisa.tensor_tensor(res[:, m, bm, bn, :], res[:, m, bm, bn, :], acc, nl.add)
        for m in nl.affine_range(NBM):
            for bm in nl.affine_range(BM):
                packed = nl.ndarray((TM, BN * TN), lhsT.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(BN):
                    nisa.tensor_copy(packed[:, bn * TN:(bn + 1) * TN], res[:, m, bm, bn, :])
                nl.store(out[(m * BM + bm) * TM:(m * BM + bm + 1) * TM,
                             n * BN * TN:(n + 1) * BN * TN], packed)
    return out


# ---- GEMM size sweep (trn2, autotuned square GEMM) ----

def gemm_blocked(lhsT, rhs, MI=4):
    """A well-blocked GEMM: an lhsT panel [K, MI*128] stays in SBUF for all column blocks, an rhs
    panel [K, 512] per column block; MI PSUM accumulators share each moving tile; the first K
    slice overwrites PSUM (no memset)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT, BM = K // TK, MI * TM
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // BM):
        a = nl.ndarray((TK, KT, BM), lhsT.dtype, buffer=nl.sbuf)
        for kt in nl.affine_range(KT):
            nisa.dma_copy(a[:, kt, :], lhsT[kt * TK:(kt + 1) * TK, mb * BM:(mb + 1) * BM])
        for nb in nl.affine_range(N // TN):
            b = nl.ndarray((TK, KT, TN), rhs.dtype, buffer=nl.sbuf)
            for kt in nl.affine_range(KT):
                nisa.dma_copy(b[:, kt, :], rhs[kt * TK:(kt + 1) * TK, nb * TN:(nb + 1) * TN])
            acc = [nl.ndarray((TM, TN), nl.float32, buffer=nl.psum) for _ in range(MI)]
            for mi in range(MI):
                nisa.nc_matmul(acc[mi], a[:, 0, mi * TM:(mi + 1) * TM], b[:, 0, :], accumulate=False)
            for kt in nl.affine_range(1, KT):
                for mi in range(MI):
                    nisa.nc_matmul(acc[mi], a[:, kt, mi * TM:(mi + 1) * TM], b[:, kt, :],
                                   accumulate=True)
            for mi in range(MI):
                nl.store(out[mb * BM + mi * TM:mb * BM + (mi + 1) * TM, nb * TN:(nb + 1) * TN],
                         nl.copy(acc[mi], dtype=out.dtype))
    return out


def gemm_blocked_transposing(lhs, rhs, MI=4):
    """The same GEMM from lhs[M, K] (not pre-transposed): each lhs panel is transposed on chip,
    128x128 at a time through TensorE and PSUM, once per row block."""
    M, K = lhs.shape
    N = rhs.shape[1]
    KT, BM = K // TK, MI * TM
    out = nl.ndarray((M, N), lhs.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // BM):
        a = nl.ndarray((TK, KT, BM), lhs.dtype, buffer=nl.sbuf)
        for mi in nl.affine_range(MI):
            rows = nl.load(lhs[mb * BM + mi * TM:mb * BM + (mi + 1) * TM, :])  # [128, K]
            for kt in nl.affine_range(KT):
                t = nl.ndarray((TK, TM), nl.float32, buffer=nl.psum)
                nisa.nc_transpose(t, rows[:, kt * TK:(kt + 1) * TK])
                nisa.tensor_copy(a[:, kt, mi * TM:(mi + 1) * TM], t)
        for nb in nl.affine_range(N // TN):
            b = nl.ndarray((TK, KT, TN), rhs.dtype, buffer=nl.sbuf)
            for kt in nl.affine_range(KT):
                nisa.dma_copy(b[:, kt, :], rhs[kt * TK:(kt + 1) * TK, nb * TN:(nb + 1) * TN])
            acc = [nl.ndarray((TM, TN), nl.float32, buffer=nl.psum) for _ in range(MI)]
            for mi in range(MI):
                nisa.nc_matmul(acc[mi], a[:, 0, mi * TM:(mi + 1) * TM], b[:, 0, :], accumulate=False)
            for kt in nl.affine_range(1, KT):
                for mi in range(MI):
                    nisa.nc_matmul(acc[mi], a[:, kt, mi * TM:(mi + 1) * TM], b[:, kt, :],
                                   accumulate=True)
            for mi in range(MI):
                nl.store(out[mb * BM + mi * TM:mb * BM + (mi + 1) * TM, nb * TN:(nb + 1) * TN],
                         nl.copy(acc[mi], dtype=out.dtype))
    return out


# ---- fused Mamba tutorial (v1 -> v2 -> v3) ----
# delta, u: [batch, channels, seq]; A: [channels, state]; B, C: [batch, state, seq]. Two stand-ins
# keep the vendor kernel's work where our ISA differs (the numbers differ, the timing does not):
# - there is no tensor_tensor_scan here: a tensor_tensor over the same operands stands in for the
#   scan (the vendor's ISA cost table gives both 2N cycles, CALIBRATION.md 5.2);
# - the vendor kernel multiplies by the [1, S] rows of B and C broadcast over the partitions, read
#   in place by VectorE; our compiler materialises a partition broadcast with an SBUF-to-SBUF DMA,
#   work the measured kernel does not do, so the rows are loaded as there and a resident [128, S]
#   tile stands in for their broadcast.

def _mamba_state(delta_i, deltaU, A_col, B_row, C_row, acc, S):
    deltaA = nl.ndarray((128, S), nl.float32, buffer=nl.sbuf)
    nisa.activation(deltaA, nl.exp, delta_i, scale=A_col)                    # ScalarE
    deltaBu = nl.ndarray((128, S), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(deltaBu, deltaU, delta_i, nl.multiply)                # deltaU * B (bcast)
    scan = nl.ndarray((128, S), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(scan, deltaA, deltaBu, nl.multiply)                   # the scan
    scanC = nl.ndarray((128, S), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(scanC, scan, delta_i, nl.multiply)                    # scan * C (bcast)
    nisa.tensor_tensor(acc, acc, scanC, nl.add)


def mamba_v1(delta, u, A, B, C):
    """v1: every input reloaded per state; deltaU recomputed per state."""
    batch, channels, S = delta.shape
    state = A.shape[1]
    out = nl.ndarray(delta.shape, delta.dtype, buffer=nl.shared_hbm)
    for ib in nl.affine_range(batch):
        for c in nl.affine_range(channels // 128):
            acc = nl.zeros((128, S), nl.float32, buffer=nl.sbuf)
            for s in nl.affine_range(state):
                delta_i = nl.load(delta[ib, c * 128:(c + 1) * 128, :])
                A_col = nl.load(A[c * 128:(c + 1) * 128, s:s + 1])
                u_i = nl.load(u[ib, c * 128:(c + 1) * 128, :])
                B_row = nl.load(B[ib, s:s + 1, :])
                C_row = nl.load(C[ib, s:s + 1, :])
                deltaU = nl.ndarray((128, S), nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(deltaU, delta_i, u_i, nl.multiply)
                _mamba_state(delta_i, deltaU, A_col, B_row, C_row, acc, S)
            nl.store(out[ib, c * 128:(c + 1) * 128, :], acc)
    return out


def mamba_v2(delta, u, A, B, C):
    """v2: loops reordered so delta and u load once per channel tile, and deltaU is computed
    once there (fused out of the state loop)."""
    batch, channels, S = delta.shape
    state = A.shape[1]
    out = nl.ndarray(delta.shape, delta.dtype, buffer=nl.shared_hbm)
    for ib in nl.affine_range(batch):
        for c in nl.affine_range(channels // 128):
            delta_i = nl.load(delta[ib, c * 128:(c + 1) * 128, :])
            u_i = nl.load(u[ib, c * 128:(c + 1) * 128, :])
            deltaU = nl.ndarray((128, S), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(deltaU, delta_i, u_i, nl.multiply)
            acc = nl.zeros((128, S), nl.float32, buffer=nl.sbuf)
            for s in nl.affine_range(state):
                A_col = nl.load(A[c * 128:(c + 1) * 128, s:s + 1])
                B_row = nl.load(B[ib, s:s + 1, :])
                C_row = nl.load(C[ib, s:s + 1, :])
                _mamba_state(delta_i, deltaU, A_col, B_row, C_row, acc, S)
            nl.store(out[ib, c * 128:(c + 1) * 128, :], acc)
    return out


def mamba_v3(delta, u, A, B, C, SEQ=512):
    """v3: v2 with the sequence tiled by SEQ so every tile fits SBUF at long sequences (the
    scan's carry between sequence tiles is a [128, 1] copy per state)."""
    batch, channels, S = delta.shape
    state = A.shape[1]
    out = nl.ndarray(delta.shape, delta.dtype, buffer=nl.shared_hbm)
    for ib in nl.affine_range(batch):
        for c in nl.affine_range(channels // 128):
            carry = nl.zeros((128, state), nl.float32, buffer=nl.sbuf)
            for t in nl.sequential_range(S // SEQ):
                delta_i = nl.load(delta[ib, c * 128:(c + 1) * 128, t * SEQ:(t + 1) * SEQ])
                u_i = nl.load(u[ib, c * 128:(c + 1) * 128, t * SEQ:(t + 1) * SEQ])
                deltaU = nl.ndarray((128, SEQ), nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(deltaU, delta_i, u_i, nl.multiply)
                acc = nl.zeros((128, SEQ), nl.float32, buffer=nl.sbuf)
                for s in nl.affine_range(state):
                    A_col = nl.load(A[c * 128:(c + 1) * 128, s:s + 1])
                    B_row = nl.load(B[ib, s:s + 1, t * SEQ:(t + 1) * SEQ])
                    C_row = nl.load(C[ib, s:s + 1, t * SEQ:(t + 1) * SEQ])
                    _mamba_state(delta_i, deltaU, A_col, B_row, C_row, acc, SEQ)
                    nisa.tensor_copy(carry[:, s:s + 1], acc[:, SEQ - 1:SEQ])
                nl.store(out[ib, c * 128:(c + 1) * 128, t * SEQ:(t + 1) * SEQ], acc)
    return out
