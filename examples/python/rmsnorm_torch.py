"""A fused RMSNorm kernel as a torch operator inside an nn.Module, eager and under
torch.compile(fullgraph=True).
Run: PYTHONPATH=build/python python3 examples/python/rmsnorm_torch.py"""
import sys

import torch

import neuron.language as nl
import neuron.torch as nt


def rmsnorm(x, w):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    wt = nl.load(w)  # [128, F]: the weight row repeated on every partition
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :], dtype=nl.float32)
        r = nl.rsqrt(nl.mean(nl.square(t), axis=1) + 1e-6)
        nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(t * r, wt, dtype=x.dtype))
    return out


rmsnorm_op = nt.custom_op("neuron_examples::rmsnorm", rmsnorm)


class RMSNorm(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(features), requires_grad=False)

    def forward(self, x):
        return rmsnorm_op(x, self.weight.expand(128, -1).contiguous())


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), RMSNorm(64)).eval()
    model[1].weight.data = torch.rand(64)
    x = torch.randn(256, 64)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
        h = model[0](x).double()
        ref = h / torch.sqrt((h * h).mean(1, keepdim=True) + 1e-6) * model[1].weight.double()
    worst = max(float((eager - ref).abs().max()), float((compiled - eager).abs().max()))
    print(f"rmsnorm torch op, eager and compiled: max abs error {worst:.2e}")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
