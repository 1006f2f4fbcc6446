import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import tempfile

# Tests never read or write the user's caches (suffix answers, measured cost curves): one scratch root for
# the whole run, unless a test points LOCALSPEC_CACHE elsewhere itself.
os.environ.setdefault("LOCALSPEC_CACHE", tempfile.mkdtemp(prefix="localspec-test-cache-"))
# ... nor the user's settings (config.toml), nor an `exact` they set in the environment
os.environ.setdefault("LOCALSPEC_CONFIG", tempfile.mkdtemp(prefix="localspec-test-config-"))
os.environ.pop("LOCALSPEC_EXACT", None)

import time  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def virtual_clock(monkeypatch):
    """time.perf_counter reads a VirtualClock for the test: only timed fakes move it."""
    from fakes import VirtualClock

    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    return clock
