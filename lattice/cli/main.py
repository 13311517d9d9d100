"""The ``lattice`` command's entry point: parse, run the command's handler, map errors
to exit codes.

Exit codes: 0 completed, 1 run failed, 2 bad usage or invalid document, 3 halted
waiting for a human, 130 interrupted.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from lattice.cli.parser import build_batch_diff_parser, build_parser
from lattice.errors import DocumentError, LatticeRunError, LatticeUserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HALTED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
EXIT_BY_STATUS = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "halted": EXIT_HALTED,
    "interrupted": EXIT_INTERRUPTED,
}


def _handler(target: str) -> Callable[[Any], int]:
    module, _, function = target.partition(":")
    handler: Callable[[Any], int] = getattr(importlib.import_module(module), function)
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lattice`` console script; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:2] == ["batch", "diff"]:  # ``lattice batch WORKFLOW`` has a sub-command too
        args = build_batch_diff_parser().parse_args(words[2:])
    else:
        args = build_parser().parse_args(words)
    try:
        return int(_handler(args.handler)(args))
    except DocumentError as exc:
        for diagnostic in exc.diagnostics:
            print(diagnostic.format(exc.source), file=sys.stderr)
        return EXIT_USAGE
    except LatticeUserError as exc:
        print(f"lattice: error[{exc.error_type}]: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except LatticeRunError as exc:
        print(f"lattice: run failed [{exc.error_type}]: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("lattice: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
