"""``lattice deploy DIR``: each workflow of a folder kept as an immutable version in
``--runs-dir``'s ``.versions`` (docs/services.md, "Versions"), as ``lattice serve
--workflows DIR --runs-dir RUNS`` keeps them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lattice.config import load_config
from lattice.errors import InputError
from lattice.services.catalog import Catalog
from lattice.services.versions import VERSIONS_DIR


def deploy(args: argparse.Namespace) -> int:
    """Deploy the new content of each workflow under ``args.folder``; one line per
    workflow (``NAME@VERSION  new|unchanged  digest``), exit 2 when a file does not lower."""
    root = Path(args.folder)
    if not root.is_dir():
        raise InputError(f"lattice deploy {args.folder}: not a directory")
    config = load_config(args.config)
    catalog = Catalog(
        root,
        mcp_servers=list(config.mcp.servers) if config.source else None,
        versions=Path(args.runs_dir) / VERSIONS_DIR,
    )
    assert catalog.versions is not None
    before = {name: catalog.versions.numbers(name) for name in catalog.versions.names()}
    workflows = catalog.workflows()
    for name, workflow in sorted(workflows.items()):
        version = workflow.version
        assert version is not None
        state = "unchanged" if version.number in before.get(name, []) else "new"
        sys.stdout.write(f"{version.ref:<40} {state:<9}  {version.digest}\n")
    for where, problem in sorted(catalog.problems.items()):
        sys.stderr.write(f"lattice deploy: {where} not deployed: {problem}\n")
    if not workflows and not catalog.problems:
        sys.stderr.write(f"lattice deploy: no workflows under {root}\n")
    return 2 if catalog.problems else 0
