"""The coding-agent task: aider (from PyPI, through LiteLLM) adds type hints to every function of a small git
repository's module, in one edit format; done when the edited module parses and the repository's own tests pass."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "clients"
REQUIREMENT = "aider-chat==0.86.2"
TASK = "Add type hints to every function in shapes.py (parameters and return types). Do not change behaviour."
GIT = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def make_repo(dest: Path) -> Path:
    """A fresh git repository: shapes.py and its unittest tests, one commit."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in ("shapes.py", "test_shapes.py"):
        shutil.copy(DATA / f"{name}.txt", dest / name)
    env = {**os.environ, **GIT}
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "shapes"]):
        subprocess.run(argv, cwd=dest, check=True, env=env)
    return dest


def annotated(source: str) -> tuple[int, int]:
    """(functions with a return annotation and every parameter annotated, functions)."""
    functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
    full = [f for f in functions if f.returns is not None and all(a.annotation for a in f.args.args)]
    return len(full), len(functions)


def run(env: Path, repo: Path, base_url: str, model: str, edit_format: str, timeout: float = 900) -> dict:
    """One aider run on ``repo``: wall time, exit code, and the checks."""
    argv = [
        str(env / "bin" / "aider"),
        "--model",
        f"openai/{model}",
        "--openai-api-base",
        base_url,
        "--openai-api-key",
        "sk-local",
        "--edit-format",
        edit_format,
        "--yes-always",
        "--no-check-update",
        "--analytics-disable",
        "--no-show-model-warnings",
        "--map-tokens",
        "0",
        "--no-pretty",
        "--no-fancy-input",
        "--message",
        TASK,
        "shapes.py",
    ]
    # LiteLLM would fetch its model price list from the internet at import: use the copy it ships
    child_env = {**os.environ, **GIT, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TERM": "dumb"}
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=repo, env=child_env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    wall = time.perf_counter() - started
    source = (repo / "shapes.py").read_text()
    try:
        hinted, functions = annotated(source)
        parses = True
    except SyntaxError:
        hinted, functions, parses = 0, 0, False
    tests = subprocess.run(["python3", "-m", "unittest", "-q"], cwd=repo, capture_output=True, text=True, timeout=120)
    return {
        "edit_format": edit_format,
        "wall_s": round(wall, 2),
        "exit_code": done.returncode,
        "parses": parses,
        "tests_pass": tests.returncode == 0,
        "functions_hinted": hinted,
        "functions": functions,
        "changed": source != (DATA / "shapes.py.txt").read_text(),
        "ok": done.returncode == 0
        and parses
        and tests.returncode == 0
        and source != (DATA / "shapes.py.txt").read_text(),
        "output_tail": (done.stdout + done.stderr)[-1500:],
    }
