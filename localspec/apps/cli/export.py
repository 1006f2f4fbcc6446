"""`localspec export`: print the command that serves a model with the same speculation on vLLM or SGLang (the
planning lives in localspec/apps/export.py)."""

from __future__ import annotations

from localspec.errors import ConfigError

NAMES = ("export",)


def add_parser(sub, common) -> None:
    export = sub.add_parser(
        "export",
        help="print the command that serves MODEL with the same speculation on vLLM or SGLang (past one machine)",
    )
    export.add_argument("model", help="a name from models.toml (with a Hugging Face checkpoint)")
    export.add_argument("--engine", required=True, choices=("vllm", "sglang"), help="the cluster engine")
    export.add_argument(
        "--drafter",
        help="suffix, ngram, draft, eagle, mtp, dflash or none (default: the model's first that the engine has)",
    )
    export.add_argument(
        "--draft-tokens",
        "-k",
        type=int,
        help="K (default: what the controller settled on in your saved chats of this model and drafter)",
    )


def run(args) -> int:
    from localspec.apps.export import command, plan
    from localspec.chat.store import saved_chats
    from localspec.models.registry import load_registry

    if args.draft_tokens is not None and args.draft_tokens < 1:
        raise ConfigError(f"--draft-tokens must be at least 1, got {args.draft_tokens}")
    chosen = plan(load_registry(), args.model, args.drafter, args.engine, args.draft_tokens, saved_chats())
    print("\n".join(command(chosen)))
    return 0
