"""What every benchmark script shares: its command line and the skip on machines without a GPU."""
from __future__ import annotations

import argparse


def arguments(doc: str, add=None) -> argparse.Namespace:
    """`--json PATH` and `--quick`, plus what `add(parser)` adds; the script's docstring as help."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    if add is not None:
        add(ap)
    return ap.parse_args()


def skipped() -> bool:
    """Print `skipped: <why>` and say True where no CUDA GPU can run the benchmark."""
    import vyre_numba as vn

    why = vn.registry.unavailable_reason("cuda")
    if why:
        print(f"skipped: {why}")
    return bool(why)
