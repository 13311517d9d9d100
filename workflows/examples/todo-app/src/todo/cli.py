"""The `todo` command (a scaffold stub, to be implemented)."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("TODO_CLI_STUB: not implemented yet", file=sys.stderr)
    return 1
