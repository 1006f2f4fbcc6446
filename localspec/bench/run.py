"""`localspec bench`: which drafter pays on this machine, for this kind of work?

Runs a workload (the small built-in one, or a JSONL file in the ../shared/bench format) with every method
in one process, the method order rotated per case so drift spreads evenly, and prints one table per case
kind: decode tok/s, ratio to plain, acceptance, tau, and the share of decode time spent drafting and
verifying. A method is a drafter name, optionally with a fixed K: `suffix@4`; without it the adaptive
controller picks K (--draft-tokens, default auto). With `--peer llama-server`, llama.cpp's own server is
measured on the same prompts (token ids) in the same run: methods `server:plain`, `server:ngram-mod`, ...

Figures are cold: every repeat starts with fresh drafters and controllers, an empty suffix cache and freshly
started servers, so no case ever meets its own earlier answer. Within a repeat each method keeps its state
across the cases, as a chat session would (later cases see earlier cases' answers).
"""

from __future__ import annotations

import importlib
import inspect
import json
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path

from localspec.backends.gguf_meta import mtp_layers
from localspec.bench.peer import SPEC_TYPES, ServerConfig, find_llama_server, running
from localspec.bench.runners import Runner, draft_model_path, keep_costs, make_runner, run_runner
from localspec.errors import ConfigError, LocalspecError
from localspec.models.app_stores import is_gguf
from localspec.session import Session
from localspec.types import common_prefix

BUILTIN_WORKLOAD = resources.files("localspec.bench") / "workload.jsonl"
SERVER = "server:"  # prefix of the peer's methods
NOTES = [
    "cold: each repeat starts with fresh drafters and controllers, an empty suffix cache and freshly started "
    "llama-servers (one per type, up for the repeat); later cases in a repeat see earlier cases' answers "
    "(localspec's suffix tree, the server's ngram-mod pool), never their own",
    "ratio_to_plain: decode tok/s over that system's own plain (none for localspec, server:plain for "
    "llama-server); ratio_to_plain_total: the same with prefill counted (tokens / (prefill + decode))",
    "localspec: prefill = the prompt but its last token; the first decode step feeds that token, so "
    "ttft = prefill + first step. llama-server: prefill = prompt_ms (all prompt tokens, the first output "
    "token included) = ttft; decode = predicted_ms and predicted_per_second (tokens after the first)",
    "speedup_in_session: the figure the chat shows, a method's decode tok/s over its own plain (K = 0) steps "
    "near the same context length in this repeat (capped at tau * 1.05; null before 16 such steps)",
    "per_case: medians over repeats; by_kind ratios: means over the kind's cases of those medians",
    "bound: best speedup localspec's own measured verify curve allows, max over n of n * verify_ms[1] / "
    "verify_ms[n] (the suffix method's controller, over the window sizes it measured); fraction_of_bound = "
    "median ratio / bound",
]


def load_cases(path: str | None = None) -> list[dict]:
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
            raise ConfigError(f"{where}, line {number}: not a workload case (needs id, kind, messages): {exc}") from exc
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


def make_methods(spec: str, session: Session, default_k, scratch: str | None = None) -> list[Runner]:
    """Fresh drafters and controllers for the methods of `spec`; with `scratch`, every method's suffix
    cache lives in its own empty folder under it."""
    methods: list[Runner] = []
    try:
        for j, item in enumerate([s.strip() for s in spec.split(",") if s.strip()]):
            methods.append(_make_method(item, session, default_k, scratch and Path(scratch) / f"method-{j}"))
        if not methods:
            raise ConfigError("--drafters lists no method")
        if "none" not in [m.label for m in methods]:
            methods.insert(0, make_runner(session, "none", "none", 1))  # plain: the baseline
    except BaseException:
        for method in methods:  # e.g. a draft model already loaded for an earlier method
            method.drafter.close()
        raise
    return methods


def _parse(item: str) -> re.Match:
    match = re.fullmatch(
        r"([a-z]+(?:\+(?!exact\b)[a-z]+)?)(?:@([a-z0-9:]+))?(?:#(\d+))?(?:@([a-z0-9:]+))?(\+exact)?", item
    )
    if not match or (match.group(2) and match.group(4)):
        raise ConfigError(
            f"--drafters {item!r}: expected NAME, NAME@K or NAME#N (trees of N tokens: eagle#16), optionally +exact"
        )
    return match


def parse_method(item: str, default_k="auto") -> tuple[str, str, int | str]:
    """A method of `--drafters` without trees or +exact (bench --concurrency): (label, drafter name, K)."""
    match = _parse(item.strip())
    if match.group(3) or match.group(5):
        raise ConfigError(f"--drafters {item!r}: --concurrency runs drafters as slots do, without #N trees or +exact")
    name = match.group(1)
    return item.strip(), name, match.group(2) or match.group(4) or (1 if name == "none" else default_k)


def _make_method(item: str, session: Session, default_k, cache_dir: Path | None) -> Runner:
    match = _parse(item)
    name, k, tree = match.group(1), match.group(2) or match.group(4), match.group(3)
    options, members = {}, name.split("+")
    if cache_dir and "suffix" in members:
        options["cache_dir"] = str(cache_dir)
    if tree:
        trees = session.drafters.tree_drafters()
        if not set(members) & set(trees):
            raise ConfigError(
                f"--drafters {item!r}: #N (tree size) goes with a drafter that drafts trees ({', '.join(trees)})"
            )
        options["tree"] = int(tree)
    # LOCALSPEC_NO_COST_CACHE=1 benchmarks the very first start (no measured cost curve)
    k = k or (1 if name == "none" else default_k)
    return make_runner(session, item, name, k, exact=bool(match.group(5)) or session.exact.on, **options)


def old_spellings(spec: str) -> tuple[str, list[str]]:
    """`--drafters` with NAME+noguard read as NAME (the fast default now), and a notice if there was one."""
    if "+noguard" not in spec:
        return spec, []
    return spec.replace("+noguard", ""), ["NAME+noguard is the default now (NAME); NAME+exact runs with --exact"]


def parse_peer_types(spec: str) -> list[str]:
    """`--peer-types`: llama-server speculation types; `plain` (the server's baseline) always comes first."""
    types = [t.strip() for t in spec.split(",") if t.strip()]
    for t in types:
        if t not in SPEC_TYPES:
            raise ConfigError(f"--peer-types {t!r}: choose from {', '.join(SPEC_TYPES)}")
    return ["plain"] + [t for t in dict.fromkeys(types) if t != "plain"]


def peer_binary(spec: str) -> Path:
    """`--peer llama-server[=PATH]` -> the binary (checked before the model loads)."""
    name, _, path = spec.partition("=")
    if name != "llama-server":
        raise ConfigError(f"--peer {spec}: the peer is llama.cpp's server: --peer llama-server[=PATH]")
    return find_llama_server(path or None)


def peer_config(
    binary: Path, session: Session, types: list[str], gpu_layers: int = 0
) -> tuple[ServerConfig, list[str], list[str]]:
    """The server settings mirroring the session (model, context, threads, batch), the types that can run,
    and notes on those that cannot."""
    backend = session.backend
    model = Path(backend.path or "")
    if not is_gguf(model):
        raise ConfigError(
            f"--peer llama-server needs a GGUF model on the llama.cpp backend; the {backend.name} "
            f"backend holds {model or session.model_name} (use --backend llama.cpp)"
        )
    draft, notes = None, []
    with_draft = [t for t in types if t in ("draft-simple", "ngram-mod+draft-simple")]
    if with_draft:
        draft, why = _peer_draft(session)
        if draft is None:
            types = [t for t in types if t not in with_draft]
            notes += [f"server:{t} skipped: {why}" for t in with_draft]
    if "draft-mtp" in types and not mtp_layers(model):
        types = [t for t in types if t != "draft-mtp"]
        notes.append(f"server:draft-mtp skipped: {model.name} carries no MTP layers")
    head = None
    if "draft-eagle3" in types:
        head = session.drafters.options_of("eagle").head
        if not head or Path(head).suffix != ".gguf":
            types = [t for t in types if t != "draft-eagle3"]
            notes.append("server:draft-eagle3 skipped: it needs --eagle-head HEAD.gguf (an eagle3 GGUF)")
    config = ServerConfig(
        binary,
        model,
        n_ctx=backend.n_ctx,
        threads=backend.n_threads or 1,
        n_batch=backend.n_batch,
        gpu_layers=gpu_layers,
        draft_model=draft,
        eagle_head=Path(head) if head and "draft-eagle3" in types else None,
    )
    return config, types, notes


def _peer_draft(session: Session) -> tuple[Path | None, str]:
    """The draft model the draft drafter would load (--draft-model, else the model's first recommended
    draft), as a GGUF file."""
    try:
        found = draft_model_path(session)
    except LocalspecError as exc:
        return None, f"the model's draft is not available ({exc})"
    if found is None:
        return None, "no draft model (pass --draft-model; models.toml lists none for this model)"
    path = Path(found)
    if not is_gguf(path):
        return None, f"the draft model {path} is not a GGUF file"
    return path, ""


def plain_of(label: str) -> str:
    """The baseline a method is compared with: that system's own plain decoding."""
    return SERVER + "plain" if label.startswith(SERVER) else "none"


def run_bench(
    session: Session,
    spec: str,
    cases: list[dict],
    *,
    default_k="auto",
    peer: ServerConfig | None = None,
    peer_types: Sequence[str] = ("plain",),
    seed: int = 0,
    progress=print,
    repeats: int = 1,
    notes: Sequence[str] = (),
) -> dict:
    """Every method (and peer type) on every case, `repeats` times over, the order rotated per case and per
    repeat; each repeat starts cold (see the module doc)."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="localspec-bench-") as scratch:
        for r in range(repeats):
            rows += _run_repeat(
                session,
                spec,
                default_k,
                cases,
                r,
                Path(scratch) / f"repeat-{r}",
                peer,
                peer_types if peer else (),
                seed,
                progress,
            )
    labels = list(rows[0]["methods"]) if rows else []
    labels = [m for m in labels if not m.startswith(SERVER)] + [m for m in labels if m.startswith(SERVER)]
    per_case = summarize_cases(rows, labels)
    report = {
        "model": session.model_name,
        "backend": session.backend.name,
        "machine": platform.processor() or platform.machine(),
        "threads": session.backend.n_threads,
        "ctx": session.backend.n_ctx,
        "date": time.strftime("%Y-%m-%d"),
        "sampling": asdict(session.sampling),
        "repeats": repeats,
        "methods": labels,
        "notes": NOTES + list(notes),
        "timing": "localspec decode = tokens / time of the generate loop after prefill (draft, verify and "
        "overhead); llama-server decode = its predicted_per_second (see notes)",
        "by_kind": summarize(rows, per_case, labels),
        "per_case": per_case,
        "cases": rows,
    }
    if peer:
        report["peer"] = {
            "binary": str(peer.binary),
            "types": list(peer_types),
            "draft_model": str(peer.draft_model) if peer.draft_model else None,
            "eagle_head": str(peer.eagle_head) if peer.eagle_head else None,
            "argv": {t: peer.server(t, Path("log")).argv(0) for t in peer_types},
        }
    return report


def _run_repeat(session, spec, default_k, cases, r, scratch: Path, peer, peer_types, seed, progress) -> list[dict]:
    methods = make_methods(spec, session, default_k, scratch=str(scratch))
    rows = []
    try:
        with running(peer, peer_types, scratch) as servers:
            runners: list[tuple[str, Callable]] = [(m.label, _localspec_runner(session, m)) for m in methods]
            runners += [(SERVER + t, _server_runner(server, session.sampling)) for t, server in servers.items()]
            for j, case in enumerate(cases):
                i = r * len(cases) + j
                prompt = session.text.prompt_tokens(case["messages"], reserve=case["max_tokens"])
                order = runners[i % len(runners) :] + runners[: i % len(runners)]
                row = {
                    "id": case["id"],
                    "kind": case["kind"],
                    "repeat": r,
                    "prompt_tokens": len(prompt),
                    "order": [label for label, _ in order],
                    "methods": {},
                }
                rng_seed = seed + i  # each case and repeat its own draws (the same for every system)
                for label, run in order:
                    row["methods"][label] = run(prompt, case["max_tokens"], rng_seed)
                row["methods"] = {label: row["methods"][label] for label, _ in runners}  # a stable order
                _compare(row)
                row["bound"] = verify_bound(row)
                rows.append(row)
                progress(
                    f"{case['id']:<18} r{r} "
                    + "  ".join(
                        f"{label} {m['decode_tok_s']:.1f} tok/s ({m['ratio_to_plain']}x)"
                        for label, m in row["methods"].items()
                    )
                )
    finally:
        for method in methods:
            method.drafter.close()
        keep_costs(session, methods)
    return rows


def _localspec_runner(session: Session, method: Runner) -> Callable:
    def run(prompt, max_tokens, rng_seed) -> dict:
        tokens, stats, first_step = [], None, None
        for event in run_runner(session, method, prompt, max_tokens, rng_seed):
            tokens.extend(event.tokens)
            stats = event.stats
            if first_step is None:
                first_step = stats.decode_s  # the step that emitted the first token
        return _figures(stats, first_step or 0.0, tokens)

    return run


def _server_runner(server, sampling) -> Callable:
    """The server answers with the session's sampling settings and each case's seed, as localspec's methods."""

    def run(prompt, max_tokens, rng_seed) -> dict:
        return _server_figures(server.complete(prompt, max_tokens, sampling, rng_seed))

    return run


def _figures(stats, first_step_s: float, tokens: list[int]) -> dict:
    d = stats.to_dict()
    decode = stats.decode_s or 1e-9
    return {
        "tokens": stats.generated,
        "prefill_s": d["prefill_s"],
        "ttft_s": round(stats.prefill_s + first_step_s, 4),
        "decode_s": d["decode_s"],
        "decode_tok_s": d["decode_tok_s"],
        "total_s": round(stats.prefill_s + stats.decode_s, 4),
        "prefill_tok_s": d["prefill_tok_s"],
        "acceptance_rate": d["acceptance_rate"],
        "tau": d["mean_accepted_length"],
        "draft_share": round(stats.draft_s / decode, 3),
        "verify_share": round(stats.verify_s / decode, 3),
        "speclen": d["speclen"],
        "acceptance_rules": d["acceptance_rules"],
        "drafter": d["drafter"],
        "speedup_in_session": d["speedup"],
        "plain_in_session": d["plain"],
        "exact_guard": d["exact_guard"],
        "output_ids": list(tokens),
    }


def _server_figures(reply) -> dict:
    t = reply.timings
    prefill, decode = t.get("prompt_ms", 0) / 1e3, t.get("predicted_ms", 0) / 1e3
    drafted, accepted = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
    return {
        "tokens": t.get("predicted_n", len(reply.tokens)),
        "prefill_s": round(prefill, 4),
        "ttft_s": round(prefill, 4),
        "decode_s": round(decode, 4),
        "decode_tok_s": round(t.get("predicted_per_second", 0.0), 2),
        "total_s": round(prefill + decode, 4),
        "prefill_tok_s": round(t.get("prompt_per_second", 0.0), 2),
        "prompt_n": t.get("prompt_n"),
        "draft_n": drafted,
        "draft_n_accepted": accepted,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "tau": None,
        "draft_share": None,
        "verify_share": None,
        "timings": dict(t),
        "output_ids": list(reply.tokens),
    }


def _ratio(a, b) -> float | None:
    return round(a / b, 3) if a and b else None


def _compare(row: dict) -> None:
    """Ratios and sameness of every method against its own system's plain; agreement with localspec's."""
    ms = row["methods"]
    reference = ms["none"]["output_ids"]
    for label, m in ms.items():
        base = ms.get(plain_of(label))
        m["plain"] = plain_of(label)
        m["ratio_to_plain"] = _ratio(m["decode_tok_s"], base["decode_tok_s"]) if base else None
        m["ratio_to_plain_total"] = (
            _ratio(m["tokens"] / m["total_s"], base["tokens"] / base["total_s"])
            if base and m["total_s"] and base["total_s"]
            else None
        )
        m["same_as_plain"] = bool(base) and m["output_ids"] == base["output_ids"]
        m["prefix_same_as_none"] = common_prefix(m["output_ids"], reference)  # tokens equal to localspec plain's


def verify_bound(row: dict) -> dict | None:
    """The best speedup localspec's measured verify curve allows: max over n of n * verify_ms[1] / verify_ms[n]
    (all n tokens accepted at window n, against one token per single step). The suffix method's curve, else
    the first method's that has one."""
    candidates = sorted(row["methods"], key=lambda label: (not label.startswith("suffix"), label.startswith(SERVER)))
    for label in candidates:
        curve = {int(n): ms for n, ms in ((row["methods"][label].get("speclen") or {}).get("verify_ms") or {}).items()}
        if curve.get(1) and len(curve) > 1:
            n, value = max(((n, n * curve[1] / ms) for n, ms in curve.items() if ms), key=lambda x: x[1])
            return {"speedup": round(value, 3), "window": n, "from": label, "verify_ms": curve}
    return None


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 3) if values else None


def summarize_cases(rows: list[dict], labels: list[str]) -> dict:
    """Per case, over its repeats: median ratios per method, the verify bound and each ratio's share of it."""
    out: dict = {}
    for row in rows:
        out.setdefault(row["id"], {"kind": row["kind"], "rows": []})["rows"].append(row)
    for case in out.values():
        group = case.pop("rows")
        bound = _median((r["bound"] or {}).get("speedup") for r in group)
        case["repeats"] = len(group)
        case["bound"] = bound
        case["median_ratio"] = {m: _median(r["methods"][m]["ratio_to_plain"] for r in group) for m in labels}
        case["median_ratio_total"] = {
            m: _median(r["methods"][m]["ratio_to_plain_total"] for r in group) for m in labels
        }
        case["median_speedup_in_session"] = {
            m: _median(r["methods"][m].get("speedup_in_session") for r in group) for m in labels
        }
        case["median_ttft_s"] = {m: _median(r["methods"][m]["ttft_s"] for r in group) for m in labels}
        case["fraction_of_bound"] = {
            m: round(v / bound, 3) if v and bound else None for m, v in case["median_ratio"].items()
        }
        case["all_same_as_plain"] = {m: all(r["methods"][m]["same_as_plain"] for r in group) for m in labels}
    return out


def summarize(rows: list[dict], per_case: dict, labels: list[str]) -> dict:
    """Per kind: pooled tok/s, and ratios as the mean over the kind's cases of each case's median."""
    out: dict = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        group = [r for r in rows if r["kind"] == kind]
        cases = [c for c in per_case.values() if c["kind"] == kind]
        out[kind] = {}
        for label in labels:
            ms = [r["methods"][label] for r in group]
            tokens, seconds = sum(m["tokens"] for m in ms), sum(m["decode_s"] for m in ms)
            out[kind][label] = {
                "decode_tok_s": round(tokens / seconds, 2) if seconds else None,
                "ratio_to_plain": _mean(c["median_ratio"][label] for c in cases),
                "ratio_to_plain_total": _mean(c["median_ratio_total"][label] for c in cases),
                "fraction_of_bound": _mean(c["fraction_of_bound"][label] for c in cases),
                "ttft_s": _median(m["ttft_s"] for m in ms),
                "acceptance_rate": _mean(m["acceptance_rate"] for m in ms),
                "tau": _mean(m["tau"] for m in ms),
                "draft_share": _mean(m["draft_share"] for m in ms),
                "verify_share": _mean(m["verify_share"] for m in ms),
                "all_same_as_plain": all(m["same_as_plain"] for m in ms),
            }
    return out


def _cell(value, fmt: str, width: int) -> str:
    return f"{'-' if value is None else format(value, fmt):>{width}}"


def format_tables(report: dict) -> str:
    lines = [f"{report['model']} · {report['backend']} · {report['machine']} · {report['date']}"]
    w = max([12] + [len(m) + 2 for m in report["methods"]])
    header = (
        f"  {'method':<{w}}{'tok/s':>8}{'x plain':>9}{'x total':>9}{'ttft ms':>9}{'accept':>8}{'tau':>6}"
        f"{'draft':>7}{'verify':>8}"
    )
    for kind, methods in report["by_kind"].items():
        lines += ["", kind, header]
        for label, m in methods.items():
            ttft = None if m["ttft_s"] is None else m["ttft_s"] * 1e3
            lines.append(
                f"  {label:<{w}}{_cell(m['decode_tok_s'], '.1f', 8)}{_cell(m['ratio_to_plain'], '.2f', 9)}"
                f"{_cell(m['ratio_to_plain_total'], '.2f', 9)}{_cell(ttft, '.0f', 9)}"
                f"{_cell(m['acceptance_rate'], '.0%', 8)}{_cell(m['tau'], '.2f', 6)}"
                f"{_cell(m['draft_share'], '.0%', 7)}{_cell(m['verify_share'], '.0%', 8)}"
            )
    lines += [
        "",
        f"median ratio to own plain per case over {report.get('repeats', 1)} repeat(s) "
        f"(bound: localspec's verify curve)",
    ]
    ours = [m for m in report["methods"] if not m.startswith(SERVER) and m != "none"]
    peers = [m for m in report["methods"] if m.startswith(SERVER) and m != SERVER + "plain"]
    cw = {m: max(7, len(m) + 1) for m in ours + peers}
    lines.append(
        f"  {'case':<18}{'kind':<12}{'bound':>7}"
        + "".join(f"{m:>{cw[m]}}" for m in ours)
        + ("  |" + "".join(f"{m:>{cw[m]}}" for m in peers) if peers else "")
    )
    for case_id, c in report["per_case"].items():
        cells = "".join(_cell(c["median_ratio"][m], ".2f", cw[m]) for m in ours)
        if peers:
            cells += "  |" + "".join(_cell(c["median_ratio"][m], ".2f", cw[m]) for m in peers)
        lines.append(f"  {case_id:<18}{c['kind']:<12}{_cell(c['bound'], '.2f', 7)}{cells}")
    return "\n".join(lines)


def plot(report: dict, out: str) -> None:
    """Bars per kind: each method's decode ratio to its own system's plain (hatched: llama-server)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'localspec[plot]'") from None
    kinds = list(report["by_kind"])
    labels = [m for m in report["methods"] if m not in ("none", SERVER + "plain")]
    width = 0.8 / max(1, len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(kinds) + 0.3 * len(labels)), 4))
    for j, label in enumerate(labels):
        values = [report["by_kind"][k][label]["ratio_to_plain"] or 0 for k in kinds]
        ax.bar(
            [i + j * width for i in range(len(kinds))],
            values,
            width,
            label=label,
            hatch="//" if label.startswith(SERVER) else None,
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(kinds))], kinds)
    ax.set_ylabel("decode tok/s / own plain")
    ax.set_title(f"{report['model']} on {report['machine']} (cold, median of {report.get('repeats', 1)})")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
