"""`localspec export --engine vllm|sglang MODEL`: the command that serves the same model with the equivalent
speculation on a cluster engine, for when one machine is no longer enough.

The target is the model's Hugging Face checkpoint (`[models.NAME.torch]` in models.toml: cluster engines
serve those, not GGUFs). The drafter maps to the engine's own method: suffix → vLLM's suffix decoding,
ngram → ngram / NGRAM, a draft model → draft_model / STANDALONE, EAGLE-3 → eagle3 / EAGLE3, MTP → mtp /
NEXTN, DFlash → SGLang's DFLASH, Medusa and MLP speculators → vLLM's medusa / mlp_speculator. K is
`--draft-tokens` if given, else what the local controller settled on in the saved chats of this model and
drafter (tokens verified per drafting step), else the method's default (its drafter table row). Nothing is
run: the command is printed, with a comment saying where each part came from.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from localspec.drafters.ngram import NgramOptions
from localspec.drafters.table import DRAFTERS, head_drafters
from localspec.errors import ConfigError
from localspec.models.registry import ModelEntry, Registry

ENGINES = ("vllm", "sglang")
# each drafter's cluster method and default K, from its table row (ClusterMethod)
METHODS = {kind.name: kind.cluster for kind in DRAFTERS.values() if kind.cluster}


@dataclass(frozen=True)
class Export:
    engine: str
    model: str  # the models.toml name
    repo: str  # the target's Hugging Face checkpoint
    drafter: str
    k: int
    k_from: str  # where K came from, in words
    draft_repo: str | None = None  # a draft model's or head's checkpoint


def settled_k(chats, model: str, drafter: str) -> tuple[int, int] | None:
    """(K, turns): the draft tokens the controller verified per drafting step in the saved chats of
    ``model`` with ``drafter`` (None when none drafted)."""
    drafted = steps = turns = 0
    for chat in chats:
        if chat.model != model:
            continue
        for stats in chat.stats:
            if not stats or stats.get("method") != drafter or not stats.get("drafted"):
                continue
            plain = (stats.get("speclen") or {}).get("plain_steps") or 0
            drafted += stats["drafted"]
            steps += max(stats.get("steps", 0) - plain, 1)
            turns += 1
    return (max(1, round(drafted / steps)), turns) if turns else None


def plan(registry: Registry, model: str, drafter: str | None, engine: str, k: int | None, chats=()) -> Export:
    """What to export (drafter None: the model's first recommended drafter the engine has), or a
    ConfigError saying what is missing and what to do."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    entry = registry.get(model)
    if drafter is None:
        runs = [d for d in entry.drafters if METHODS.get(d.split("+")[-1], (None, None))[ENGINES.index(engine)]]
        drafter = runs[0] if runs else "ngram"
    if not entry.torch_repo:
        raise ConfigError(
            f"{model}: models.toml names no Hugging Face checkpoint for it ([models.{model}.torch] repo), which "
            f"{engine} serves (it does not serve the GGUF localspec runs on llama.cpp); add one to your models.toml"
        )
    member = drafter.split("+")[-1]  # a chain: the engine runs its model drafter
    if member not in METHODS and member != "none":
        raise ConfigError(
            f"{engine} has no counterpart of localspec's {member!r} drafter that export knows; "
            f"export one of: none, {', '.join(m for m in METHODS if METHODS[m][ENGINES.index(engine)])}"
        )
    if member != "none" and METHODS[member][ENGINES.index(engine)] is None:
        other = ENGINES[1 - ENGINES.index(engine)]
        raise ConfigError(f"{engine} has no {member} method; `--engine {other}` has one, or export --drafter ngram")
    draft_repo = _draft_repo(registry, entry, member)
    if k is not None:
        k_from = "--draft-tokens"
    elif (found := settled_k(chats, model, drafter)) is not None:
        k, turns = found
        k_from = f"what the controller verified per drafting step in {turns} saved chat turn(s)"
    else:
        k, k_from = (
            METHODS[member].k if member in METHODS else 0,
            "the method's default (no saved chat of this model drafted with it)",
        )
    return Export(engine, model, entry.torch_repo, member, k, k_from, draft_repo)


def _draft_repo(registry: Registry, entry: ModelEntry, member: str) -> str | None:
    if member == "draft":
        for name in entry.drafts:
            repo = registry.get(name).torch_repo
            if repo:
                return repo
        raise ConfigError(f"{entry.name}: none of its draft models in models.toml has a Hugging Face checkpoint")
    if member in head_drafters():  # a head models.toml names per backend
        repo = entry.head(member, "torch")
        if not repo:
            raise ConfigError(
                f"{entry.name}: models.toml names no {member} head for it ([models.{entry.name}.{member}])"
            )
        return repo
    return None


def command(export: Export) -> list[str]:
    """The lines to print: comments on the choices, then the command."""
    notes = [f"# {export.model}: {export.repo} with {export.drafter} speculation"]
    if export.drafter != "none":
        notes.append(f"# K = {export.k}: {export.k_from}")
    if export.engine == "vllm":
        return [*notes, shlex.join(_vllm(export))]
    return [*notes, shlex.join(_sglang(export))]


def _vllm(e: Export) -> list[str]:
    args = ["vllm", "serve", e.repo]
    if e.drafter == "none":
        return args
    config: dict = {"method": METHODS[e.drafter][0], "num_speculative_tokens": e.k}
    if e.draft_repo:
        config["model"] = e.draft_repo
    if e.drafter == "ngram":
        config.update(prompt_lookup_min=NgramOptions.min, prompt_lookup_max=NgramOptions.max)  # localspec's sizes
    return [*args, "--speculative-config", json.dumps(config)]


def _sglang(e: Export) -> list[str]:
    args = ["python", "-m", "sglang.launch_server", "--model-path", e.repo]
    if e.drafter == "none":
        return args
    args += ["--speculative-algorithm", METHODS[e.drafter][1]]
    if e.draft_repo:
        args += ["--speculative-draft-model-path", e.draft_repo]
    if e.drafter == "ngram":
        return [*args, "--speculative-num-draft-tokens", str(e.k)]
    return [*args, "--speculative-num-steps", str(e.k), "--speculative-eagle-topk", "1"] + [
        "--speculative-num-draft-tokens",
        str(e.k + 1),
    ]
