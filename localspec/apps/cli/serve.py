"""`localspec serve`: an OpenAI-compatible API with speculative decoding (localspec/apps/server/)."""

from __future__ import annotations

from dataclasses import replace

from localspec.config import CACHE_RAM_MIB, CACHE_RAM_SHARE

NAMES = ("serve",)


def add_parser(sub, common) -> None:
    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="serve an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models, /health, "
        "/metrics) with speculative decoding",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1; others need --api-key)")
    serve.add_argument("--port", type=int, default=8088, help="port (8088)")
    serve.add_argument("--api-key", help="require Authorization: Bearer KEY (needed off loopback)")
    serve.add_argument("--cors", action="store_true", help="send CORS headers (browsers on other origins)")
    serve.add_argument(
        "--cache-ram",
        type=int,
        metavar="MIB",
        help=f"RAM for saved conversation states, so that clients taking turns prefill only new tokens "
        f"(default: {CACHE_RAM_SHARE * 100:.0f}%% of the memory free after loading, at most {CACHE_RAM_MIB}; "
        f"0: keep only the live one)",
    )
    serve.add_argument(
        "--no-persist", action="store_true", help="keep served content off disk (the suffix cache is read, not written)"
    )
    serve.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="answer N requests at once, their steps batched together; the context is split N ways (llama.cpp, torch; "
        "default 1: one at a time, with conversation states in RAM)",
    )


def run(args) -> int:
    from localspec.apps.cli.common import read_settings
    from localspec.apps.server.run import serve

    settings = read_settings(args)
    if args.no_persist:
        settings = replace(settings, drafters=settings.drafters.with_options("suffix", persist=False))
    cache_ram = None if args.cache_ram is None else args.cache_ram * 2**20
    return serve(settings, args.host, args.port, args.api_key, args.cors, cache_ram, parallel=args.parallel)
