# The Python examples (examples/python) check themselves against NumPy / torch references.
import importlib.util
import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def load(name):
    # A real module in sys.modules: torch.compile looks functions up by their module.
    spec = importlib.util.spec_from_file_location(f"neuron_example_{name}",
                                                  os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["vector_add", "matmul", "softmax", "rmsnorm_torch"])
def test_example(name, capsys):
    if name == "rmsnorm_torch":
        pytest.importorskip("torch")
    assert load(name).main() == 0, capsys.readouterr().out
