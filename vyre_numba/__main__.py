"""`python -m vyre_numba ...`: the `vyre-numba` command, for environments without its script."""
from .cli import main

raise SystemExit(main())
