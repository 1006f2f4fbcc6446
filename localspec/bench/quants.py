"""Which quantization speculates best on this CPU: measured verify-cost curves, and the advice drawn from them.

On a CPU a verify window of k tokens costs several single steps, and how many depends on the quantization's
kernels: measured on this project's 2-core EPYCs, Q4_0's windows are the cheapest in milliseconds at every k,
Q4_K_M's cost jumps between 6 and 8 tokens (llama.cpp's repacked gemm takes over), Q8_0's curve is flat but
its single step is 30% slower. Speculation lives on long correct drafts, so the quantization with the
cheapest long windows can decode faster than one with a faster single step.

`localspec bench --quants` measures the curve of each quantization of a model (those on disk; others named
on the command line are made for the measurement by requantizing the file on disk into a temporary folder —
their speed is the format's, their quality is not a real file's) and keeps it per CPU in the cache. `pull`
on a machine without GPU offload turns the curves measured here (else the reference figures shipped with
localspec, when they come from a CPU of the same kind) into a line of advice for the model it downloads.

The advice assumes drafts whose tokens are each accepted with probability a, the usual geometric model: a
window of k tokens (the pending token and k - 1 drafts) yields (1 - a^k) / (1 - a) tokens, so a quantization
decodes at max over k of that over the window's cost. It is computed at a = 0.5, 0.7 and 0.9 (prose, mixed,
copying); the verdict is 0.9's, where speculation pays on a CPU, and says which is fastest without drafts.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from localspec.backends.gguf_meta import FTYPES, file_type
from localspec.fileio import atomic_write
from localspec.places import cache_root

WINDOWS = (1, 2, 3, 4, 6, 8, 12, 16)  # tokens per verify window that are timed
ACCEPTANCE = (0.5, 0.7, 0.9)  # per-token acceptance rates the advice is worked out for
HEADLINE = 0.9  # copying, where speculation pays on a CPU: long correct drafts
CONTEXT = 512  # tokens in the cache while windows are timed


@dataclass(frozen=True)
class QuantCurve:
    quant: str  # from the file's general.file_type, never its name
    model: str  # general.name of the file measured
    window_ms: dict[int, float]  # tokens in a verify window -> median milliseconds
    bits_per_weight: float
    requantized: bool = False  # made from another quantization for the measurement (speed only)

    @property
    def step_ms(self) -> float:
        return self.window_ms[1]

    def rate(self, acceptance: float) -> tuple[float, int]:
        """(tokens per second with drafts accepted at ``acceptance`` per token, the window size that gets it)."""
        return max((expected_tokens(k, acceptance) / ms * 1e3, k) for k, ms in self.window_ms.items())

    def ratio(self, k: int) -> float:
        return self.window_ms[k] / self.step_ms


def expected_tokens(k: int, acceptance: float) -> float:
    """Tokens one step yields from a k-token window when each draft is accepted with ``acceptance``."""
    return float(k) if acceptance >= 1 else (1 - acceptance**k) / (1 - acceptance)


def quant_of(path: Path) -> str:
    """The quantization a GGUF file declares (general.file_type), e.g. Q4_K_M."""
    return file_type(path) or "unknown"


# -- measuring ----------------------------------------------------------------------------------------------
def time_windows(path: Path, rounds: int, windows=WINDOWS, threads: int | None = None) -> tuple[dict, float, str]:
    """({window size: [milliseconds per round]}, bits per weight, the model's name): each window timed on a
    CONTEXT-token cache with the kernels a sampled chat runs (llama.cpp's defaults: repacked weights where
    the CPU has a repacked kernel), with logits for every row, as a verify window has them."""
    from localspec.backends.llama_cpp.backend import LlamaCppBackend

    backend = LlamaCppBackend(path, n_ctx=CONTEXT + max(windows) + 16, n_threads=threads, batch_invariant=False)
    try:
        text = "def step(state, x):\n    return state * 31 + x  # a line of code, repeated\n" * 200
        prompt = backend.tokenizer.tokenize(text)[:CONTEXT]
        backend.prefill(prompt)
        backend.forward(prompt[:4])  # warm up: the first window pays for its buffers
        backend.truncate(CONTEXT)
        times: dict[int, list[float]] = {k: [] for k in windows}
        for r in range(rounds):
            for k in windows[r % len(windows) :] + windows[: r % len(windows)]:
                started = time.perf_counter()
                backend.forward(prompt[:k])
                times[k].append((time.perf_counter() - started) * 1e3)
                backend.truncate(CONTEXT)
        bits = 8 * backend.info.size_bytes / backend.info.n_params  # all tensors, every part of a split file
        return times, bits, backend.metadata("general.name") or path.stem
    finally:
        backend.close()


def measure(files: list[tuple[Path, bool]], rounds: int = 6, passes: int = 2, threads=None, say=print) -> list:
    """QuantCurves of GGUF files ((path, requantized) each), timed in ``passes`` passes over all of them,
    the order reversed each pass, so that the machine's drift spreads over every file alike."""
    times: dict[Path, dict[int, list[float]]] = {path: {} for path, _ in files}
    about: dict[Path, tuple[float, str]] = {}
    for p in range(passes):
        for path, _ in files if p % 2 == 0 else files[::-1]:
            say(f"timing {quant_of(path)} ({path.name}), pass {p + 1} of {passes}")
            got, bits, name = time_windows(path, max(1, rounds // passes), threads=threads)
            about[path] = (bits, name)
            for k, ms in got.items():
                times[path].setdefault(k, []).extend(ms)
    return [
        QuantCurve(quant_of(path), about[path][1], {k: statistics.median(v) for k, v in times[path].items()},
                   about[path][0], requantized)
        for path, requantized in files
    ]  # fmt: skip


def check_names(quants: list[str]) -> None:
    """A ConfigError naming any quantization this module cannot make."""
    from localspec.errors import ConfigError

    unknown = [q for q in quants if q not in FTYPES]
    if unknown:
        raise ConfigError(f"--quants: unknown quantization {', '.join(unknown)} (known: {', '.join(FTYPES)})")


def requantize(source: Path, quant: str, out: Path, threads: int | None = None) -> Path:
    """``source`` requantized to ``quant`` at ``out`` (for timing: a requantized file's values are worse
    than the real download's, its kernels the same)."""
    from localspec.backends.llama_cpp.capi import load_lib
    from localspec.errors import ConfigError

    check_names([quant])
    lib = load_lib()
    params = lib.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = FTYPES[quant], True, threads or 0
    if lib.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise ConfigError(f"llama.cpp could not requantize {source} to {quant}")
    return out


# -- what was measured where ----------------------------------------------------------------------------------
def cpu_signature() -> str:
    """The CPU the curves belong to: its model, its widest vector extension and the threads used."""
    from localspec.cpus import default_threads

    name, flags = platform.processor() or platform.machine(), set()
    try:
        fields = [line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line]
    except OSError:
        fields = []
    name = next((value.strip() for key, value in fields if key.strip() == "model name"), name)
    flags = set(next((value.split() for key, value in fields if key.strip() == "flags"), []))
    vector = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else platform.machine()
    return f"{name} | {vector} | {default_threads()} threads"


def cpu_kind(signature: str) -> str:
    """The part of a signature curves carry over between CPUs: the vector extension."""
    return signature.split(" | ")[1] if signature.count(" | ") >= 1 else signature


def store_path() -> Path:
    return cache_root() / "quants" / "measured.json"


def save_measured(curves: list[QuantCurve], signature: str, path: Path | None = None) -> Path:
    """Keep the curves for this CPU (a quantization measured again replaces its older curve)."""
    path = path or store_path()
    kept = [c for c in load_measured(path) if not (c["cpu"] == signature and c["quant"] in {x.quant for x in curves})]
    kept += [{"cpu": signature, "measured": time.strftime("%Y-%m-%d"), **asdict(c)} for c in curves]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(kept, indent=1).encode())
    return path


def load_measured(path: Path | None = None) -> list[dict]:
    """The records kept; a damaged file or record is left out (the next bench --quants measures again)."""
    try:
        data = json.loads((path or store_path()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in data if _readable(r)] if isinstance(data, list) else []


def _readable(record) -> bool:
    try:
        return isinstance(record.get("cpu"), str) and curve_from(record).step_ms > 0
    except (AttributeError, KeyError, TypeError, ValueError):
        return False


def reference() -> dict:
    """The figures measured on this project's machines (localspec/bench/quant_reference.json)."""
    return json.loads((resources.files("localspec.bench") / "quant_reference.json").read_text(encoding="utf-8"))


def curve_from(record: dict) -> QuantCurve:
    return QuantCurve(
        record["quant"],
        record["model"],
        {int(k): float(v) for k, v in record["window_ms"].items()},
        float(record["bits_per_weight"]),
        bool(record.get("requantized")),
    )


# -- advice -------------------------------------------------------------------------------------------------
def advise(curves: list[QuantCurve]) -> list[str]:
    """A table of the curves and, last, which quantization decodes fastest with speculation and why."""
    if not curves:
        return []
    lines = [f"{'quant':<8}{'bits/w':>7}{'step ms':>9}" + "".join(f"{f'{k}-tok':>8}" for k in (4, 8, 16))
             + "".join(f"{f'tok/s a={a}':>16}" for a in ACCEPTANCE)]  # fmt: skip
    for c in curves:
        ratios = "".join(f"{f'{c.ratio(k):.2f}x':>8}" if k in c.window_ms else f"{'-':>8}" for k in (4, 8, 16))
        rates = "".join(f"{f'{c.rate(a)[0]:.1f} (k={c.rate(a)[1]})':>16}" for a in ACCEPTANCE)
        mark = "  (requantized for timing)" if c.requantized else ""
        lines.append(f"{c.quant:<8}{c.bits_per_weight:>7.2f}{c.step_ms:>9.1f}{ratios}{rates}{mark}")
    lines.append(verdict(curves))
    return lines


def verdict(curves: list[QuantCurve], acceptance: float = HEADLINE) -> str:
    """Which quantization speculates best at ``acceptance``, with the figures that say why, and what it
    gives up: plain decoding's speed where another is faster without drafts, and bits per weight."""
    ranked = sorted(curves, key=lambda c: -c.rate(acceptance)[0])
    best = ranked[0]

    def how(c: QuantCurve) -> str:
        rate, k = c.rate(acceptance)
        return f"{rate:.1f} tok/s ({k}-token windows at {c.ratio(k):.2f}x its {c.step_ms:.1f} ms step)"

    text = f"{best.quant} speculates best here: {how(best)} when drafts are right {acceptance:.0%} of the time"
    if len(ranked) > 1:
        text += f", {ranked[1].quant} {how(ranked[1])}"
    fastest = min(curves, key=lambda c: c.step_ms)
    if fastest is not best:
        text += (
            f"; without drafts {fastest.quant} is faster ({1e3 / fastest.step_ms:.1f} tok/s against "
            f"{1e3 / best.step_ms:.1f})"
        )
    bits = ", ".join(f"{c.quant} {c.bits_per_weight:.2f}" for c in sorted(curves, key=lambda c: c.bits_per_weight))
    return text + f". Bits per weight (more keep more of the model): {bits}."


def pull_advice(quants: list[str], asked: str, name: str) -> list[str]:
    """The advice `pull` gives on a CPU-only machine for a model offered in ``quants`` (``asked`` is the
    one being downloaded): from this CPU's measurements, else the reference figures of a CPU of its kind;
    nothing where neither covers two of the model's quantizations."""
    signature = cpu_signature()
    curves = [curve_from(r) for r in load_measured() if r.get("cpu") == signature and r.get("quant") in quants]
    source = "measured on this CPU by `localspec bench --quants`"
    if len({c.quant for c in curves}) < 2:
        ref = reference()
        same_kind = cpu_kind(ref["cpu"]) == cpu_kind(signature)
        curves = [curve_from(r) for r in ref["curves"] if r["quant"] in quants] if same_kind else []
        source = (
            f"measured on {ref['cpu'].split(' | ')[0]} ({cpu_kind(ref['cpu'])}) with {ref['model']}; "
            "`localspec bench --quants` measures this CPU"
        )
    curves = list({c.quant: c for c in curves}.values())
    if len(curves) < 2:
        return []
    best = max(curves, key=lambda c: c.rate(HEADLINE)[0])
    lines = [f"{name}: on this CPU (no GPU offload) {verdict(curves)} [{source}]"]
    if best.quant != asked:
        lines.append(f"{name}: `localspec pull {name} --quant {best.quant}` gets it (this pull gets {asked})")
    return lines


def model_files(spec: str | None) -> list[Path]:
    """The GGUF files of ``spec`` on disk: every quantization of a models.toml name that is downloaded (or in
    another app's files), or the one file a path names."""
    from localspec.errors import LocalspecError
    from localspec.models.app_stores import Stores
    from localspec.models.registry import gguf_on_disk, load_registry, model_entry, resolve_model

    registry = load_registry()
    entry = model_entry(spec, registry)
    found = []
    if entry is not None and entry.gguf_repo:
        stores = Stores()
        on_disk = [gguf_on_disk(entry, quant, stores) for quant in entry.gguf_files]
        found += [hit[0] for hit in on_disk if hit]
    with contextlib.suppress(LocalspecError):  # its default quantization is not downloaded: the others still count
        found.append(resolve_model(spec, registry)[1])
    return list(dict.fromkeys(Path(p).resolve() for p in found if Path(p).is_file()))
