"""The pieces that make localspec run on Windows and macOS, tested on Linux: where files go (with the
platform faked), an install without a C compiler, the memory figure without /proc or `resource`."""

import builtins
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from localspec.places import place

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "system, kind, want",
    [
        ("linux", "data", ".local/share/localspec"),
        ("linux", "cache", ".cache/localspec"),
        ("linux", "config", ".config/localspec"),
        ("darwin", "data", "Library/Application Support/localspec"),
        ("darwin", "cache", "Library/Caches/localspec"),
        ("darwin", "config", "Library/Application Support/localspec"),
    ],
)
def test_each_system_gets_its_own_convention(tmp_path, system, kind, want):
    got = place(kind, env={}, system=system, home=tmp_path)
    assert got.path == tmp_path / want and got.source == "default"


def test_windows_uses_local_and_roaming_app_data(tmp_path):
    env = {"LOCALAPPDATA": str(tmp_path / "Local"), "APPDATA": str(tmp_path / "Roaming")}
    assert place("data", env=env, system="win32", home=tmp_path).path == tmp_path / "Local" / "localspec"
    assert place("cache", env=env, system="win32", home=tmp_path).path == tmp_path / "Local" / "localspec" / "Cache"
    assert place("config", env=env, system="win32", home=tmp_path).path == tmp_path / "Roaming" / "localspec"
    # without the variables: their usual places under the profile folder
    assert place("data", env={}, system="win32", home=tmp_path).path == tmp_path / "AppData/Local/localspec"


@pytest.mark.parametrize("system", ["linux", "darwin", "win32"])
def test_localspec_and_xdg_variables_win_on_every_system(tmp_path, system):
    env = {"LOCALSPEC_CACHE": str(tmp_path / "mine"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    got = place("cache", env=env, system=system, home=tmp_path)
    assert got.path == tmp_path / "mine" and got.source == "environment (LOCALSPEC_CACHE)"
    got = place("data", env={"XDG_DATA_HOME": str(tmp_path / "xdg")}, system=system, home=tmp_path)
    assert got.path == tmp_path / "xdg" / "localspec" and got.source == "environment (XDG_DATA_HOME)"


@pytest.mark.parametrize("system", ["darwin", "win32"])
def test_an_older_localspecs_folder_is_kept_on_macos_and_windows(tmp_path, system):
    (tmp_path / ".local/share/localspec/chats").mkdir(parents=True)  # chats from before the move
    got = place("data", env={}, system=system, home=tmp_path)
    assert got.path == tmp_path / ".local/share/localspec" and "older localspec" in got.source
    assert place("cache", env={}, system=system, home=tmp_path).source == "default"  # no old cache: the new place


def test_chats_and_caches_follow_the_variables(tmp_path, monkeypatch):
    from localspec.chat.store import chats_dir
    from localspec.drafters.suffix.store import default_cache_dir
    from localspec.places import user_models_file

    monkeypatch.setenv("LOCALSPEC_DATA", str(tmp_path / "d"))
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "cfg"))
    monkeypatch.delenv("LOCALSPEC_MODELS", raising=False)
    assert chats_dir() == tmp_path / "d" / "chats" and default_cache_dir() == tmp_path / "c" / "suffix"
    assert user_models_file() == tmp_path / "cfg" / "models.toml"


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
DEPENDENCIES = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]  # numpy, llama_cpp, ...


def build_wheel(tmp_path: Path, **env) -> Path:
    """localspec's wheel, built from a copy of this checkout's sources (never its compiled leftovers)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "localspec", src / "localspec", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    done = subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheels"), str(src)],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("localspec-*.whl")
    return wheel


def test_localspec_installs_and_drafts_without_a_c_compiler(tmp_path):
    """The suffix trie's extension is optional: with no working compiler (CC=false) the wheel still builds,
    holds no compiled trie, and suffix decoding runs on the pure-Python one."""
    wheel = build_wheel(tmp_path, CC="false")
    target = tmp_path / "site"
    done = subprocess.run([*PIP, "install", "--no-deps", "--target", str(target), str(wheel)], capture_output=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (target / "localspec/drafters/suffix/_suffixtree.c").exists()  # where the compiled trie would lie
    assert not [p for p in target.glob("localspec/drafters/suffix/_suffixtree*") if p.suffix != ".c"]  # no .so
    check = (
        "import localspec, localspec.drafters.suffix.tree as t; "
        "from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions; "
        f"assert localspec.__file__.startswith({str(target)!r}), localspec.__file__; "
        "d = SuffixDrafter(SuffixOptions(), None); d.begin([1, 2, 3, 4, 1, 2, 3]); "
        "print(t.implementation(), d.propose([1, 2, 3, 4, 1, 2, 3], 4).tokens)"
    )
    # -S: no .pth files, so not this checkout's editable install; numpy from site-packages, localspec from the wheel
    done = subprocess.run(
        [sys.executable, "-S", "-c", check],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), *DEPENDENCIES])),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("(")[0].strip() == "Python" and "4" in done.stdout


PACKAGE_DATA = [  # what the wheel must carry beside the code, each with its owner
    "localspec/models/models.toml",
    "localspec/bench/workload.jsonl",
    "localspec/bench/quant_reference.json",
    "localspec/backends/llama_cpp/layout.json",
]


@pytest.mark.model
def test_the_built_wheel_runs_in_a_fresh_venv(tmp_path):
    """The wheel as a user installs it: a new venv (its dependencies seen through a .pth, so no download), the
    `localspec` console script, `list` (the models.toml it carries) and one SmolLM2 answer through llama.cpp
    (its weight-layout table). Run outside the checkout, so nothing comes from the sources."""
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert [d for d in PACKAGE_DATA if d not in names] == []
    assert any(n.startswith("localspec/drafters/suffix/_suffixtree") and n.endswith((".so", ".pyd")) for n in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([*PIP, "--python", str(python), "install", "--no-deps", str(wheel)], capture_output=True)
    assert done.returncode == 0, done.stderr[-2000:]
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text("\n".join(DEPENDENCIES) + "\n")  # plain paths: no editable hook
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [str(python), "-c", "import localspec; print(localspec.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr
    listed = subprocess.run(
        [str(venv / "bin" / "localspec"), "list"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "smollm2-135m" in listed.stdout and "qwen2.5-coder-1.5b" in listed.stdout
    answer = subprocess.run(
        # greedy: a sampled answer may end at its 4th token ("stop"), which made this test flaky
        [str(venv / "bin" / "localspec"), "run", "--temperature", "0", "--max-tokens", "4", "--json", "Name a colour."],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert answer.returncode == 0, answer.stderr[-2000:]
    result = json.loads(answer.stdout)
    assert result["model"] == "smollm2-135m" and result["text"].strip()
    assert result["stats"]["generated_tokens"] == 4 and result["finish_reason"] == "length"


def test_memory_figure_without_proc_or_resource(monkeypatch):
    from localspec.apps.tui import panels

    real_open, real_import = builtins.open, builtins.__import__

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc"):
            raise OSError("no /proc here")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert panels.process_memory_mb() > 10  # getrusage's peak (macOS and the BSDs)

    def no_resource(name, *args, **kwargs):
        if name == "resource":
            raise ImportError("no resource module on Windows")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_resource)
    assert panels.process_memory_mb() == 0.0
