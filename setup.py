# pip install . : builds the neuron._C extension with the project's CMake build (target
# neuron_python) and installs it with the pure-Python package python/neuron (docs/python.md).
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures (once) and builds neuron_python in NEURON_BUILD_DIR (default build/pip)."""

    def build_extension(self, ext):
        build = os.path.abspath(os.environ.get("NEURON_BUILD_DIR",
                                               os.path.join(ROOT, "build", "pip")))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                                   f"-DPython_EXECUTABLE={sys.executable}",
                                   "-DCMAKE_BUILD_TYPE=Release", "-DNEURON_BUILD_BENCH=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "neuron_python",
                               "-j", os.environ.get("NEURON_JOBS", "2")])
        built = glob.glob(os.path.join(build, "python", "neuron", "_C*.so"))
        if not built:
            raise RuntimeError(f"the CMake build left no _C*.so in {build}/python/neuron")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(built[0], dest)


setup(
    name="neuron",
    version="0.1.0",
    description="A kernel language and JIT toolkit for AWS Trainium (Python front end)",
    packages=find_packages("python"),
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("neuron._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.11",
    install_requires=["numpy", "ml_dtypes"],
    entry_points={"console_scripts": ["neuron=neuron.__main__:main"]},
    zip_safe=False,
)
