#!/usr/bin/env python3
"""Runs the integration tests of aws-neuron/nki-library (production kernels in the current NKI
API) through neuron's compatibility layer, with that repository's own harness in its simulation
mode. Not part of CI: the kernels and tests are not ours to ship, the harness needs packages
our tests do not (pytest-xdist, pytest-html, pytest-timeout, allpairspy, pandas, scipy, boto3,
fabric2, filelock, plotext, aws-embedded-metrics: install them in a virtual environment), and
tests/python never depends on it (docs/nki-compat.md, "Published kernels").

    PYTHONPATH=build/python python3 scripts/run_nki_library.py /path/to/nki-library [pytest args]

The harness's simulation mode imports AWS's CPU simulator package (`nki_cpu_simulator`) and a
dtype helper (`neuron_dtypes`), and its trace-only tests AWS's compile frontend
(`nki.compiler.frontend`); this script writes small stand-ins for the three into a temporary
folder (the simulator runs kernels with `neuron.compat.simulate_kernel_lnc`, the dtype helper
casts with ml_dtypes, the frontend traces and compiles a kernel with neuron without running it)
and puts it first on the path. The harness's simulation mode runs one launch, so its per-rank
tests (collectives between ranks) cannot run there: a fourth stand-in wraps its
`simulation_setup.run_simulator_inference` and `Orchestrator._dump_output_tensors` when they
are loaded, so that those tests run all their ranks in one `neuron.run_ranks` launch (each
rank `kernel[lnc]` with its own inputs) and each rank's outputs land in the
`output_worker_{rank}/` folder the harness's validator reads. Kernels run on copies of the
test's arrays, as on a device: several tests compute their golden lazily after the run from the
same arrays, which a kernel writing an input in place (a KV-cache update) would otherwise have
changed (the transformer TKG golden then counted the new token twice). Three defects of the published
snapshot stop its harness before any kernel runs, and two more stop two test files from being
collected; the script repairs them in the checkout, saying so: a missing module
`test/utils/scripts/remote_lock_scripts.py`, a missing `test/utils/perf_analysis_private.py`, a
simulation-mode attribute error in `test/utils/test_orchestrator.py` (`_compiled_kernel` is read
before it is set), `Platforms` used but not imported in `core/qkv/test_qkv_tkg.py`, and a stray
docstring fragment in `core/mlp/mlp.py` (a syntax error). Default pytest arguments: the `fast`
tests, 2 workers, 120 s per test, artifacts removed (they take tens of GB otherwise), collection
errors not fatal, and 9 GB of address space per process (NKILIB_MEMORY_GB)."""
import os
import pathlib
import subprocess
import sys
import tempfile

SIM = '''import sys, types
import neuron.compat as _c
nki = _c.install()


def own(value):
    """A copy of an input array, as a device reads its inputs from copies: a kernel that writes
    an input in place (a KV-cache update) must not change the test's arrays, from which the
    harness computes lazy goldens after the run."""
    import numpy as np
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _cpu_simulate(k):
    def run(a, kw, lnc):
        return _c.simulate_kernel_lnc(k, [own(v) for v in a], {n: own(v) for n, v in kw.items()},
                                      lnc)

    class Launch:
        def __getitem__(self, lnc):
            return lambda *a, **kw: run(a, kw, lnc)

        def __call__(self, *a, **kw):
            return run(a, kw, 1)
    return Launch()


nki.cpu_simulate = _cpu_simulate
for _name in ("builtin", "tensor"):
    setattr(nki, _name, types.ModuleType("nki." + _name))
nki.compiler = sys.modules["neuronxcc.nki.compiler"]
nki.language.dtypes = nki.language
for _name in ("", ".language", ".isa", ".isa.constants", ".typing", ".language.dtypes",
              ".tensor", ".builtin", ".compiler"):
    _mod = nki
    for _part in [p for p in _name.split(".") if p]:
        _mod = getattr(_mod, _part)
    sys.modules["nki_cpu_simulator.nki" + _name] = _mod
'''

DTYPES = '''import ml_dtypes
import numpy as np
import neuron.language as nl
from neuron.dtypes import numpy_dtype

bfloat16 = ml_dtypes.bfloat16
finfo = ml_dtypes.finfo
float8_e5m2_x4, float8_e4m3fn_x4 = nl.float8_e5m2_x4, nl.float8_e4m3fn_x4
float4_e2m1fn_x4 = nl.float4_e2m1fn_x4


def _np(dtype):
    try:
        return np.dtype(dtype)
    except TypeError:
        return numpy_dtype(nl.to_dtype(dtype))


def static_cast(value, dtype):
    return np.asarray(value).astype(_np(dtype))


def sizeinbytes(dtype):
    return _np(dtype).itemsize


def is_float_type(dtype):
    d = _np(dtype)
    return np.issubdtype(d, np.floating) or d.type.__module__.startswith("ml_dtypes")
'''

# The harness's simulation mode runs one kernel launch (simulation_setup.run_simulator_inference,
# then Orchestrator._dump_output_tensors into infer_result/); a per-rank test (collectives
# between ranks: inference_args.collective_ranks = n, inputs from a PerRankLazyInputGenerator
# or one dict for every rank) needs all n ranks in one launch, and its validator reads rank r's
# outputs from infer_result/output_worker_{r}/. This stand-in wraps the two functions in memory
# (the harness's files are not edited): the first when its module is imported, the second at
# the first per-rank run. Per-rank tests run through neuron.run_ranks, `kernel[lnc]` on each
# rank, and each rank's outputs go to its folder; other tests take the harness's own path.
PER_RANK = '''import importlib.abc
import importlib.machinery
import os
import sys

import numpy as np


def _run_ranks(kut, original):
    from test.utils.common_dataclasses import PerRankLazyInputGenerator, normalize_golden_output
    n = int(kut.inference_args.collective_ranks or 1)
    inputs = kut.kernel_input
    per_rank_inputs = isinstance(inputs, PerRankLazyInputGenerator)
    if n == 1 and not per_rank_inputs:
        return original(kut)
    import neuron
    from neuron.kernel import Kernel
    from nki_cpu_simulator import own
    # (the orchestrator, loaded by now, through pytest's assertion rewriter: wrapped here)
    _patch_test_orchestrator(sys.modules["test.utils.test_orchestrator"])
    if kut.validation_args is None:
        raise ValueError("Simulation mode requires validation_args to verify outputs")
    os.environ["NKI_NC_VERSION"] = kut.compiler_input.platform_target.get_nc_gen()
    per_rank = []
    for r in range(n):
        kwargs = inputs.for_rank(r) if per_rank_inputs else (inputs or {})
        # as the harness's simulate_kernel: the graph compiler's suffix off the names; each
        # rank its own copies (its own HBM; and the test's arrays, which lazy goldens read
        # after the run, unchanged by kernels that write inputs in place)
        per_rank.append({k.removesuffix(".must_alias_input"): own(v) for k, v in kwargs.items()})
    k = kut.kernel_func if isinstance(kut.kernel_func, Kernel) else neuron.kernel(kut.kernel_func)
    lnc = int(kut.compiler_input.logical_nc_config or 1)
    results = neuron.run_ranks(k[lnc] if lnc > 1 else k, per_rank, mode="simulate")
    outputs = {}
    for r, res in enumerate(results):
        res = [] if res is None else list(res) if isinstance(res, (list, tuple)) else [res]
        golden = normalize_golden_output(kut.validation_args.golden_output, r)
        if len(res) != len(golden):
            raise RuntimeError(f"Kernel returned {len(res)} outputs on rank {r} but expected "
                               f"{len(golden)}: {list(golden)}")
        folder = f"output_worker_{r}/" if n > 1 else ""
        for (name, want), out in zip(golden.items(), res):
            outputs[folder + name] = np.asarray(out, dtype=want.dtype)
    return outputs


def _patch_simulation_setup(module):
    original = module.run_simulator_inference
    module.run_simulator_inference = lambda kut: _run_ranks(kut, original)


def _patch_test_orchestrator(module):
    original = module.Orchestrator._dump_output_tensors
    if getattr(original, "per_rank", False):
        return

    def dump(self, output_tensors):
        base = os.path.join(self.fs_config.artifacts_output_directory_path,
                            module.INF_ARTIFACT_DIR_NAME)
        for name in output_tensors:
            if "/" in name:  # output_worker_{r}/name
                os.makedirs(os.path.join(base, os.path.dirname(name)), exist_ok=True)
        return original(self, output_tensors)
    dump.per_rank = True
    module.Orchestrator._dump_output_tensors = dump


_PATCHES = {"test.utils.simulation_setup": _patch_simulation_setup}


class _Wrapper(importlib.abc.MetaPathFinder):
    """Finds the harness's simulation_setup as usual and wraps its function once loaded."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def run(module):
            exec_module(module)
            _PATCHES[name](module)
        spec.loader.exec_module = run
        return spec


if not any(isinstance(f, _Wrapper) for f in sys.meta_path):
    sys.meta_path.insert(0, _Wrapper())
'''

# The harness's trace-only tests (`-m trace_only`: TensorView's view rules at trace time) import
# AWS's compile frontend, nki.compiler.frontend; this stand-in traces and compiles the kernel with
# neuron instead (no run), so a kernel that fails to trace or compile here fails its test.
FRONTEND = '''import neuron
from neuron.kernel import Kernel


class NKIFrontend:
    pass


class _Module:
    def __init__(self, compiled):
        self.operation, self.compiled = self, compiled

    def print(self, file=None, **kwargs):
        print(self.compiled, file=file)


class _Result:
    def __init__(self, compiled):
        self.module = _Module(compiled)


class ParserFrontend(NKIFrontend):
    def compile(self, kernel, inputs=None, target=None, lnc=1, **kwargs):
        k = kernel if isinstance(kernel, Kernel) else neuron.kernel(kernel)
        k = k[int(lnc)] if int(lnc or 1) > 1 else k
        return _Result(k.compile(**(inputs or {})))


TracerFrontend = ParserFrontend
'''

SITE = '''import sys
import neuron.compat
nki = neuron.compat.install()
import nki_trace_frontend
nki.compiler = sys.modules["neuronxcc.nki.compiler"]
nki.compiler.frontend = nki_trace_frontend
sys.modules["nki.compiler"] = nki.compiler
sys.modules["nki.compiler.frontend"] = nki_trace_frontend
import nki_per_rank
'''

REPAIRS = [
    ("test/utils/scripts/__init__.py", None, ""),
    ("test/utils/scripts/remote_lock_scripts.py", None,
     "import enum\n\n\nclass LockStatus(enum.Enum):\n    ACQUIRED = 'acquired'\n"
     "    RELEASED = 'released'\n    FAILED = 'failed'\n    BUSY = 'busy'\n\n\n"
     "class LockResult:\n    def __init__(self, *args, **kwargs):\n        self.args = args\n"),
    ("test/utils/perf_analysis_private.py", None, "def analyze_trace(*args, **kwargs):\n"
     "    return None\n"),
    ("test/utils/test_orchestrator.py", "if not self._compiled_kernel or",
     "if not getattr(self, '_compiled_kernel', None) or"),
    # Collection errors of two files: a name used but not imported, a docstring fragment.
    ("test/integration/nkilib/core/qkv/test_qkv_tkg.py",
     "from test.utils.common_dataclasses import (\n    TKG_INFERENCE_ARGS,",
     "from test.utils.common_dataclasses import (\n    Platforms,\n    TKG_INFERENCE_ARGS,"),
    ("src/nkilib_src/nkilib/core/mlp/mlp.py",
     "        - Standard matrix multiplication layouts\n    \"\"\"\n\n        TKG mode supports:\n"
     "        - FP8 quantization (tensor-wise and row-wise)\n"
     "        - MXFP quantization (MXFP4 and MXFP8) - TKG only\n"
     "        - Column tiling optimizations\n"
     "        - Tensor layout optimization for down projection\n"
     "        - Input in SBUF for kernel fusion\n\n        CTE mode supports:\n"
     "        - FP8 quantization (tensor-wise and row-wise)\n"
     "        - Standard matrix multiplication layouts\n    \"\"\"\n",
     "        - Standard matrix multiplication layouts\n    \"\"\"\n"),
]


def repair(root):
    for rel, old, new in REPAIRS:
        path = root / rel
        if old is None:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(new)
                print(f"run_nki_library: created {rel} (missing from the published snapshot)")
        elif path.exists() and old in path.read_text():
            path.write_text(path.read_text().replace(old, new))
            short = lambda text: repr(text if len(text) < 60 else text[:57] + "...")  # noqa: E731
            print(f"run_nki_library: patched {rel} ({short(old)} -> {short(new)})")


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(argv[0]).resolve()
    if not (root / "src" / "nkilib_src").is_dir():
        print(f"run_nki_library: {root} is not a checkout of aws-neuron/nki-library",
              file=sys.stderr)
        return 2
    repair(root)
    shims = pathlib.Path(tempfile.mkdtemp(prefix="neuron-nkilib-"))
    (shims / "nki_cpu_simulator").mkdir()
    (shims / "nki_cpu_simulator" / "__init__.py").write_text(SIM)
    (shims / "neuron_dtypes.py").write_text(DTYPES)
    (shims / "nki_trace_frontend.py").write_text(FRONTEND)
    (shims / "nki_per_rank.py").write_text(PER_RANK)
    print("run_nki_library: per-rank tests (collective_ranks > 1, PerRankLazyInputGenerator) "
          "run through neuron.run_ranks: test/utils/simulation_setup.py's "
          "run_simulator_inference and test_orchestrator.py's Orchestrator._dump_output_tensors "
          "are wrapped in memory (files unchanged)")
    # The harness's conftest imports `nki` before it switches to simulation mode.
    (shims / "sitecustomize.py").write_text(SITE)
    env = dict(os.environ)
    # (absolute: pytest runs in the checkout, so a relative build/python would not be found)
    ours = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(shims), *ours, str(root / "src"), str(root)])
    args = argv[1:] or ["test/integration", "-m", "fast", "-q", "-n", "2", "--timeout", "120",
                        "--tb=line", "-rf", "--continue-on-collection-errors"]
    cmd = [sys.executable, "-m", "pytest", "--test-mode", "simulation", "-p", "no:cacheprovider",
           "--force-local-cleanup", *args]
    print("run_nki_library:", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=root, env=env, preexec_fn=_cap_memory)


def _cap_memory():
    # Each pytest worker inherits this cap: a kernel whose trace or simulation grows past it
    # fails with a MemoryError instead of the machine's memory killer taking the worker (two
    # of the snapshot's large kernels grow past 12 GB here). NKILIB_MEMORY_GB changes it.
    import resource
    limit = int(float(os.environ.get("NKILIB_MEMORY_GB", "9")) * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
