"""numba-cuda 0.30 installs an import redirector that treats every module whose name *contains*
"numba.cuda" as numba's own — `vyre_numba.cuda` included — and recurses until RecursionError.
This finder resolves vyre_numba's own `cuda` subpackage first, with the standard path finder."""
from __future__ import annotations

import importlib.machinery
import sys


class OwnCudaPackageFinder:
    @staticmethod
    def find_spec(name, path, target=None):
        if name == "vyre_numba.cuda" or name.startswith("vyre_numba.cuda."):
            return importlib.machinery.PathFinder.find_spec(name, path, target)
        return None


if not any(f is OwnCudaPackageFinder or type(f).__name__ == "OwnCudaPackageFinder" for f in sys.meta_path):
    sys.meta_path.insert(0, OwnCudaPackageFinder)
