"""``lattice eval``: whether a change to a prompt, a model or a document made a workflow
better or worse, measured over a dataset with expectations (docs/evals.md).

- ``dataset``: the batch's JSON-lines rows with ``expected``/``expect``, and the
  ``{"$eval": …}`` first line (scorers, thresholds);
- ``scorers``: exact, normalised, JSON Schema, JMESPath, numeric, regex, overlap and a
  user's Python function; ``judge``: a model as judge, under contract;
- ``scoring``: scoring a variant's results lines, comparing two variants row by row;
  ``stats``: means and 95% intervals;
- ``run``: running the variants with the batch engine and making the report;
  ``cache``: model answers reused across runs (opt-in);
- ``report`` and ``html``: the text table and the self-contained HTML report.
"""
