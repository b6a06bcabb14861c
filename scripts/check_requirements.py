"""Exit 0 when every `name==version` pin in a requirements file is installed, 1 otherwise."""
import sys
from importlib import metadata


def satisfied(path: str) -> bool:
    ok = True
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != version:
            print(f"setup: {name} wants {version}, found {have}")
            ok = False
    return ok


if __name__ == "__main__":
    sys.exit(0 if satisfied(sys.argv[1]) else 1)
