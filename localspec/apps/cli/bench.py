"""`localspec bench`: drafters against plain decoding on a workload, N requests at once (--concurrency), or
(--quants, quants.py) quantizations."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from localspec.apps.cli.quants import run as run_quants
from localspec.errors import LocalspecError

NAMES = ("bench",)


def add_parser(sub, common) -> None:
    bench = sub.add_parser(
        "bench", parents=[common], help="time drafters against plain decoding on a workload; prints a table per kind"
    )
    bench.add_argument(
        "--drafters",
        default="none,ngram,suffix",
        help="comma-separated methods: drafter names, NAME@K for a fixed K, eagle#N for EAGLE trees "
        "of N tokens, NAME+exact with bit-identical greedy output (--exact) (default: none,ngram,suffix)",
    )
    bench.add_argument("--prompts", help="workload JSONL in the ../shared/bench format (default: a small built-in one)")
    bench.add_argument("--cases", help="comma-separated case ids to run (default: all)")
    bench.add_argument("--repeats", type=int, default=1, help="run the workload this many times (noisy machines)")
    bench.add_argument("--json", dest="json_out", metavar="OUT", help="write every figure to this JSON file")
    bench.add_argument("--plot", metavar="OUT.png", help="bar chart of the ratios to plain (needs matplotlib)")
    bench.add_argument(
        "--quants",
        nargs="?",
        const="",
        metavar="Q4_0,Q4_K_M,...",
        help="instead of drafters: time verify windows of each quantization of --model and say which speculates "
        "best on this CPU (default: those on disk; one that is not is made for the timing by requantizing the "
        "file on disk, in a temporary folder)",
    )
    bench.add_argument("--quant-rounds", type=int, default=6, help="--quants: timed rounds per window size (6)")
    bench.add_argument(
        "--concurrency",
        metavar="1,2,4",
        help="instead of one request at a time: N requests at once for each N, answered as `serve --parallel N` "
        "answers them (with --peer: llama-server -np N); aggregate tok/s, time to first token per request; "
        "--ctx is each request's context (default 4096)",
    )
    bench.add_argument(
        "--peer",
        metavar="llama-server[=PATH]",
        help="also measure llama.cpp's own llama-server on the same prompts: PATH is its binary "
        "(or folder); default: llama-server on PATH",
    )
    bench.add_argument(
        "--peer-types",
        default="plain,ngram-mod,ngram-simple,draft-simple",
        help="--peer: llama-server speculation types, methods server:TYPE; draft-eagle3 uses --eagle-head "
        "(a GGUF); draft-simple uses --draft-model or the model's first draft (default: plain,ngram-mod,ngram-simple,"
        "draft-simple; plain is always run)",
    )


def run(args) -> int:
    """`localspec bench`: drafters against plain decoding on a workload, or (--quants) quantizations."""
    if args.quants is not None:
        return run_quants(args)
    return _bench_concurrency(args) if args.concurrency else _bench_drafters(args)


def _bench_cases(args, cases: list[dict], max_tokens: int) -> list[dict]:
    """The workload's cases --cases names (all by default), each capped at --max-tokens."""
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c["id"] in wanted]
        if not cases:
            raise LocalspecError(f"--cases {args.cases}: no such case in the workload")
    for case in cases:
        case["max_tokens"] = min(case["max_tokens"], max_tokens)
    return cases


def _bench_concurrency(args) -> int:
    """`bench --concurrency 1,2,4`: N requests at once per level, against llama-server -np N with --peer."""
    from localspec.apps.cli.common import read_settings
    from localspec.bench import concurrency
    from localspec.bench.run import load_cases, parse_peer_types, peer_binary
    from localspec.fileio import atomic_write

    levels = concurrency.parse_levels(args.concurrency)
    if args.plot:
        raise LocalspecError("--plot draws the one-request-at-a-time report; --concurrency prints tables and --json")
    settings = read_settings(args)
    cases = _bench_cases(args, load_cases(args.prompts), settings.max_tokens) * max(1, args.repeats)
    binary = peer_binary(args.peer) if args.peer else None  # a missing peer fails before the model loads
    report = concurrency.run_concurrency(
        settings,
        args.drafters,
        cases,
        levels,
        slot_ctx=settings.ctx or 4096,
        peer_binary=binary,
        peer_types=parse_peer_types(args.peer_types) if binary else (),
        seed=args.seed or 0,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(concurrency.format_tables(report))
    if args.json_out:
        atomic_write(Path(args.json_out), json.dumps(report, indent=1).encode(), mode=0o644)
    return 0


def _bench_drafters(args) -> int:
    from localspec.apps.cli.common import read_settings
    from localspec.bench.run import (
        format_tables,
        load_cases,
        old_spellings,
        parse_peer_types,
        peer_binary,
        peer_config,
        plot,
        run_bench,
    )
    from localspec.fileio import atomic_write
    from localspec.session import Session

    settings = replace(read_settings(args), drafter="none")  # the methods make their own drafters
    cases = _bench_cases(args, load_cases(args.prompts), settings.max_tokens)
    methods, notes = old_spellings(args.drafters)
    for note in notes:
        print(f"localspec: {note}", file=sys.stderr)
    if args.repeats < 1:
        raise LocalspecError(f"--repeats must be at least 1, got {args.repeats}")
    peer_types = parse_peer_types(args.peer_types)
    binary = peer_binary(args.peer) if args.peer else None  # a missing peer fails before the model loads
    with Session.open(settings) as session:
        # run_bench gives every method its own empty scratch suffix cache per repeat: the user's cache stays
        # out of (and untouched by) the benchmark
        peer, notes = None, []
        if binary:
            peer, peer_types, notes = peer_config(binary, session, peer_types, session.backend.info.gpu_layers)
            for note in notes:
                print(f"localspec bench: {note}", file=sys.stderr)
        print(
            f"localspec bench — {session.load_report()}; {len(cases)} cases × {args.repeats} repeats"
            + (f"; peer {binary} ({', '.join(peer_types)})" if peer else ""),
            file=sys.stderr,
        )
        report = run_bench(
            session,
            methods,
            cases,
            default_k=settings.draft_tokens,
            peer=peer,
            peer_types=peer_types,
            seed=args.seed or 0,
            repeats=args.repeats,
            notes=notes,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    if peer:
        from localspec.bench.peer import server_version

        report["peer"]["version"] = server_version(binary)
    print(format_tables(report))
    if args.json_out:
        atomic_write(Path(args.json_out), json.dumps(report, indent=1).encode(), mode=0o644)  # a result to share
    if args.plot:
        plot(report, args.plot)
    return 0
