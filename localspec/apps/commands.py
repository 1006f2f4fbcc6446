"""What `localspec run` and `localspec chat --plain` do with a Session: text in, streamed text out."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from localspec.chat.conversation import Conversation
from localspec.chat.reasoning import ANSWER, REASONING, ReasoningSplitter
from localspec.chat.store import SavedChat, load_chat
from localspec.config import Settings, settings_from_args
from localspec.engine.stats import TurnStats
from localspec.errors import ConfigError, LocalspecError
from localspec.session import Session


@dataclass
class Answered:
    text: str  # the answer
    reasoning: str  # a reasoning model's thinking before it (reasoning.py), "" for others
    stats: TurnStats
    finish: str


def _stream(session: Session, conversation: Conversation, out, thoughts=None) -> Answered:
    """Print the answer to ``out`` as it streams, a reasoning model's thinking to ``thoughts``."""
    splitter = ReasoningSplitter(session.reasoning)
    parts: dict[str, list[str]] = {REASONING: [], ANSWER: []}
    stats, finish = None, "interrupted"

    def show(pieces) -> None:
        for kind, text in pieces:
            if kind == ANSWER and parts[REASONING] and not parts[ANSWER] and thoughts is not None:
                thoughts.write("\n")  # the thinking ends on a line of its own
            parts[kind].append(text)
            stream = out if kind == ANSWER else thoughts
            if stream is not None:
                stream.write(text)
                stream.flush()

    events = session.answer(conversation)
    try:
        for event in events:
            show(splitter.feed(event.text))
            stats = event.stats
            finish = event.finish_reason or finish
    except KeyboardInterrupt:
        events.close()  # the engine rolls its cache back; what was said so far is kept
    show(splitter.finish())
    return Answered("".join(parts[ANSWER]), "".join(parts[REASONING]), stats or TurnStats(), finish)


def _settings(args) -> Settings:
    """The run's settings; a line on stderr for each old spelling they were read from."""
    settings = settings_from_args(args)
    for notice in settings.notices:
        print(f"localspec: {notice}", file=sys.stderr)
    return settings


def run_command(args) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    conversation = Conversation(system=args.system)
    conversation.add("user", prompt)
    with Session.open(_settings(args)) as session:
        if not args.json:
            print(f"loaded {session.load_report()}", file=sys.stderr)
        else:  # said even when only JSON is wanted: a recommended drafter gave way, --exact's fallback
            for line in filter(None, (session.fallback, session.exact_notice())):
                print(f"localspec: {line}", file=sys.stderr)
        answered = _stream(session, conversation, *((None, None) if args.json else (sys.stdout, sys.stderr)))
        if args.json:
            print(
                json.dumps(
                    {
                        "model": session.model_name,
                        "drafter": session.drafter.name,
                        "model_memory_mb": round(session.backend.memory_bytes() / 2**20, 1),
                        "text": answered.text,
                        **({"reasoning": answered.reasoning} if session.reasoning or answered.reasoning else {}),
                        "finish_reason": answered.finish,
                        "stats": answered.stats.to_dict(),
                    },
                    ensure_ascii=False,
                )
            )
        else:
            print()
            print(f"[{session.drafter.name}] {answered.stats.summary()}", file=sys.stderr)
    return 130 if answered.finish == "interrupted" else 0


def chat_command(args) -> int:
    """The Textual app on a terminal; the line-based chat otherwise (pipes, --plain)."""
    settings = _settings(args)
    chat = _chat_to_continue(args, settings)
    if args.plain or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return plain_chat(settings, chat)
    from localspec.apps.tui.app import ChatApp

    def open_session(progress, **changes):  # changes: settings a reload replaces (/exact)
        changed = replace(settings, **changes)
        return Session.open(changed, on_load=lambda fraction: progress(f"loading the model {fraction:.0%}"))

    app = ChatApp(open_session, chat)
    app.run()
    if chat_saved(app.chat):
        print(f"chat saved: localspec chat --resume {app.chat.id}", file=sys.stderr)
    return 0


def _chat_to_continue(args, settings: Settings) -> SavedChat:
    if args.resume:
        chat = load_chat(None if args.resume == "latest" else args.resume)
        if args.system:
            chat.conversation.system = args.system
        return chat
    return SavedChat.new(args.model or settings.model, settings.system)


def chat_saved(chat: SavedChat) -> bool:
    return bool(chat.conversation.messages)


def plain_chat(settings: Settings, chat: SavedChat) -> int:
    interactive = sys.stdin.isatty()
    with Session.open(settings) as session:
        conversation = chat.conversation
        if interactive:
            print(
                f"localspec chat — {session.load_report()}. Ctrl-C stops an answer, Ctrl-D or /exit quits.",
                file=sys.stderr,
            )
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            try:
                line = sys.stdin.readline()
            except KeyboardInterrupt:
                break
            if not line or line.strip() in ("/exit", "/quit"):
                break
            if not line.strip():
                continue
            chat.add("user", line.rstrip("\n"))
            dropped = conversation.dropped
            try:
                answered = _stream(session, conversation, sys.stdout, sys.stderr)
            except LocalspecError as exc:  # e.g. a message longer than the context: say so, keep chatting
                conversation.messages.pop()
                chat.stats.pop()
                print(f"localspec: error: {exc}", file=sys.stderr)
                continue
            chat.add("assistant", answered.text, answered.stats.to_dict(), reasoning=answered.reasoning)
            _save_quietly(chat)
            if conversation.dropped > dropped:
                print(f"\n(left the {conversation.dropped} oldest messages out to fit the context)", file=sys.stderr)
            note = " (interrupted)" if answered.finish == "interrupted" else ""
            print()
            print(f"[{session.drafter.name}] {answered.stats.summary()}{note}", file=sys.stderr, flush=True)
    return 0


def _save_quietly(chat: SavedChat) -> None:
    try:
        chat.save()
    except OSError as exc:
        print(f"localspec: could not save the chat: {exc}", file=sys.stderr)


def calibrate_command(args) -> int:
    """Measures and caches --exact's near-tie margin for the model, backend and build given (or checks its
    batch-invariant kernels): the model is loaded as --exact loads it."""
    from localspec.engine.calibrate import calibrate

    if args.positions < 16:
        raise ConfigError(f"--positions must be at least 16, got {args.positions}")
    with Session.open(replace(_settings(args), exact=True)) as session:
        print(f"calibrating {session.load_report()}", file=sys.stderr)
        result = calibrate(session.backend, lambda line: print(f"  {line}", file=sys.stderr), args.positions)
    print(json.dumps(result))
    if result["kernels"] == "batch-invariant":
        print(
            f"batch-invariant kernels: verify windows differ from 1-token steps by at most "
            f"{result['max_gap_difference']} logits over {result['positions']} positions "
            f"({result['argmax_flips']} argmax flips); greedy turns need no margin",
            file=sys.stderr,
        )
        return 0 if result["max_gap_difference"] == 0 else 1
    print(
        f"exact guard margin {result['margin']} (2 x the largest gap difference {result['max_gap_difference']} "
        f"over {result['positions']} positions; {result['argmax_flips']} argmax flips seen); cached",
        file=sys.stderr,
    )
    return 0


def simulate_command(args) -> int:
    """Replays each recorded answer of FILE, in order, through the drafter (which may learn across them)."""
    from localspec.bench.simulate import cost_curve, simulate, summary

    records = read_recorded_chats(args.file)
    step_cost = None
    if args.cost_curve:
        try:
            step_cost = cost_curve(json.loads(Path(args.cost_curve).read_text(encoding="utf-8"))["ms"])
        except (OSError, ValueError, KeyError) as exc:
            raise LocalspecError(f"--cost-curve {args.cost_curve}: not a verify-cost JSON ({exc!r})") from exc
    with Session.open(_settings(args)) as session:
        cases = [
            (session.backend.chat_tokens(messages[:-1]), session.backend.tokenize(messages[-1]["content"]))
            for messages in records
        ]
        k = session.speclen.max_k  # the simulator replays a fixed K (the controller's cap under 'auto')
        stats = simulate(session.drafter, cases, k, step_cost)
        print(
            json.dumps(
                {"drafter": session.drafter.name, "draft_tokens": k, "cases": len(cases), **summary(stats, step_cost)}
            )
        )
    return 0


def read_recorded_chats(path: str) -> list[list[dict]]:
    """JSONL lines of {"messages": [..., assistant answer]} or {"prompt": ..., "answer": ...}."""
    from localspec.errors import ConfigError

    records = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            messages = record.get("messages") or [
                {"role": "user", "content": record["prompt"]},
                {"role": "assistant", "content": record["answer"]},
            ]
            if messages[-1]["role"] != "assistant":
                raise ValueError("the last message must be the assistant's answer")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{path}, line {number}: {exc!r} (want messages ending with the assistant's "
                f"answer, or prompt and answer)"
            ) from exc
        records.append(messages)
    return records


def bench_command(args) -> int:
    """`localspec bench`: drafters against plain decoding on a workload, or (--quants) quantizations."""
    if args.quants is not None:
        return quants_command(args)
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
    from localspec.bench import concurrency
    from localspec.bench.run import load_cases, parse_peer_types, peer_binary
    from localspec.fileio import atomic_write

    levels = concurrency.parse_levels(args.concurrency)
    if args.plot:
        raise LocalspecError("--plot draws the one-request-at-a-time report; --concurrency prints tables and --json")
    settings = _settings(args)
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

    settings = replace(_settings(args), drafter="none")  # the methods make their own drafters
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
            peer, peer_types, notes = peer_config(binary, session, peer_types, session.backend.offloaded_layers)
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


def quants_command(args) -> int:
    """`bench --quants`: each quantization's verify-cost curve on this CPU, and the advice drawn from them."""
    import tempfile

    from localspec.bench import quants
    from localspec.fileio import atomic_write
    from localspec.places import cache_root

    def say(line: str) -> None:
        print(f"localspec bench: {line}", file=sys.stderr, flush=True)

    on_disk = quants.model_files(args.model)
    if not on_disk:
        name = args.model or "the default model"
        raise LocalspecError(f"no GGUF file of {name} is on disk: localspec pull {args.model or ''} first")
    have = {quants.quant_of(p): p for p in on_disk}
    wanted = [q.strip().upper() for q in args.quants.split(",") if q.strip()] or list(have)
    quants.check_names([q for q in wanted if q not in have])  # before any requantizing
    source = max(on_disk, key=lambda p: p.stat().st_size)  # the most bits: the best to requantize from
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix="quants-") as tmp:
        files = []
        for quant in wanted:
            if quant in have:
                files.append((have[quant], False))
                continue
            say(f"{quant} is not on disk: requantizing {source.name} to it for the timing (deleted afterwards)")
            files.append((quants.requantize(source, quant, Path(tmp) / f"{quant}.gguf", args.threads), True))
        curves = quants.measure(files, rounds=args.quant_rounds, threads=args.threads, say=say)
    print("\n".join(quants.advise(curves)))
    signature = quants.cpu_signature()
    say(f"kept for `pull`'s advice: {quants.save_measured(curves, signature)}")
    if args.json_out:
        curves_json = [asdict(c) for c in curves]
        report = {"cpu": signature, "model": curves[0].model, "context": quants.CONTEXT, "curves": curves_json}
        atomic_write(Path(args.json_out), json.dumps(report, indent=1).encode(), mode=0o644)
    return 0


def pull_command(args) -> int:
    from localspec.models import hub
    from localspec.models.registry import is_path

    if is_path(args.model):
        if not args.name:
            raise LocalspecError(f"pulling the local file {args.model} needs --name NAME (the alias to give it)")
        entry = hub.register_local(Path(args.model), args.name)
        print(
            f"{entry.name}: {entry.path} registered ({entry.family}, tokenizer {entry.tokenizer}); "
            f"use it with --model {entry.name}"
        )
        return 0
    from localspec.config import head_releases

    done = hub.pull(
        args.model,
        args.backend,
        args.quant,
        args.revision,
        drafts=not args.no_drafts,
        say=lambda line: print(line, file=sys.stderr, flush=True),
        heads=head_releases(),
        advice=_quant_advice,
    )
    for item in done:
        size = f" {item.size / 2**20:.0f} MB" if item.size else ""
        print(f"{item.name} ({item.backend}){size}: {item.path}")
    return 0


def _quant_advice(files: list[str], quant: str | None, name: str) -> list[str]:
    """`pull`'s advice on which quantization speculates best on this CPU (bench/quants.py, loaded only then)."""
    from localspec.bench.quants import pull_advice

    return pull_advice(files, quant, name)


def list_command(args) -> int:
    from localspec.models import hub

    rows = hub.listing()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'name':<20}{'on disk':<24}{'sources':<24}drafters / compatible drafts")
    for row in (r for r in rows if "app" not in r):
        disk = ", ".join(_on_disk(d) for d in row["downloaded"]) or "-"
        drafts = ", ".join(row["drafters"]) + (f" / {', '.join(row['drafts'])}" if row["drafts"] else "")
        print(f"{row['name']:<20}{disk:<24}{', '.join(row['sources']):<24}{drafts}")
    found = [r for r in rows if "app" in r]
    if found:
        print("\nfound in other apps' files (read where they are; run one with --model NAME):")
        for row in found:
            disk = row["downloaded"][0]
            print(f"  {row['name']:<60} {disk['bytes'] / 2**20:>7.0f} MB  {disk['path']}")
    return 0


def _on_disk(item: dict) -> str:
    return f"{item['backend']} {item['bytes'] / 2**20:.0f} MB" + (f" ({item['app']})" if "app" in item else "")


def rm_command(args) -> int:
    from localspec.models import hub

    for line in hub.remove(args.model):
        print(line)
    return 0


def train_eagle_command(args) -> int:
    from localspec.train.driver import run_train_eagle

    run_train_eagle(args, log=lambda line: print(line, flush=True))
    return 0


def convert_eagle_command(args) -> int:
    from localspec.drafters.eagle.gguf import convert_eagle
    from localspec.models.registry import load_registry, resolve_model

    name, target = resolve_model(args.target, load_registry())
    written = convert_eagle(Path(args.head), target, Path(args.out), args.type)
    print(
        f"wrote {args.out}: EAGLE-3 head for {name}, layers {written['layers']}, "
        f"draft vocabulary {written['draft_vocab']}; run it with --backend llama.cpp --eagle-head {args.out}"
    )
    return 0


def convert_dflash_command(args) -> int:
    from localspec.drafters.dflash.gguf import convert_dflash
    from localspec.models.registry import load_registry, resolve_model

    name, target = resolve_model(args.target, load_registry())
    written = convert_dflash(Path(args.head), target, Path(args.out), args.type)
    flag = "--dspark-head" if written["kind"] == "dspark" else "--dflash-head"
    print(
        f"wrote {args.out}: {written['kind']} head for {name}, target layers {written['layers']}, blocks of "
        f"{written['block_size']}; run it with --backend llama.cpp --drafter {written['kind']} {flag} {args.out}"
    )
    return 0


def export_command(args) -> int:
    from localspec.apps.export import command, plan
    from localspec.chat.store import saved_chats
    from localspec.models.registry import load_registry

    if args.draft_tokens is not None and args.draft_tokens < 1:
        raise ConfigError(f"--draft-tokens must be at least 1, got {args.draft_tokens}")
    chosen = plan(load_registry(), args.model, args.drafter, args.engine, args.draft_tokens, saved_chats())
    print("\n".join(command(chosen)))
    return 0


def config_command(args) -> int:
    """Every setting a run with these flags would use, and where each comes from; loads no model."""
    rows = _settings(args).rows
    if args.json:
        print(json.dumps([{"setting": n, "value": _shown(v), "source": s} for n, v, s in rows], indent=1))
        return 0
    width = max(len(n) for n, _, _ in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {_shown(value)}  [{source}]")
    return 0


def _shown(value) -> object:
    return str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value


def serve_command(args) -> int:
    from dataclasses import replace

    from localspec.apps.server.run import serve

    settings = _settings(args)
    if args.no_persist:
        settings = replace(settings, drafters=settings.drafters.with_options("suffix", persist=False))
    cache_ram = None if args.cache_ram is None else args.cache_ram * 2**20
    return serve(settings, args.host, args.port, args.api_key, args.cors, cache_ram, parallel=args.parallel)
