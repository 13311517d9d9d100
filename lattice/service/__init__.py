"""The run service: what every front door (the CLI, ``lattice serve``, ``lattice batch``)
shares to turn a user's options into a run: the provider, settings and runner."""
