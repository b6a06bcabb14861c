"""Data-parallel training of a small pre-norm transformer block on neuron.ops' kernels:
torch.nn.parallel.DistributedDataParallel over gloo, two processes on loopback, each with half
of every batch. Attention (causal, GQA), the linear layers, RMSNorm and SwiGLU run on the
kernel library, forward and backward; DDP averages the gradients across the processes.

    PYTHONPATH=build/python python3 examples/ddp/train_block.py [--steps 20] [--world 2]

tests/python/test_ddp.py checks that the gradients of one DDP step equal those of one process
on the whole batch (ddp_gradients vs single_gradients below).
"""
import argparse
import datetime
import faulthandler
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from neuron import ops


class Block(nn.Module):
    """x + attn(rms_norm(x)), then + mlp(rms_norm(.)): Hq query heads over Hkv key/value heads
    (GQA), causal; a SwiGLU MLP."""

    def __init__(self, d=64, heads=4, kv_heads=2, hidden=96):
        super().__init__()
        self.d, self.heads, self.kv_heads, self.head_dim = d, heads, kv_heads, d // heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv = nn.Linear(d, (heads + 2 * kv_heads) * self.head_dim)
        self.proj = nn.Linear(d, d)
        self.up = nn.Linear(d, 2 * hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        B, L, d = x.shape
        hd = self.head_dim
        h = ops.rms_norm(x, (d,), self.norm1.weight, 1e-5)
        q, k, v = ops.linear(h, self.qkv.weight, self.qkv.bias).split(
            [self.heads * hd, self.kv_heads * hd, self.kv_heads * hd], -1)
        q = q.reshape(B, L, self.heads, hd).transpose(1, 2)
        k = k.reshape(B, L, self.kv_heads, hd).transpose(1, 2)
        v = v.reshape(B, L, self.kv_heads, hd).transpose(1, 2)
        a = ops.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + ops.linear(a.transpose(1, 2).reshape(B, L, d), self.proj.weight, self.proj.bias)
        h = ops.rms_norm(x, (d,), self.norm2.weight, 1e-5)
        h = ops.swiglu(ops.linear(h, self.up.weight, self.up.bias))
        return x + ops.linear(h, self.down.weight, self.down.bias)


def make_model(seed=0):
    torch.manual_seed(seed)
    return Block()


def make_batch(step, batch=4, length=33, d=64):
    """Inputs and regression targets of one step (the same in every process)."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(batch, length, d, generator=g), torch.randn(batch, length, d, generator=g)


def loss_fn(model, x, y):
    return (model(x) - y).pow(2).mean()


def single_gradients():
    """One process, the whole batch of step 0: {parameter name: gradient}."""
    model = make_model()
    x, y = make_batch(0)
    loss_fn(model, x, y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, steps, results, deadline_s):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # A process stuck past the deadline prints where it is and exits (the parent then raises).
    faulthandler.dump_traceback_later(deadline_s, exit=True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        model = nn.parallel.DistributedDataParallel(make_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(max(steps, 1)):
            x, y = make_batch(step)
            shard = x.shape[0] // world
            mine = slice(rank * shard, (rank + 1) * shard)  # this process's half of the batch
            opt.zero_grad()
            loss = loss_fn(model, x[mine], y[mine])
            loss.backward()  # DDP all-reduces (averages) the gradients here
            if step == 0 and rank == 0:
                # As NumPy arrays: a tensor would travel as shared memory that ends with the
                # process.
                results.put({n.removeprefix("module."): p.grad.numpy().copy()
                             for n, p in model.named_parameters()})
            if steps == 0:
                break
            opt.step()
            if rank == 0:
                print(f"step {step:3d}  loss {loss.item():.5f} (rank 0's half)", flush=True)
        # DDP keeps the replicas identical: every process ends with the same parameters.
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        others = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(others, flat)
        if rank == 0:
            results.put(max((o - flat).abs().max().item() for o in others))
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: its destructors (torch's worker threads) hung
    # in 2 of 5 runs here after every result had been sent. The results are already written to
    # the parent's pipe (SimpleQueue.put returns once written), so nothing is lost.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def ddp_gradients(world=2, steps=0, deadline_s=300):
    """Runs `world` DDP processes for `steps` training steps (0: one backward only); returns
    rank 0's averaged gradients of step 0 and the largest parameter difference between ranks
    at the end. Raises TimeoutError (and ends the processes) past deadline_s seconds."""
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    procs = mp.start_processes(
        _worker, args=(world, free_port(), steps, results, deadline_s - 10), nprocs=world,
        start_method="spawn", join=False)
    # Read while the processes run (a result larger than the pipe blocks its writer until
    # read); join raises, with its traceback, when a process fails.
    got, start = [], time.time()
    try:
        while len(got) < 2:
            if not results.empty():
                got.append(results.get())
            elif procs.join(timeout=0.2):
                if results.empty():
                    raise RuntimeError("the DDP processes ended without their results")
            elif time.time() - start > deadline_s:
                raise TimeoutError(f"the DDP processes gave no result in {deadline_s} s")
        while not procs.join(timeout=max(1.0, deadline_s - (time.time() - start))):
            if time.time() - start > deadline_s:
                raise TimeoutError(f"the DDP processes did not end in {deadline_s} s")
    finally:
        for p in procs.processes:
            if p.is_alive():
                p.terminate()
    grads, spread = got
    return {n: torch.from_numpy(g) for n, g in grads.items()}, spread


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    grads, spread = ddp_gradients(a.world, a.steps)
    ref = single_gradients()
    worst = max(((grads[n] - g).abs().max() / g.abs().max()).item() for n, g in ref.items())
    print(f"step 0 gradients, DDP ({a.world} processes) vs one process: max relative "
          f"difference {worst:.3g}; parameters differ across ranks by at most {spread:.3g}")
    return 0 if worst < 1e-4 and spread == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
