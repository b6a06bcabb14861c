"""Which functions named in NKI_API.md's API tables neuron does not provide.

    PYTHONPATH=build/python python3 scripts/nki_api_coverage.py [-v] [path/to/NKI_API.md]

Reads the tables (and the `name(...)` lists in the prose) of §4 (legacy, `neuronxcc.nki`),
§5.1-5.2 (operators and activation functions, checked for the current generation) and §6
(current, `nki`; §6.3 names tensor methods, looked up on the tensor class), and prints, per
generation, the names that neither the generation's top module nor its `language` / `isa`
module nor the tensor class defines (the legacy layer's stubs that only raise "not supported"
count as missing); -v also lists every name found. It parses Markdown by convention, so a row
written unusually can be missed or misread: a starting point for a human, not a test."""
import keyword
import os
import re
import sys

NAME = re.compile(r"[a-z_][a-z0-9_]*")


def sections(text):
    """(section number such as '4.9', its lines) for every ### heading."""
    out, num, lines = [], None, []
    for line in text.splitlines():
        m = re.match(r"###\s+(\d+\.\d+)", line)
        if m:
            if num:
                out.append((num, lines))
            num, lines = m.group(1), []
        elif num:
            lines.append(line)
    if num:
        out.append((num, lines))
    return out


def names_in(cell):
    """API names in the backticked tokens of a table cell: `f(...)`, `a, b (x)`,
    `bitwise_and/or/xor`, `nl.f`."""
    found = []
    for tok in re.findall(r"`([^`]*)`", cell):
        for part in re.split(r",\s*", tok.split("(")[0]):
            part = re.sub(r"^(nl|nisa|nki|ncc)\.", "", part.strip())
            pieces = part.split("/")
            head = NAME.fullmatch(pieces[0].strip())
            if not head:
                continue
            found.append(head.group(0))
            stem = head.group(0).rsplit("_", 1)[0]
            found += [f"{stem}_{p.strip()}" for p in pieces[1:] if NAME.fullmatch(p.strip())]
    return [n for n in found if not keyword.iskeyword(n) and len(n) > 1]


def documented(text):
    """{'legacy': names, 'current': names} from the tables and prose lists."""
    out = {"legacy": set(), "current": set()}
    for num, lines in sections(text):
        major = num.split(".")[0]
        gen = {"4": "legacy", "6": "current", "5": "current"}.get(major)
        if gen is None or num in ("5.3", "5.4", "5.5", "5.6", "6.2", "6.6", "4.3",
                                  "4.4", "4.5", "4.10", "4.11"):
            continue
        for line in lines:
            if line.startswith("|") and not line.startswith("| ---"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                first = names_in(cells[0])
                if not first and len(cells) > 1 and "`" not in cells[0]:
                    first = names_in(cells[1])  # "binary math | `add, subtract, ...`"
                out[gen].update(first)
            else:  # prose lists: `ndarray(shape, ...)`, `shared_constant(constant)`
                out[gen].update(m.group(1) for m in re.finditer(r"`([a-z_][a-z0-9_]*)\(", line))
    return out


def modules():
    import neuron.compat
    neuron.compat.install()
    import importlib
    tensor = neuron._C.Tensor  # tensor methods (t.astype, t.reshape, ...) count as well
    return {gen: [importlib.import_module(m) for m in mods] + [tensor] for gen, mods in {
        "legacy": ("neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa"),
        "current": ("nki", "nki.language", "nki.isa"),
    }.items()}


def provided(name, mods):
    for m in mods:
        if name in getattr(m, "UNSUPPORTED", ()):
            continue
        if hasattr(m, name):
            return True
    return False


# Deliberately out of scope: collectives (one simulated core).
IGNORED = set("""all_reduce core_barrier sendrecv""".split())

# Tokens of the tables that are not API names (parameters, values, prose words).
NOT_API = set("""op0 op1 reduce_op dtype mask kernel float32 bool idle reset reduce reset_reduce
load_reduce np op print relu_param""".split())


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    path = args[0] if args else os.path.join(
        os.path.dirname(__file__), "..", "..", "shared", "NKI_API.md")
    with open(path) as f:
        docs = documented(f.read())
    mods = modules()
    for gen in ("legacy", "current"):
        names = sorted(docs[gen] - NOT_API)
        missing = [n for n in names if not provided(n, mods[gen])]
        todo = [n for n in missing if n not in IGNORED]
        print(f"{gen}: {len(names)} documented names, {len(names) - len(missing)} provided")
        if "-v" in sys.argv:
            print(f"  documented: {' '.join(names)}")
        print(f"  missing ({len(todo)}): {' '.join(todo) or '-'}")
        print(f"  missing, out of scope ({len(missing) - len(todo)}): "
              f"{' '.join(n for n in missing if n in IGNORED) or '-'}")


if __name__ == "__main__":
    main()
