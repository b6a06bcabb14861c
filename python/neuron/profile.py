"""neuron.profile: the simulator's timing model from Python.

    prof = neuron.profile(kernel, target="trn2", timing_only=True)(lhsT, rhs)
    prof.summary["verdict"], prof.units, prof.lines, prof.hints   # tables as data
    print(prof)                                                     # the text summary
    prof.save("prof")                                               # Perfetto JSON, text, HTML
    prof                                                            # in a notebook: the report

Arguments are arrays (NumPy, torch) or (shape, dtype) pairs; with timing_only (the default) no
data is computed, so full-size kernels profile in seconds. The tables come from the C++
analysis (runtime/profile.hpp), the same numbers as the text and HTML reports. NEURON_PROFILE=dir
writes every profile's files there; NEURON_RUNS=1 (or record=True) records each run in the run
history (neuron.runs).
"""
import html as _html
import os

from . import _C
from . import runtime
from .dtypes import numpy_dtype
from .errors import NeuronError, strip_toolkit_frames

__all__ = ["profile", "Profile", "compare"]


class Profile:
    """A simulated run's timing: `summary` (dict), `units`, `lines`, `waits`, `hints` (lists of
    dicts), `text`, `outputs` (when executed), `save(dir)`, `html()`; see docs/profiling.md."""

    def __init__(self, prof, outputs=None, shapes=None, ir_text=None, options=None):
        self._p = prof
        stats = prof.stats()
        self.summary = stats["summary"]
        self.units = stats["units"]
        self.lines = stats["lines"]
        self.waits = stats["waits"]
        self.hints = stats["hints"]
        self.dma_engine_busy_ns = stats["dma_engine_busy_ns"]
        self.outputs = outputs
        self.shapes = shapes or []
        self.ir_text = ir_text
        self.options = options or {}
        self.run_id = None  # set when recorded in the run history

    @property
    def kernel(self):
        return self._p.kernel

    @property
    def target(self):
        return self._p.target

    @property
    def total_ns(self):
        """Device time plus the target's launch floor (what a benchmark measures)."""
        return self.summary["total_ns"]

    @property
    def device_ns(self):
        return self.summary["device_ns"]

    @property
    def verdict(self):
        return self.summary["verdict"]

    @property
    def text(self):
        return self._p.summary_text()

    def __str__(self):
        return self.text

    def __repr__(self):
        return (f"<neuron.Profile {self.kernel} on {self.target}: "
                f"{self.device_ns / 1000:.2f} us, {self.verdict}>")

    def trace_json(self):
        """Chrome trace event JSON (Perfetto, chrome://tracing)."""
        return self._p.trace_json()

    def html(self, compare=None, before_label="before", after_label="after"):
        """The self-contained HTML report; with `compare` (another Profile of the kernel, the
        baseline) it shows the comparison too."""
        return self._p.html(compare._p if compare is not None else None, before_label,
                            after_label)

    def save(self, directory, stem=None):
        """Writes <directory>/<stem>.json (Perfetto), .txt and .html; returns the three paths."""
        return self._p.write(os.fspath(directory), stem or self.kernel)

    def compare(self, baseline, before_label="before", after_label="after"):
        """What got faster or slower against `baseline` (another Profile): a Comparison."""
        return compare(baseline, self, before_label, after_label)

    def record(self, db=None, **extra):
        """Records this run in the run history (neuron.runs); returns its id."""
        from . import runs
        self.run_id = runs.record(self, db=db, **extra)
        return self.run_id

    def _repr_html_(self):
        # An iframe keeps the report's script and styles apart from the notebook's.
        return ('<iframe style="width:100%;height:720px;border:1px solid #ddd" srcdoc="' +
                _html.escape(self.html(), quote=True) + '"></iframe>')


class Comparison:
    """Two profiles of one kernel side by side: `units` and `lines` as (what, before_ns,
    after_ns) rows, `text`, and `speedup` (before / after device time)."""

    def __init__(self, d):
        self.kernel = d["kernel"]
        self.before_ns, self.after_ns = d["before_ns"], d["after_ns"]
        self.before_verdict, self.after_verdict = d["before_verdict"], d["after_verdict"]
        self.units = d["units"]
        self.lines = d["lines"]
        self.text = d["text"]

    @property
    def speedup(self):
        return self.before_ns / self.after_ns if self.after_ns else float("inf")

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<neuron.Comparison {self.kernel}: x{self.speedup:.2f}>"


def compare(before, after, before_label="before", after_label="after"):
    """Compares two Profiles of one kernel (before -> after)."""
    return Comparison(_C.compare_profiles(before._p, after._p, before_label, after_label))


def _record_by_default():
    v = os.environ.get("NEURON_RUNS", "")
    return v.lower() not in ("", "0", "false", "off", "no")


class _Profiler:
    def __init__(self, kernel, target, timing_only, grid, record, db):
        from .kernel import Kernel
        self.kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel, mode="simulate")
        self.target = target or self.kernel.target
        self.timing_only = timing_only
        self.grid = tuple(grid) if grid is not None else self.kernel.grid
        self.record = _record_by_default() if record is None else record
        self.db = db
        self._compiled = {}

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        return _Profiler(self.kernel, self.target, self.timing_only, grid, self.record, self.db)

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        from .kernel import _Call, _is_spec  # the kernel's own split into tensors and parameters
        if not self.timing_only and any(_is_spec(a) for a in (*args, *kwargs.values())):
            raise TypeError("timing_only=False computes the outputs: pass arrays, not "
                            "(shape, dtype) pairs")
        call = _Call(self.kernel, args, kwargs, specs_ok=self.timing_only)
        specs = call.specs()
        shapes = [(list(s.shape), str(s.dtype).split(".")[-1]) for s in specs]
        options = {"timing_only": self.timing_only, "grid": list(self.grid),
                   "params": {n: repr(v) for n, v in call.params.items()}}
        try:
            ir = self.kernel.trace(*args, **kwargs)
            key = (str(ir), self.target)
            if key not in self._compiled:
                self._compiled[key] = _C.compile(ir, self.target)
            compiled = self._compiled[key]
            if self.timing_only:
                outs, printed, prof = _C.simulate_profiled(compiled, [], list(self.grid), False)
                outputs = None
            else:
                tensors = list(call.tensors.values())
                arrays, write_back = runtime.host_arrays(tensors)  # kept alive until write_back
                host = runtime.host_tensors(arrays)
                outs, printed, prof = _C.simulate_profiled(compiled, host, list(self.grid), True)
                write_back()
                outputs = [o.to_numpy(numpy_dtype(o.dtype)) for o in outs]
                like_torch = any(runtime.is_torch(a) for a in tensors)
                outputs = [runtime.from_numpy(o, like_torch) for o in outputs]
                outputs = outputs[0] if len(outputs) == 1 else tuple(outputs)
            if printed:
                import sys
                sys.stdout.write(printed)
        except NeuronError as e:
            if self.record:
                from . import runs
                runs.record_failure(getattr(self.kernel, "__name__", "kernel"), self.target,
                                    shapes, options, str(e), db=self.db)
            raise e.with_traceback(strip_toolkit_frames(e.__traceback__)) from None
        p = Profile(prof, outputs, shapes, str(ir), options)
        if self.record:
            p.record(db=self.db)
        return p


def profile(kernel, target=None, timing_only=True, grid=None, record=None, db=None):
    """neuron.profile(kernel, target="trn2", timing_only=True)(*args) -> Profile.

    kernel: a @neuron.kernel or a plain kernel function. target: "trn1", "trn2", "trn3" (the
    kernel's own by default). timing_only: run the timing model without computing data (inputs
    may be (shape, dtype) pairs); False also computes the outputs (Profile.outputs). grid: a
    launch grid (or profile(k)[g0, g1](...)). record: add the run to the run history (default:
    the NEURON_RUNS environment variable); db: its path (default: neuron.runs.default_path())."""
    return _Profiler(kernel, target, timing_only, grid, record, db)
