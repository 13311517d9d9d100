"""``python -m lattice.cli``: the ``lattice`` command without its console script."""

import sys

from lattice.cli.main import main

sys.exit(main())
