"""The doc_snippets test: the C++ of README.md and docs/first-kernel.md compiles, links and runs
exactly as written, with the build commands the guide gives.

docs/first-kernel.md: its ```cpp blocks, in order, are first_kernel.cpp; its ```sh block runs
verbatim with bash in a scratch folder holding that file and a link `build` to the build folder,
with HOME in the scratch folder (so `cmake --install build --prefix "$HOME/..."` installs there).
README.md: its first ```cpp block is vector_add.cpp, built by the ```sh block that follows it,
with the PKG_CONFIG_PATH the guide's block exported.

    python3 check_doc_snippets.py --source <repo> --build <build dir> --work <scratch dir>
"""
import argparse
import os
import re
import shutil
import subprocess
import sys


def blocks(path, lang):
    text = open(path, encoding="utf-8").read()
    return re.findall(r"^```" + lang + r"\n(.*?)^```", text, re.S | re.M)


def run(script, cwd, env, what):
    print(f"--- {what}:\n{script}", flush=True)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env)
    if r.returncode != 0:
        sys.exit(f"doc_snippets: {what} failed (exit {r.returncode})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "home"))
    os.symlink(os.path.abspath(a.build), os.path.join(a.work, "build"))
    env = dict(os.environ, HOME=os.path.join(a.work, "home"))

    guide = os.path.join(a.source, "docs", "first-kernel.md")
    cpp, sh = blocks(guide, "cpp"), blocks(guide, "sh")
    assert len(cpp) == 2 and len(sh) == 1, (len(cpp), len(sh))
    assert cpp[0].startswith("// first_kernel.cpp\n")
    with open(os.path.join(a.work, "first_kernel.cpp"), "w") as f:
        f.write("\n".join(cpp))
    # The guide's block, then its exported variables for the README's command.
    run(sh[0] + '\nenv | grep ^PKG_CONFIG_PATH= > guide.env', a.work, env, "docs/first-kernel.md")
    for line in open(os.path.join(a.work, "guide.env")):
        k, v = line.rstrip("\n").split("=", 1)
        env[k] = v

    readme = open(os.path.join(a.source, "README.md"), encoding="utf-8").read()
    m = re.search(r"^```cpp\n(.*?)^```\n\n?```sh\n(.*?)^```", readme, re.S | re.M)
    assert m, "README.md: a ```cpp block followed by the ```sh block that builds it"
    with open(os.path.join(a.work, "vector_add.cpp"), "w") as f:
        f.write(m.group(1))
    run(m.group(2), a.work, env, "README.md")

    # README: "CMake projects use find_package(neuron) and link neuron::neuron": the same
    # program as a CMake project that sets no C++ standard of its own.
    prefix = os.path.dirname(os.path.dirname(env["PKG_CONFIG_PATH"].split(":")[0]))
    project = os.path.join(a.work, "cmake_project")
    os.makedirs(project)
    shutil.copy(os.path.join(a.work, "vector_add.cpp"), project)
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.22)\nproject(vector_add LANGUAGES CXX)\n"
                "find_package(neuron REQUIRED)\nadd_executable(vector_add vector_add.cpp)\n"
                "target_link_libraries(vector_add PRIVATE neuron::neuron)\n")
    run(f'cmake -S . -B build -G Ninja -DCMAKE_PREFIX_PATH="{prefix}" -DCMAKE_BUILD_TYPE=Release'
        " && cmake --build build && ./build/vector_add", project, env,
        "a CMake project linking neuron::neuron")
    print("doc_snippets: README.md and docs/first-kernel.md build and run as written, and as a "
          "CMake project")


if __name__ == "__main__":
    main()
