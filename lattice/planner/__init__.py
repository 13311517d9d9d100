"""``lattice plan``: planning passes over a project directory, an application built on
the engine. ``passes`` (what each pass reads and how it runs), ``artifacts`` (the
reviewed artifacts and their store), ``workflows/`` (each pass as a workflow document,
with mock scripts and recorded fixtures) and ``schemas/`` (the artifacts' JSON Schemas)."""
