"""Each client in a virtual environment of its own, made by the harness (never a `make test` dependency):
~/.cache/localspec-clients/NAME, with the client's pinned release from PyPI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HOME = Path.home() / ".cache" / "localspec-clients"
PYTHON = "/usr/bin/python3"  # the system's Python, not the checkout's venv: a user's install


def client_env(name: str, requirement: str, extra: tuple[str, ...] = ()) -> Path:
    """The venv's folder, created and the client installed there if it is not yet (idempotent)."""
    env = HOME / name
    stamp = env / ".installed"
    wanted = " ".join((requirement, *extra))
    if stamp.is_file() and stamp.read_text() == wanted:
        return env
    if not (env / "bin" / "python").exists():
        subprocess.run([PYTHON, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, requirement, *extra], check=True, stdout=sys.stderr)
    stamp.write_text(wanted)
    return env


def version(env: Path, distribution: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    return subprocess.run(
        [str(env / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
