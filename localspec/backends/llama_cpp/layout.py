"""Which weight layout llama.cpp loads on the CPU: repacked, as llama.cpp does by default, or as in the file.

llama.cpp repacks Q4_0/Q4_K/IQ4_NL weights at load for its fastest gemm kernels; weights left as in the file
run other kernels (vec_dot, llamafile's sgemm), which prefill some quantizations faster (Qwen2.5-Coder-1.5B
Q4_K_M on an AVX-512 Xeon: 0.66x the repacked prefill time) and, with ggml's reference mode, can compute a
verify window bit for bit as 1-token steps (`--exact`). benchmarks/kernel_costs.py times both layouts per
quantization over a whole turn (prefill, plain decoding, speculation) and writes its verdict per CPU kind into
layout.json beside this file: a quantization is loaded unrepacked by default only where that table says
it wins every turn on this kind of CPU. `--exact` always loads unrepacked weights.
"""

from __future__ import annotations

import json
import platform
from functools import cache
from pathlib import Path

TABLE = Path(__file__).with_name("layout.json")


def cpu_kind(cpuinfo: str | None = None) -> str:
    """The widest vector extension of this CPU (avx512, avx2), else the machine name: what the measured
    layouts carry over between CPUs."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else platform.machine()


@cache
def _table() -> dict:
    try:
        table = json.loads(TABLE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return table.get("layout", {}) if isinstance(table, dict) else {}


def repack(quant: str | None, exact: bool, kind: str | None = None, table: dict | None = None) -> tuple[bool, str]:
    """(whether to repack the weights, why not, for the load report). ``quant``: the file's quantization
    (general.file_type), ``kind``: the CPU kind (default: this one's)."""
    if exact:
        return False, ""
    table = _table() if table is None else table
    kind = kind or cpu_kind()
    row = table.get(kind, {}).get(quant or "", {})
    if isinstance(row, dict) and row.get("layout") == "unrepacked":
        return False, f"weights unrepacked: faster for {quant} on {kind} CPUs (benchmarks/kernel_costs.py)"
    return True, ""


def prefill_unrepacked(quant: str | None, kind: str | None = None, table: dict | None = None) -> bool:
    """Whether prompts of ``quant`` prefill faster on unrepacked weights on this CPU kind (its row's ``prefill``
    verdict; unrepacked_prefill.py), where the weights are repacked for decoding."""
    table = _table() if table is None else table
    row = table.get(kind or cpu_kind(), {}).get(quant or "", {})
    return isinstance(row, dict) and row.get("prefill") == "unrepacked"
