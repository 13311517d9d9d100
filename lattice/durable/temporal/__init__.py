"""Runs on Temporal: a run is a workflow, an op an activity, a question an update it waits for.

Needs the ``temporal`` extra (``pip install -e '.[temporal]'``); importing this
package without it raises a LatticeUserError that says so. ``plan.py`` turns an ExecIR
into what the workflow walks; ``workflow.py`` is the workflow; ``ops.py`` executes one op
on a worker; ``worker.py`` runs workers; ``client.py`` starts, follows and answers runs;
``export.py`` writes a run's folder from what the workflow keeps.
"""

from lattice.errors import LatticeUserError, install_hint

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise LatticeUserError(
        f"the Temporal engine needs the temporal extra: {install_hint('temporal')}"
    ) from exc

DEFAULT_TASK_QUEUE = "lattice"
"""The task queue runs are started on and workers poll, unless told otherwise."""
