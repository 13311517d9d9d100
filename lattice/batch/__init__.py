"""``lattice batch``: one workflow over a dataset, resumable, on one machine or a Ray cluster.

The package is engine-neutral at its core and keeps each concern in a module of its own:

- ``rows``: the inputs file (JSON lines: an inputs object, or ``{"id", "inputs",
  "answers"}``) read into rows, with bad lines reported by line number;
- ``results``: the results file, appended and flushed per row, forced to disk in the
  background, read back (a torn last line dropped) to resume;
- ``mocks``: a mock script for a batch (every row runs against its own copy; ``rows``
  overrides the answers of chosen rows);
- ``limits``: what the whole batch may spend (calls, cost) and how fast it may call
  (requests and tokens per minute), shared by every run in flight;
- ``worker``: what runs rows, in this process or in a Ray actor (``BatchWorker``);
- ``engine``: the driver: plans which rows to run, runs them on an engine (``local``:
  this process's event loop; ``ray``: ``ray_engine``), writes the results, keeps the
  progress and makes the summary;
- ``progress``, ``summary``, ``diff``: the live view, the summary at the end, and
  comparing two batches (or two runs).

``lattice.batch.api`` holds the Python entry points (``lattice.batch``/``lattice.abatch``).
Nothing here imports Ray unless the ``ray`` engine is chosen.
"""
