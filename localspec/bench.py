"""`localspec bench`: which drafter pays on this machine, for this kind of work?

Runs a workload (the small built-in one, or a JSONL file in the ../shared/bench format) with every method
in one process, the method order rotated per case so drift spreads evenly, and prints one table per case
kind: decode tok/s, ratio to plain, acceptance, tau, and the share of decode time spent drafting and
verifying. A method is a drafter name, optionally with a fixed K: `suffix@4`; without it the adaptive
controller picks K (--draft-tokens, default auto). Each method keeps its drafter and controller across the
cases, as a chat session would.
"""
from __future__ import annotations

import importlib
import inspect
import json
import platform
import re
import time
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

from localspec.chat import Conversation
from localspec.drafters import check_drafter_name, make_drafter
from localspec.engine import stream_generate
from localspec.errors import ConfigError
from localspec.session import Session
from localspec.speclen import make_policy

BUILTIN_WORKLOAD = resources.files("localspec") / "bench_workload.jsonl"


@dataclass
class Method:
    label: str
    drafter: object
    policy: object


def load_cases(path: Optional[str] = None) -> list[dict]:
    """Cases of a workload file; `source` (module:qualname) pastes that object's source over {source}."""
    where = path or "the built-in workload"
    try:
        text = Path(path).read_text(encoding="utf-8") if path else BUILTIN_WORKLOAD.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--prompts {path}: {exc.strerror}") from exc
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
            messages = case["messages"]
            if not (isinstance(case["id"], str) and isinstance(case["kind"], str) and isinstance(messages, list)):
                raise TypeError("id and kind must be strings, messages a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{where}, line {number}: not a workload case (needs id, kind, messages): "
                              f"{exc}") from exc
        if case.get("source"):
            source = _source_of(case["source"], where, number)
            for m in messages:
                m["content"] = m["content"].replace("{source}", source)
        case.setdefault("max_tokens", 256)
        cases.append(case)
    if not cases:
        raise ConfigError(f"{where} has no cases")
    return cases


def _source_of(spec: str, where: str, number: int) -> str:
    module, _, qualname = spec.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return inspect.getsource(obj)
    except (ImportError, AttributeError, OSError, TypeError) as exc:
        raise ConfigError(f"{where}, line {number}: source {spec!r} not found ({exc})") from exc


def make_methods(spec: str, session: Session, default_k) -> list[Method]:
    methods = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        match = re.fullmatch(r"([a-z]+)(?:@([a-z0-9:]+))?(?:#(\d+))?(?:@([a-z0-9:]+))?", item)
        if not match or (match.group(2) and match.group(4)):
            raise ConfigError(f"--drafters {item!r}: expected NAME, NAME@K or eagle#N (trees of N tokens)")
        name, k, tree = match.group(1), match.group(2) or match.group(4), match.group(3)
        check_drafter_name(name)
        options = session.drafter_options
        if tree:
            if name != "eagle":
                raise ConfigError(f"--drafters {item!r}: #N (tree size) goes with eagle, e.g. eagle#16")
            options = replace(options, eagle_tree=int(tree))
        drafter = make_drafter(name, session.backend, options)
        methods.append(Method(item, drafter, make_policy(k or (1 if name == "none" else default_k))))
    if not methods:
        raise ConfigError("--drafters lists no method")
    if "none" not in [m.label for m in methods]:
        methods.insert(0, Method("none", make_drafter("none"), make_policy(1)))  # plain: the baseline
    return methods


def run_bench(session: Session, methods: list[Method], cases: list[dict], seed: int = 0,
              progress=print, repeats: int = 1) -> dict:
    """Every method on every case, `repeats` times over (noisy machines: per-kind figures then pool the
    repeats), the method order rotated per case and per repeat."""
    rows = []
    for i, case in ((r * len(cases) + j, c) for r in range(repeats) for j, c in enumerate(cases)):
        conv = Conversation()
        conv.messages = [dict(m) for m in case["messages"]]
        prompt = conv.prompt_tokens(session.backend, reserve=case["max_tokens"])
        order = methods[i % len(methods):] + methods[:i % len(methods)]
        row = {"id": case["id"], "kind": case["kind"], "repeat": i // len(cases), "prompt_tokens": len(prompt),
               "methods": {}}
        outputs = {}
        for method in order:
            session.backend.truncate(0)  # every method prefills the whole prompt, as a new chat does
            tokens, stats = [], None
            for event in stream_generate(session.backend, method.drafter, prompt, session.sampling,
                                         max_tokens=case["max_tokens"], draft_tokens=method.policy,
                                         rng=np.random.default_rng(seed + i % len(cases))):
                tokens.extend(event.tokens)
                stats = event.stats
            outputs[method.label] = tokens
            row["methods"][method.label] = _figures(stats)
        plain = row["methods"]["none"]["decode_tok_s"]
        for label, m in row["methods"].items():
            m["ratio_to_plain"] = round(m["decode_tok_s"] / plain, 3) if plain and m["decode_tok_s"] else None
            m["same_as_plain"] = outputs[label] == outputs["none"]
        rows.append(row)
        progress(f"{case['id']:<18} " + "  ".join(f"{label} {m['decode_tok_s']:.1f} tok/s ({m['ratio_to_plain']}x)"
                                                  for label, m in row["methods"].items()))
    return {"model": session.model_name, "backend": session.backend.name,
            "machine": platform.processor() or platform.machine(),
            "threads": getattr(session.backend, "n_threads", None), "date": time.strftime("%Y-%m-%d"),
            "sampling": asdict(session.sampling),
            "methods": [m.label for m in methods],
            "timing": "decode = tokens / time of the generate loop after prefill (draft, verify and overhead)",
            "by_kind": summarize(rows, [m.label for m in methods]), "cases": rows}


def _figures(stats) -> dict:
    d = stats.to_dict()
    decode = stats.decode_s or 1e-9
    return {"tokens": stats.generated, "decode_s": d["decode_s"], "decode_tok_s": d["decode_tok_s"],
            "prefill_tok_s": d["prefill_tok_s"], "acceptance_rate": d["acceptance_rate"],
            "tau": d["mean_accepted_length"], "draft_share": round(stats.draft_s / decode, 3),
            "verify_share": round(stats.verify_s / decode, 3), "speclen": d["speclen"],
            "acceptance_rules": d["acceptance_rules"], "drafter": d["drafter"]}


def summarize(rows: list[dict], labels: list[str]) -> dict:
    kinds: dict = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row)
    out = {}
    for kind, group in kinds.items():
        out[kind] = {}
        for label in labels:
            ms = [r["methods"][label] for r in group]
            tokens, seconds = sum(m["tokens"] for m in ms), sum(m["decode_s"] for m in ms)
            ratios = [m["ratio_to_plain"] for m in ms if m["ratio_to_plain"]]
            rates = [m["acceptance_rate"] for m in ms if m["acceptance_rate"] is not None]
            out[kind][label] = {
                "decode_tok_s": round(tokens / seconds, 2) if seconds else None,
                "ratio_to_plain": round(sum(ratios) / len(ratios), 3) if ratios else None,
                "acceptance_rate": round(sum(rates) / len(rates), 3) if rates else None,
                "tau": round(sum(m["tau"] for m in ms) / len(ms), 3),
                "draft_share": round(sum(m["draft_share"] for m in ms) / len(ms), 3),
                "verify_share": round(sum(m["verify_share"] for m in ms) / len(ms), 3),
                "all_same_as_plain": all(m["same_as_plain"] for m in ms),
            }
    return out


def format_tables(report: dict) -> str:
    lines = [f"{report['model']} · {report['backend']} · {report['machine']} · {report['date']}"]
    header = f"  {'method':<12}{'tok/s':>8}{'x plain':>9}{'accept':>8}{'tau':>6}{'draft':>7}{'verify':>8}"
    for kind, methods in report["by_kind"].items():
        lines += ["", kind, header]
        for label, m in methods.items():
            accept = "-" if m["acceptance_rate"] is None else f"{m['acceptance_rate']:.0%}"
            lines.append(f"  {label:<12}{m['decode_tok_s'] or 0:>8.1f}{m['ratio_to_plain'] or 0:>9.2f}{accept:>8}"
                         f"{m['tau']:>6.2f}{m['draft_share']:>7.0%}{m['verify_share']:>8.0%}")
    return "\n".join(lines)


def plot(report: dict, out: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'localspec[plot]'") from None
    kinds = list(report["by_kind"])
    labels = [m for m in report["methods"] if m != "none"]
    width = 0.8 / max(1, len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(kinds)), 4))
    for j, label in enumerate(labels):
        values = [report["by_kind"][k][label]["ratio_to_plain"] or 0 for k in kinds]
        ax.bar([i + j * width for i in range(len(kinds))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(kinds))], kinds)
    ax.set_ylabel("decode tok/s / plain")
    ax.set_title(f"{report['model']} on {report['machine']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
