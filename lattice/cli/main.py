"""The ``lattice`` command's entry point: parse, run the command's handler, map errors
to exit codes.

``lattice`` alone prints the help and exits 0, as ``lattice --help`` does.
Exit codes: 0 completed, 1 run failed, 2 bad usage or invalid document, 3 halted
waiting for a human, 130 interrupted, 141 (as a shell reports a command killed by
SIGPIPE) when the reader of its output went away before the command finished.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from lattice.cli.parser import build_batch_diff_parser, build_parser
from lattice.errors import DocumentError, LatticeRunError, LatticeUserError
from lattice.telemetry import flush as flush_traces

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HALTED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
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
    code = _main(argv)
    if argv is None and "temporalio" in sys.modules:
        # The command ends the process. Temporal's SDK leaves threads of its Rust core
        # that can abort the interpreter's finalization (SIGABRT, "PyGILState_Release",
        # temporalio/sdk-python#300) after the command succeeded: end without it, once
        # the spans a traced worker still holds are exported (atexit is skipped too).
        try:
            flush_traces(10_000)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    return code


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:2] == ["batch", "diff"]:  # ``lattice batch WORKFLOW`` has a sub-command too
        args = build_batch_diff_parser().parse_args(words[2:])
    elif words:
        args = build_parser().parse_args(words)
    try:
        if not words:  # what a new user types first: the help, as ``lattice --help`` prints it
            build_parser().print_help()
            return EXIT_OK
        return _run(args)
    except BrokenPipeError:
        # The reader left while the command was still writing: its outcome is unknown
        # to whoever reads, so it is never reported as success.
        _silence_output()
        return EXIT_BROKEN_PIPE


def _run(args: Any) -> int:
    """Run the command's handler and map its errors to exit codes. A broken pipe while
    an error is reported keeps the error's exit code."""
    try:
        return int(_handler(args.handler)(args))
    except DocumentError as exc:
        return _report(EXIT_USAGE, *(d.format(exc.source) for d in exc.diagnostics))
    except LatticeUserError as exc:
        return _report(EXIT_USAGE, f"lattice: error[{exc.error_type}]: {exc.message}")
    except LatticeRunError as exc:
        return _report(EXIT_FAILED, f"lattice: run failed [{exc.error_type}]: {exc.message}")
    except KeyboardInterrupt:
        return _report(EXIT_INTERRUPTED, "lattice: interrupted")


def _report(code: int, *lines: str) -> int:
    """Print ``lines`` on stderr and return ``code``, even when stderr's reader left."""
    try:
        for line in lines:
            print(line, file=sys.stderr)
    except BrokenPipeError:
        _silence_output()
    return code


def _silence_output() -> None:
    """Point stdout and stderr at the null device, so that flushing what is left in
    their buffers at exit fails no more (Python would report it and exit with 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (tests)
            continue
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
