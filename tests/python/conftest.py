# pytest setup for the Python front end: neuron must be importable (PYTHONPATH=<build>/python).
import os
import sys

import pytest

try:
    import neuron  # noqa: F401
except ImportError as e:  # pragma: no cover
    raise pytest.UsageError(
        f"cannot import neuron ({e}); build the neuron_python target and set "
        "PYTHONPATH=<build>/python (docs/python.md)")

sys.path.insert(0, os.path.dirname(__file__))

import flex_tally  # noqa: E402  (the FlexAttention conformance tally, printed after a run)


def pytest_runtest_logreport(report):
    flex_tally.record(report)


def pytest_terminal_summary(terminalreporter):
    flex_tally.summary(terminalreporter)
