"""The ``lattice`` command: one module per command group.

``parser`` declares every command's arguments (argparse only, so ``--help`` is fast),
``main`` dispatches to the handler a command names, ``common`` holds what several
commands share (lowering with diagnostics, JSON argument files, progress, result
reporting). ``compile`` (lower, check, schema, hash-prompt, config), ``run`` (run,
resume, runs), ``batch`` (batch, batch diff), ``plan`` (plan, artifacts), ``export`` and
``mcp`` hold the handlers.
"""

from lattice.cli.main import main

__all__ = ["main"]
