"""`neuron` / `python -m neuron`: the toolkit's command line. Subcommands:

    neuron runs list | show ID | compare A B     the run history (neuron.runs)
"""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["runs"]:
        from .runs import main as runs_main
        return runs_main(argv[1:])
    print(__doc__.strip(), file=sys.stderr)
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main())
