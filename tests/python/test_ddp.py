# examples/ddp/train_block.py: one DistributedDataParallel step over gloo, two processes on
# loopback, each with half the batch, gives the gradients of one process on the whole batch
# (DDP averages the halves' gradients, and the loss is a mean over equal halves). The block runs
# neuron.ops' kernels (attention with GQA, linear, rms_norm, swiglu), forward and backward.
import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ddp", "train_block.py")


def load_example():
    # Importable by name in the spawned processes too: they get this process's sys.path.
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(EXAMPLE)))
    spec = importlib.util.spec_from_file_location("train_block", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_block"] = module
    spec.loader.exec_module(module)
    return module


def test_ddp_gradients_equal_a_single_process_run():
    ex = load_example()
    # A stuck process fails the test after the deadline (with its traceback), never hangs it.
    grads, spread = ex.ddp_gradients(world=2, steps=0, deadline_s=150)
    ref = ex.single_gradients()
    assert sorted(grads) == sorted(ref)
    for name, g in ref.items():
        err = ((grads[name] - g).abs().max() / g.abs().max()).item()
        assert err < 1e-5, f"{name}: DDP gradient differs by {err:.3g} (relative)"
    assert spread == 0  # the replicas hold the same parameters
