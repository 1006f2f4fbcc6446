"""Real clients driven end to end against `localspec serve` (and the coding agent against llama-server too), each
client installed by this script in a virtual environment of its own (venvs.py), every request body they send
recorded through a proxy (capture.py) for the contract tests.

    .venv/bin/python benchmarks/clients/run.py [--clients aider,llm,litellm,webui,webui-tools] [--model PATH.gguf]
        [--repeats 3] [--formats whole,diff] [--systems localspec,llama-server,...]
        [--llama-server PATH] [--out OUT.json] [--bodies DIR]

aider: the same scripted task (aider_task.py) through localspec (default settings: `localspec serve --model M`)
and llama-server (`--spec-type ngram-mod`), `--repeats` times per edit format, interleaved (the order rotating),
each run on freshly started servers: a user's first task, nothing learned from an earlier run (localspec's suffix
cache starts empty; llama-server's n-gram pool and prompt cache too). llm, LiteLLM and the web UI run against
one localspec server; webui-tools asks Open WebUI (which offers its built-in tools natively) for the date and
time in 5 new chats: the model must call its timestamp tool and the answer carry the result. The JSON has each
client's version, what worked, the timings and the servers' own figures; the request bodies sent to localspec
go to ``--bodies`` (tests/apps/server/clients/, one JSONL per client and version, one body per distinct shape),
which the contract tests replay.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(HERE)]

import aider_task  # noqa: E402
import llm_cli  # noqa: E402
import venvs  # noqa: E402
from agent_loop import DEFAULT_MODEL, PEER_BIN, LocalspecServer, own_cache  # noqa: E402
from capture import Capture  # noqa: E402

from localspec.bench.peer import LlamaServer, find_llama_server, server_version  # noqa: E402

MODEL_NAME = "qwen2.5-coder-1.5b"
LITELLM = "litellm==1.110.2"


class DefaultLocalspec(LocalspecServer):
    """`localspec serve --model M` with nothing else but the port: the settings a user gets."""

    def argv(self, port: int) -> list[str]:
        return [*super().argv(port)[:6], "--host", "127.0.0.1", "--port", str(port), *self.flags]


SYSTEMS = ("localspec", "llama-server", "localspec-plain", "llama-server-plain")


def start(system: str, model: Path, folder: Path, peer_bin: str | None):
    """A fresh server: `localspec serve --model M` with an empty cache folder, or llama-server ngram-mod; the
    `-plain` systems decode without speculation (`--drafter none`, no `--spec-type`), each system's own baseline."""
    common = {"n_ctx": 0, "threads": 2}  # 0: llama-server's context from the model, as localspec's default
    plain = system.endswith("-plain")
    if system.startswith("localspec"):
        cache = own_cache(folder / f"{system}-cache")
        flags = ["--drafter", "none"] if plain else []
        return DefaultLocalspec(model, flags, cache, log_path=folder / f"{system}.log", **common).start()
    binary = find_llama_server(peer_bin)
    spec = "plain" if plain else "ngram-mod"
    return LlamaServer(binary, model, spec, log_path=folder / f"{system}.log", **common).start()


@contextmanager
def fronted(systems: list[str], model: Path, folder: Path, peer_bin: str | None, captured: list):
    """Fresh servers, each behind a recording proxy; what the proxies recorded goes to ``captured``."""
    servers, proxies = [], {}
    try:
        for system in systems:
            servers.append(start(system, model, folder, peer_bin))
            proxies[system] = Capture(servers[-1]._url("")).__enter__()
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.__exit__()
            captured += proxy.requests
        for server in servers:
            server.stop()


def agent(args, work: Path, captured: list) -> dict:
    """Each run of the task on fresh servers (a user's first task: nothing learned from an earlier run), both
    systems up at once, the order rotating between runs. ``--keep-servers``: both servers started once and kept
    up for every run, as a user's agent session goes on (whole and diff alternating: the prompt states, the
    suffix cache and the n-gram pool carry over from run to run)."""
    env = venvs.client_env("aider", aider_task.REQUIREMENT)
    runs, systems = [], args.systems
    version = venvs.version(env, "aider-chat")

    def one(proxies: dict, order: list[str], folder: Path, edit_format: str, repeat: int) -> None:
        for system in order:
            label = {"client": "aider", "version": version, "system": system, "edit_format": edit_format}
            proxies[system].label = label
            done = len(proxies[system].requests)
            repo = aider_task.make_repo(folder / f"repo-{system}-{edit_format}-{repeat}")
            result = aider_task.run(env, repo, proxies[system].url + "/v1", MODEL_NAME, edit_format)
            figures = server_figures(proxies[system].requests[done:])
            runs.append({"system": system, "repeat": repeat, **result, "server": figures})
            line = f"aider {edit_format:5s} r{repeat} {system:12s} {result['wall_s']:7.1f} s ok={result['ok']}"
            print(line, file=sys.stderr)

    def rotation():
        for repeat in range(args.repeats):
            for edit_format in args.formats:
                flip = (repeat + args.formats.index(edit_format)) % 2
                yield repeat, edit_format, systems[::-1] if flip else systems

    if args.keep_servers:
        with fronted(systems, Path(args.model), work / "aider-kept", args.llama_server, captured) as proxies:
            for repeat, edit_format, order in rotation():
                one(proxies, order, work / "aider-kept", edit_format, repeat)
    else:
        for repeat, edit_format, order in rotation():
            folder = work / f"aider-{edit_format}-{repeat}"
            with fronted(order, Path(args.model), folder, args.llama_server, captured) as proxies:
                one(proxies, order, folder, edit_format, repeat)
    return {
        "version": version,
        "servers": "kept up for every run" if args.keep_servers else "fresh for every run",
        "runs": runs,
        "summary": summarize(runs, args.formats, systems),
    }


def summarize(runs: list[dict], formats: list[str], systems: list[str]) -> dict:
    """Per edit format: each system's median wall time and runs that worked, localspec over llama-server."""
    summary = {}
    for edit_format in formats:
        mine = [r for r in runs if r["edit_format"] == edit_format]
        walls = {s: [r["wall_s"] for r in mine if r["system"] == s] for s in systems}
        row = {f"{s}_median_s": median(w) for s, w in walls.items()}
        row |= {f"{s}_ok": sum(r["ok"] for r in mine if r["system"] == s) for s in systems}
        if {"localspec", "llama-server"} <= set(systems):
            row["ratio"] = round(median(walls["localspec"]) / median(walls["llama-server"]), 3)
            row["target"] = "ratio <= 0.85 with every run ok"
        for family in ("localspec", "llama-server"):  # each system against its own plain decoding
            if {family, f"{family}-plain"} <= set(systems):
                row[f"{family}_to_own_plain"] = round(median(walls[family]) / median(walls[f"{family}-plain"]), 3)
        summary[edit_format] = row
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="aider,llm,litellm,webui")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", default="whole,diff")
    ap.add_argument("--systems", default="localspec,llama-server", help=f"aider's servers, of {', '.join(SYSTEMS)}")
    ap.add_argument("--keep-servers", action="store_true", help="aider: start both servers once, keep them up")
    ap.add_argument("--llama-server", default=str(PEER_BIN) if PEER_BIN.is_dir() else None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"clients-{MODEL_NAME}-{date.today()}.json"))
    ap.add_argument("--bodies", default=str(ROOT / "tests" / "apps" / "server" / "clients"))
    args = ap.parse_args()
    args.formats, args.systems = args.formats.split(","), args.systems.split(",")
    if set(args.systems) - set(SYSTEMS):
        ap.error(f"--systems: choose from {', '.join(SYSTEMS)}")
    clients, out = args.clients.split(","), Path(args.out).resolve()
    work = Path(tempfile.mkdtemp(prefix="localspec-clients-"))
    report = {
        "model": args.model,
        "machine": platform.processor() or platform.machine(),
        "date": str(date.today()),
        "clients": {},
        "work": str(work),
    }
    captured: list[dict] = []
    if "aider" in clients:
        report["llama_server"] = server_version(find_llama_server(args.llama_server))
        report["clients"]["aider"] = agent(args, work, captured)
    others = [c for c in clients if c != "aider"]
    with fronted(["localspec"] if others else [], Path(args.model), work / "clients", None, captured) as proxies:
        front = proxies.get("localspec")
        if "llm" in clients:
            env = venvs.client_env("llm", llm_cli.REQUIREMENT)
            front.label = {"client": "llm", "version": venvs.version(env, "llm"), "system": "localspec"}
            result = llm_cli.run(env, work / "llm-home", front.url + "/v1", MODEL_NAME)
            report["clients"]["llm"] = {"version": front.label["version"], **result}
        if "litellm" in clients:
            env = venvs.client_env("litellm", LITELLM)
            front.label = {"client": "litellm", "version": venvs.version(env, "litellm"), "system": "localspec"}
            argv = [str(env / "bin" / "python"), str(HERE / "litellm_calls.py"), front.url + "/v1", MODEL_NAME]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            report["clients"]["litellm"] = (
                json.loads(done.stdout) if done.returncode == 0 else {"ok": False, "error": done.stderr[-2000:]}
            )
        for name in [c for c in clients if c in ("webui", "webui-tools")]:
            report["clients"][name] = webui(work, front, "tools" if name == "webui-tools" else "chat")
            kept = []
            for shot in map(Path, report["clients"][name].get("screenshots", [])):  # next to the JSON
                kept.append(out.with_name(f"{out.stem}-{shot.name}"))
                shutil.copy(shot, kept[-1])
            report["clients"][name]["screenshots"] = [str(k.relative_to(ROOT)) for k in kept]
    save_bodies([r for r in captured if r.get("system") == "localspec"], Path(args.bodies))
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v.get("summary", v.get("ok")) for k, v in report["clients"].items()}, indent=1))
    return 0


def server_figures(records: list[dict]) -> dict:
    """The server's own figures summed over a run's requests: prefill and decode tokens and times, drafts."""
    timings = [r["timings"] for r in records if r.get("timings")]
    total = {
        k: sum(t.get(k, 0) for t in timings)
        for k in ("prompt_n", "cache_n", "prompt_ms", "predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")
    }
    total["requests"] = len(records)
    total["decode_tok_s"] = (
        round(1e3 * total["predicted_n"] / total["predicted_ms"], 2) if total["predicted_ms"] else None
    )
    return total


def shape(record: dict) -> tuple:
    """What makes a request a different case for the contract tests: its route, its fields, streamed or not."""
    body = record["body"] if isinstance(record["body"], dict) else {}
    return (
        record["client"],
        record["path"],
        tuple(sorted(body)),
        body.get("stream"),
        json.dumps(body.get("stream_options")),
    )


def save_bodies(requests: list[dict], folder: Path) -> None:
    """One JSONL per client and version of the POST bodies it sent localspec, one per distinct shape."""
    folder.mkdir(parents=True, exist_ok=True)
    seen, kept = set(), []
    for record in requests:
        if record["method"] == "POST" and record.get("client") and shape(record) not in seen:
            seen.add(shape(record))
            kept.append(record)
    for client in sorted({r["client"] for r in kept}):
        mine = [r for r in kept if r["client"] == client]
        path = folder / f"{client}-{mine[0]['version']}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mine))


def webui(work: Path, front: Capture, mode: str = "chat") -> dict:
    """Open WebUI pointed at the proxy, driven by the Playwright script in a venv of its own."""
    import webui_run

    return webui_run.run(work, front, MODEL_NAME, mode)


if __name__ == "__main__":
    sys.exit(main())
