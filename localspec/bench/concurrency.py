"""`localspec bench --concurrency 1,2,4`: several requests at once, as `localspec serve` answers them.

At each level N the model is loaded with N times the per-slot context (as llama-server's `-c` is for `-np N`),
and the workload is dealt N cases per round (the last round wraps to the first cases). In a round every
system answers the same N prompts at once: localspec's methods as `serve --parallel N` runs them (N sessions
over slots of the model, every step of every request in one batch; at N = 1 the lone session `serve` runs by
default), and with `--peer llama-server` llama-server with `-np N` per speculation type, sent the N prompts
from N threads. The systems take turns in an order rotated per round.

Figures per round and system: aggregate tok/s = all generated tokens / the round's wall time (start to the last
answer); per request, its first token's time after the round started and its decode tok/s. Each round starts
cold: fresh drafters and controllers (a scratch suffix cache per method and level), empty caches, the peer's
prompt cache off.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

from localspec.bench.peer import running
from localspec.bench.run import SERVER, parse_method, peer_config, plain_of
from localspec.config import Settings
from localspec.errors import ConfigError
from localspec.session import Request, Session
from localspec.slots import named_refusal, slot_sessions

NOTES = [
    "aggregate_tok_s: generated tokens over wall time, pooled over the rounds (a round starts when its first "
    "request is sent and ends with its last answer); median_round_tok_s: the median round's",
    "localspec at N >= 2 runs as `serve --parallel N` (slots of one context, every step in one batch); at N = 1 "
    "as `serve` runs by default (one session). llama-server runs -np N with N times the per-slot context",
    "ttft_s: localspec, the first token's time after the round started; llama-server (answers not streamed), "
    "the request's time minus its predicted_ms (queue, prefill and first token)",
    "ratio_to_plain: aggregate tok/s over that system's own plain at the same N (none, server:plain); "
    "over_best_server: over the best llama-server type's at the same N; over_best_server_per_round: the mean "
    "over rounds of each round's aggregate over that round's best server type",
]


def parse_levels(spec: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4]; anything else is a ConfigError that says what is expected."""
    try:
        levels = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise ConfigError(f"--concurrency {spec!r}: expected request counts of at least 1, like 1,2,4")
    return list(dict.fromkeys(levels))


def run_concurrency(
    settings: Settings,
    spec: str,
    cases: list[dict],
    levels: Sequence[int],
    *,
    slot_ctx: int,
    peer_binary: Path | None = None,
    peer_types: Sequence[str] = ("plain",),
    seed: int = 0,
    progress: Callable[[str], None] = print,
) -> dict:
    """Every level of ``levels`` (see the module doc): the report."""
    methods = [parse_method(item, settings.draft_tokens) for item in spec.split(",") if item.strip()]
    if not any(name == "none" for _, name, _ in methods):
        methods.insert(0, ("none", "none", 1))  # plain: the baseline
    if max(levels) > 1:  # refused before anything loads, not after the first level ran
        for _, name, _ in methods:
            refusal = named_refusal(name, settings.exact, alone="--concurrency 1")
            if refusal:
                raise ConfigError(f"--concurrency {max(levels)}: {refusal}")
    progress(
        f"localspec bench — {settings.model}; {len(cases)} requests at {','.join(map(str, levels))} at once"
        + (f"; peer {peer_binary}" if peer_binary else "")
    )
    runs, notes, model = {}, [], settings.model
    with tempfile.TemporaryDirectory(prefix="localspec-concurrency-") as scratch:
        for n in levels:
            with Session.open(replace(settings, ctx=slot_ctx * n, drafter="none")) as session:
                config, types = None, list(peer_types)
                if peer_binary:
                    config, types, skipped = peer_config(peer_binary, session, types)
                    config = replace(config, n_ctx=slot_ctx, n_parallel=n)
                    notes += [note for note in skipped if note not in notes]
                with running(config, types, Path(scratch) / f"servers-{n}") as servers:
                    runs[n] = _level(session, methods, servers, cases, n, Path(scratch) / f"n{n}", seed, progress)
                model = session.model_name
    return {
        "benchmark": "concurrency",
        "model": model,
        "machine": platform.processor() or platform.machine(),
        "threads": settings.threads,
        "ctx_per_slot": slot_ctx,
        "date": time.strftime("%Y-%m-%d"),
        "sampling": asdict(settings.sampling),
        "concurrency": list(levels),
        "methods": [label for label, _, _ in methods] + [SERVER + t for t in peer_types if peer_binary],
        "notes": NOTES + notes,
        "summary": {n: summarize_level(rounds) for n, rounds in runs.items()},
        "rounds": runs,
    }


def _level(session, methods, servers, cases, n, scratch: Path, seed, progress) -> list[dict]:
    systems = [(label, _localspec(session, name, k, n, scratch / label)) for label, name, k in methods]
    systems += [(SERVER + t, _peer(server, session, n)) for t, server in servers.items()]
    rounds = []
    for r in range(-(-len(cases) // n)):
        batch = [cases[(r * n + i) % len(cases)] for i in range(n)]
        prompts = [session.text.prompt_tokens(c["messages"], reserve=c["max_tokens"]) for c in batch]
        caps = [c["max_tokens"] for c in batch]
        seeds = [seed + r * n + i for i in range(n)]  # each request its own draws, the same for every system
        order = systems[r % len(systems) :] + systems[: r % len(systems)]
        row = {"round": r, "cases": [c["id"] for c in batch], "order": [label for label, _ in order], "systems": {}}
        for label, answer in order:
            start = time.perf_counter()
            requests = answer(prompts, caps, seeds)
            wall = time.perf_counter() - start
            tokens = sum(q["tokens"] for q in requests)
            row["systems"][label] = {
                "wall_s": round(wall, 3),
                "tokens": tokens,
                "aggregate_tok_s": round(tokens / wall, 2),
                "requests": requests,
            }
            progress(f"N={n} round {r + 1} {label}: {tokens} tokens in {wall:.2f} s = {tokens / wall:.1f} tok/s")
        rounds.append(row)
    return rounds


def _localspec(session: Session, name: str, k, n: int, scratch: Path) -> Callable:
    """A round of one localspec method: fresh drafters and controller, the N requests side by side."""
    options = {"cache_dir": str(scratch)} if "suffix" in name.split("+") else {}

    def answer(prompts, caps, seeds) -> list[dict]:
        session.set_draft_tokens(k)
        session.backend.truncate(0)
        if n == 1:
            session.set_drafter(session.drafters.build(name, session.backend, **options))
            return [_answer(session, prompts[0], caps[0], seeds[0], time.perf_counter())]
        slots, fibers = slot_sessions(session, n, name, **options)  # each slot builds its own drafter
        rows, t0 = [None] * n, time.perf_counter()
        try:
            for i, slot in enumerate(slots):

                def run(i=i, slot=slot) -> None:
                    rows[i] = _answer(slot, prompts[i], caps[i], seeds[i], t0)

                fibers.start(run)
            while fibers.live:
                fibers.step()
        finally:
            for slot in slots:
                slot.close()
        return rows

    return answer


def _answer(session: Session, prompt, cap: int, seed: int, t0: float) -> dict:
    first, stats = None, None
    for event in session.complete(prompt, Request(max_tokens=cap, seed=seed)):
        if first is None and event.tokens:
            first = time.perf_counter() - t0
        stats = event.stats
    d = stats.to_dict()
    return {
        "tokens": stats.generated,
        "ttft_s": round(first, 3) if first is not None else None,
        "done_at_s": round(time.perf_counter() - t0, 3),
        "decode_tok_s": d["decode_tok_s"],
        "acceptance_rate": d["acceptance_rate"],
        "tau": d["mean_accepted_length"],
        "steps": stats.steps,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
    }


def _peer(server, session: Session, n: int) -> Callable:
    """A round of one llama-server type: the N prompts sent at once from N threads."""

    def one(prompt, cap, seed, t0) -> dict:
        reply = server.complete(prompt, cap, session.sampling, seed)
        t = reply.timings
        done = time.perf_counter() - t0
        return {
            "tokens": t.get("predicted_n", len(reply.tokens)),
            "ttft_s": round(done - t.get("predicted_ms", 0) / 1e3, 3),
            "done_at_s": round(done, 3),
            "decode_tok_s": round(t.get("predicted_per_second", 0.0), 2),
            "draft_n": t.get("draft_n", 0),
            "draft_n_accepted": t.get("draft_n_accepted", 0),
        }

    def answer(prompts, caps, seeds) -> list[dict]:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(one, p, c, s, t0) for p, c, s in zip(prompts, caps, seeds, strict=True)]
            return [f.result() for f in futures]

    return answer


def summarize_level(rounds: list[dict]) -> dict:
    """Per system: aggregate tok/s pooled over the rounds (all tokens over all their wall time: the workload's
    throughput; a median over rounds of different cases would pick one case), the median round, the requests'
    ttft p50/p95 and decode tok/s p50, and the ratios to its own plain and to the best server type, pooled and
    as the mean over rounds of each round's ratio (the same cases on both sides)."""
    labels = list(rounds[0]["systems"]) if rounds else []
    out = {}
    for label in labels:
        mine = [r["systems"][label] for r in rounds]
        requests = [q for s in mine for q in s["requests"]]
        ttft = sorted(q["ttft_s"] for q in requests if q["ttft_s"] is not None)
        out[label] = {
            "aggregate_tok_s": round(sum(s["tokens"] for s in mine) / sum(s["wall_s"] for s in mine), 2),
            "median_round_tok_s": round(statistics.median(s["aggregate_tok_s"] for s in mine), 2),
            "ttft_p50_s": round(statistics.median(ttft), 3) if ttft else None,
            "ttft_p95_s": ttft[min(len(ttft) - 1, round(0.95 * (len(ttft) - 1)))] if ttft else None,
            "decode_tok_s_p50": round(statistics.median(q["decode_tok_s"] for q in requests), 2),
        }
    servers = [label for label in labels if label.startswith(SERVER)]
    best = max((out[label]["aggregate_tok_s"] for label in servers), default=None)
    for label, row in out.items():
        plain = out.get(plain_of(label))
        row["ratio_to_plain"] = round(row["aggregate_tok_s"] / plain["aggregate_tok_s"], 3) if plain else None
        row["over_best_server"] = round(row["aggregate_tok_s"] / best, 3) if best else None
        row["over_best_server_per_round"] = (
            round(statistics.mean(_round_ratio(r, label, servers) for r in rounds), 3) if servers else None
        )
    return out


def _round_ratio(row: dict, label: str, servers: list[str]) -> float:
    return row["systems"][label]["aggregate_tok_s"] / max(row["systems"][s]["aggregate_tok_s"] for s in servers)


def format_tables(report: dict) -> str:
    """One table per level: aggregate tok/s side by side, the ratios, and the requests' latencies."""
    lines = []
    for n, summary in report["summary"].items():
        lines += [
            f"\n{n} request{'s' if int(n) != 1 else ''} at once",
            f"{'system':<22}{'aggregate tok/s':>16}{'x own plain':>12}{'x best server':>14}{'per round':>10}"
            f"{'ttft p50 s':>11}{'ttft p95 s':>11}{'req tok/s p50':>14}",
        ]
        for label, row in summary.items():
            lines.append(
                f"{label:<22}{row['aggregate_tok_s']:>16.1f}{_fmt(row['ratio_to_plain']):>12}"
                f"{_fmt(row['over_best_server']):>14}{_fmt(row['over_best_server_per_round']):>10}"
                f"{_fmt(row['ttft_p50_s']):>11}{_fmt(row['ttft_p95_s']):>11}"
                f"{row['decode_tok_s_p50']:>14.1f}"
            )
    return "\n".join(lines)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"
