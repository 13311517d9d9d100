"""Run folders: where a run is recorded, and everything that reads one back.

``store`` writes a run's folder as it goes (events, op records, snapshots,
checkpoint), ``redaction`` masks secrets on the way, ``folder`` reads the files
back (resume), ``view`` summarises folders (``lattice runs``) and ``export``
turns them into training data (``lattice export sft``).
"""

from lattice.runs.store import RunStore

__all__ = ["RunStore"]
