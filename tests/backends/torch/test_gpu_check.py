"""benchmarks/gpu_check.py in its tiny CPU mode: it runs with only torch's side of localspec importable
(textual, llama-cpp-python, mlx, gguf and the server stack blocked), writes its JSON and prints its table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[3]
BLOCKED = ("textual", "llama_cpp", "mlx", "gguf", "starlette", "uvicorn", "tokenizers", "rich")
RUNNER = f"""
import runpy, sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("blocked for the GPU check: " + name)
sys.meta_path.insert(0, Blocked())
sys.argv = ["gpu_check.py", *sys.argv[1:]]
runpy.run_path({str(ROOT / "benchmarks" / "gpu_check.py")!r}, run_name="__main__")
"""


def test_the_gpu_check_runs_tiny_on_cpu_with_only_torch(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path), "--tiny", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["shape"] == "tiny" and report["dtype"] == "float32"
    assert set(report["modes"]) == {"eager", "fixed-shape eager"}  # no CUDA: the fixed-shape step uncaptured
    for mode in report["modes"].values():
        plain = mode["plain"]
        assert plain["tok_s"] > 0 and plain["forward_ms_per_step"] > 0 and 0 < mode["bandwidth_share"] < 1
        chain, tree = mode["verify"]["chain_ms"], mode["verify"]["tree_ms"]
        assert set(chain) == set(tree) == {"1", "2", "4", "8", "16"} and all(v > 0 for v in chain.values())
    assert set(report["eagle3"]) == {"chain", "tree8"}
    assert all(f["draft_ms_per_step"] > 0 for f in report["eagle3"].values())
    summary = report["tests"]["summary"]  # test_cuda.py's: it runs where CUDA is, skips where it is not
    assert report["tests"]["ran"] and "failed" not in summary and "error" not in summary
    assert ("passed" if torch.cuda.is_available() else "skipped") in summary, summary
    assert report["capture_s"] is None and report["graphs_note"] == "no CUDA graphs on this device"  # --device cpu
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("device") and lines[-1].startswith("test_cuda")
