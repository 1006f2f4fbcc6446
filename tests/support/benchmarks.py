"""A script of benchmarks/ imported as a module (they put the repository root on sys.path themselves)."""

import importlib
import sys
from contextlib import contextmanager
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@contextmanager
def benchmark_module(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
