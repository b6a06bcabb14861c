#!/usr/bin/env python3
"""Runs the NKI documentation's API example tests (`nki/test/test_nki_*.py` of a local checkout
of aws-neuron/aws-neuron-sdk: one unittest file per nki.isa / nki.language function, each kernel
run by NKI's simulator and checked against NumPy) unmodified through neuron's compatibility
layer (docs/nki-compat.md, "The NKI documentation's API examples").

    PYTHONPATH=build/python python3 scripts/run_nki_docs_tests.py /path/to/aws-neuron-sdk [-k ...]

The tests are copied into a temporary directory with a conftest.py that calls
neuron.compat.install() (so their `import neuronxcc.nki` resolves to neuron.legacy) and run
with pytest there; extra arguments go to pytest. Not part of CI: no test depends on the SDK."""
import os
import shutil
import subprocess
import sys
import tempfile

CONFTEST = "import neuron.compat\nneuron.compat.install()\n"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    sdk, extra = argv[0], argv[1:]
    tests = next((os.path.join(sdk, d) for d in ("nki/test", "general/nki/test")
                  if os.path.isdir(os.path.join(sdk, d))), None)
    if tests is None:
        print(f"{sdk}: no nki/test (or general/nki/test) directory; pass a checkout of "
              "aws-neuron/aws-neuron-sdk", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nki_docs_tests_") as tmp:
        work = os.path.join(tmp, "test")
        shutil.copytree(tests, work)
        with open(os.path.join(work, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", *extra]
        # the tests run in another directory: PYTHONPATH's relative entries made absolute
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
        return subprocess.call(cmd, cwd=work, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
