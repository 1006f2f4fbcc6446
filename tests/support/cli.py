"""The command line as tests run it: `cli.main` in this process with its output captured (fast: no interpreter
start, no imports again), or `python -m localspec` in a process of its own where the process is what a test
checks — what reaches the terminal's stderr (llama.cpp's own log lines too), stdin, the exit code — or where a
setting is read when a library is imported (huggingface_hub reads HF_* then: the stand-in Hub's tests)."""

import io
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from localspec.apps.cli import main


@dataclass
class CliResult:
    """What a run left: the fields of subprocess.CompletedProcess that tests read."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, stdin=None, env=None, process=False):
    """``localspec ARGS``; ``process``: in a process of its own (always so for a stdin or an HF_* setting)."""
    scratch = tempfile.mkdtemp(prefix="localspec-test-")  # keep the user's cache and saved chats clean
    env = {"LOCALSPEC_CACHE": scratch, "LOCALSPEC_DATA": scratch, "LOCALSPEC_CONFIG": scratch, **(env or {})}
    if process or stdin is not None or any(key.startswith("HF_") for key in env):
        return subprocess.run(
            [sys.executable, "-m", "localspec", *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=300,
            env={**os.environ, **env},
        )
    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(env)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return CliResult(code or 0, out.getvalue(), err.getvalue())


def assert_one_line_error(result, *needles):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]
