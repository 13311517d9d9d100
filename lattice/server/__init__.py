"""``lattice serve``: an HTTP gateway to start, watch, answer and resume runs (docs/server.md).

``app`` builds the FastAPI application (routes, errors, the token and body-size guard),
``manager`` keeps the runs this process is running on its event loop and reads run
folders back, ``events`` streams a run's events as Server-Sent Events (one broadcaster
per active run, the folder's ``events.jsonl`` for replay), ``workflows`` resolves and
lowers the documents a client names or sends, and ``main`` is the command itself.
Runs are started and resumed through ``lattice.service.runs``, like the CLI's.
FastAPI and uvicorn are the ``server`` extra: nothing here is imported by ``lattice --help``.
"""
