"""The drafter table: the one place a drafter is registered. A row names the drafter, says in a line what it
does, and points at its module's options dataclass and builder; the command line's flags, models.toml's
tables, the chat's /help, the README's table and docs/drafters.md's are derived from it
(tests/drafters/test_drafter_table.py checks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

from localspec.backends.base import Backend
from localspec.drafters import draft_model, ngram, random
from localspec.drafters.base import Drafter, NoDrafter
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.context import DrafterContext
from localspec.drafters.dflash import drafter as dflash
from localspec.drafters.eagle import drafter as eagle
from localspec.drafters.lookahead import drafter as lookahead
from localspec.drafters.mtp import drafter as mtp
from localspec.drafters.multihead import medusa, mlp_speculator
from localspec.drafters.suffix import drafter as suffix
from localspec.errors import ConfigError
from localspec.models.hub import HeadRelease
from localspec.options import OptionInfo, describe

ALL_BACKENDS = ("llama.cpp", "mlx", "torch")


class ClusterMethod(NamedTuple):
    """What `localspec export` writes for a drafter: the cluster engines' own name of the method (None: the
    engine has none) and K when no saved chat drafted with it."""

    vllm: str | None  # vLLM's speculative_config method
    sglang: str | None  # SGLang's --speculative-algorithm
    k: int


@dataclass(frozen=True)
class DrafterKind:
    name: str
    summary: str  # one line for --help, /help and the README
    drafter: type[Drafter]  # its class: ``needs`` says what it requires of the target backend
    options: type | None  # its options dataclass (None: it has none)
    build: Callable[[Backend | None, object, DrafterContext], Drafter]
    role: str = ""  # in a chain (COPY+MODEL): "copy" (a free lookup) or "model" (drafting costs forwards)
    # the backends it runs on; a head drafter's are the keys of its family's per-backend loaders (HEADS)
    backends: tuple[str, ...] = ALL_BACKENDS
    # models.toml names its head per backend ([models.NAME.<drafter>]); `pull` fetches it as this says
    release: HeadRelease | None = None
    trains: bool = False  # `localspec train-drafter --kind NAME` makes its heads
    cluster: ClusterMethod | None = None  # what `localspec export` writes (None: no cluster engine runs it)

    @property
    def head(self) -> bool:
        return self.release is not None

    @property
    def trees(self) -> bool:
        """Whether it drafts trees on request (its options have ``tree``: bench's NAME#N)."""
        return self.options is not None and "tree" in {f.name for f in fields(self.options)}

    def option_infos(self) -> list[OptionInfo]:
        return describe(self.options, self.name) if self.options else []

    def needs_in_words(self) -> str:
        needs = self.drafter.needs
        words = {
            "rollback": "cache rollback",
            "hidden_states": "hidden states",
            "feature_layers": "chosen layers",
            "tree_attention": "tree attention",
        }
        shown = [text for key, text in words.items() if getattr(needs, key)]
        return ", ".join(shown) or "—"


def _plain(target, options, context) -> Drafter:
    return NoDrafter()


def _weights(backend: str) -> tuple[str, ...]:
    return ("*.gguf",) if backend == "llama.cpp" else ("*.safetensors", "*.bin", "*.pt")


def _block_gguf(folder, target):
    from localspec.drafters.dflash.gguf import gguf_head_for  # noqa: PLC0415 - the gguf writer, on a pull only

    return gguf_head_for(folder, target)


WEIGHTS = HeadRelease(_weights)  # EAGLE, Medusa and MLP heads: a GGUF for llama.cpp, else the weights
BLOCKS = HeadRelease(lambda backend: ("*.safetensors", "*.gguf"), _block_gguf)  # DFlash, DSpark: converted


DRAFTERS: dict[str, DrafterKind] = {
    kind.name: kind
    for kind in (
        DrafterKind("none", "plain decoding, no drafts: the baseline", NoDrafter, None, _plain),
        DrafterKind(
            "ngram",
            "prompt lookup: copies what followed the last n tokens before",
            ngram.NgramDrafter,
            ngram.NgramOptions,
            ngram.build,
            "copy",
            cluster=ClusterMethod("ngram", "NGRAM", 5),
        ),
        DrafterKind(
            "suffix",
            "suffix trees over this chat and past answers (the default)",
            suffix.SuffixDrafter,
            suffix.SuffixOptions,
            suffix.build,
            "copy",
            cluster=ClusterMethod("suffix", None, 16),
        ),
        DrafterKind(
            "draft",
            "a smaller model with the same tokenizer",
            draft_model.DraftModelDrafter,
            draft_model.DraftOptions,
            draft_model.build,
            "model",
            cluster=ClusterMethod("draft_model", "STANDALONE", 5),
        ),
        DrafterKind(
            "eagle",
            "an EAGLE-1/2/3 head on the target's hidden states",
            eagle.EagleDrafter,
            eagle.EagleOptions,
            eagle.build,
            "model",
            tuple(eagle.HEADS),
            release=WEIGHTS,
            trains=True,
            cluster=ClusterMethod("eagle3", "EAGLE3", 4),
        ),
        DrafterKind(
            "mtp",
            "the target's own MTP layer (GGUFs that carry it: Qwen3.5, GLM-4.5; MiMo on torch) or a Gemma-4 assistant",
            mtp.MtpDrafter,
            mtp.MtpOptions,
            mtp.build,
            "model",
            tuple(mtp.BUILDS),
            cluster=ClusterMethod("mtp", "NEXTN", 2),
        ),
        DrafterKind(
            "dflash",
            "a DFlash block-diffusion head: one pass drafts a block, on the target's hidden states",
            dflash.DFlashDrafter,
            dflash.DFlashOptions,
            dflash.build,
            "model",
            tuple(dflash.HEADS),
            release=BLOCKS,
            cluster=ClusterMethod("dflash", "DFLASH", 8),  # vLLM and SGLang both run DFlash heads
        ),
        DrafterKind(
            "dspark",
            "a DSpark head: DFlash with a Markov head within the block and a confidence head",
            dflash.DSparkDrafter,
            dflash.DFlashOptions,
            dflash.build_dspark,
            "model",
            tuple(dflash.HEADS),
            release=BLOCKS,
        ),
        DrafterKind(
            "medusa",
            "Medusa heads on the target's last hidden state, one per position ahead (torch)",
            medusa.MedusaDrafter,
            medusa.MedusaOptions,
            medusa.build,
            "model",
            tuple(medusa.HEADS),
            release=WEIGHTS,
            trains=True,
            cluster=ClusterMethod("medusa", None, 4),
        ),
        DrafterKind(
            "mlp",
            "an MLP speculator: small stages chained on the last hidden state and the drafted tokens (torch)",
            mlp_speculator.MlpDrafter,
            mlp_speculator.MlpOptions,
            mlp_speculator.build,
            "model",
            tuple(mlp_speculator.HEADS),
            release=WEIGHTS,
            trains=True,
            cluster=ClusterMethod("mlp_speculator", None, 3),
        ),
        DrafterKind(
            "lookahead",
            "lookahead decoding: Jacobi iterations in a window and a pool of the n-grams they yield",
            lookahead.LookaheadDrafter,
            lookahead.LookaheadOptions,
            lookahead.build,
            "",
            ("llama.cpp", "torch"),  # its tree needs tree attention, which the MLX backend lacks
        ),
        DrafterKind(
            "random",
            "random tokens: the floor bench and the controller are judged by",
            random.RandomDrafter,
            None,
            random.build,
        ),
    )
}


def drafter_kind(name: str) -> DrafterKind:
    try:
        return DRAFTERS[name]
    except KeyError:
        raise ConfigError(f"unknown drafter {name!r}; choose one of: {', '.join(DRAFTERS)}") from None


def head_drafters() -> tuple[str, ...]:
    """The drafters whose heads models.toml names per backend."""
    return tuple(kind.name for kind in DRAFTERS.values() if kind.head)


def head_releases() -> dict[str, HeadRelease]:
    """How `pull` fetches each head drafter's heads (models/hub.py)."""
    return {kind.name: kind.release for kind in DRAFTERS.values() if kind.release is not None}


def chain_members(name: str) -> tuple[DrafterKind, ...]:
    """The drafter kinds a --drafter name stands for: one, or a chain COPY+MODEL (checked)."""
    parts = name.split("+")
    if len(parts) == 1:
        return (drafter_kind(name),)
    copies = [k for k, kind in DRAFTERS.items() if kind.role == "copy"]
    models = [k for k, kind in DRAFTERS.items() if kind.role == "model"]
    if len(parts) != 2 or parts[0] not in copies or parts[1] not in models:
        raise ConfigError(
            f"drafter chain {name!r}: a chain is COPY+MODEL, a copy drafter ({', '.join(copies)}) then a model "
            f"drafter ({', '.join(models)}), e.g. suffix+draft"
        )
    return drafter_kind(parts[0]), drafter_kind(parts[1])


def runs_on(name: str, backend: str) -> bool:
    """Whether every member of the --drafter name ``name`` runs on ``backend``."""
    return all(backend in kind.backends for kind in chain_members(name))


@dataclass(frozen=True)
class DrafterSetup:
    """Every drafter's options for a run (flags over models.toml over defaults) and its context: what builds
    any drafter by name, at the start and on a switch mid-chat."""

    options: dict = field(default_factory=dict)  # drafter name -> its options (missing: the defaults)
    context: DrafterContext = DrafterContext()

    def options_of(self, name: str):
        kind = drafter_kind(name)
        return self.options.get(name) or (kind.options() if kind.options else None)

    def with_options(self, name: str, **values) -> DrafterSetup:
        """The setup with some of one drafter's options replaced (e.g. a bench method's own cache folder)."""
        return replace(self, options={**self.options, name: replace(self.options_of(name), **values)})

    @staticmethod
    def tree_drafters() -> tuple[str, ...]:
        """The drafters that draft trees on request (bench's NAME#N)."""
        return tuple(kind.name for kind in DRAFTERS.values() if kind.trees)

    def build(self, name: str, target: Backend | None = None, **values) -> Drafter:
        """The drafter (or chain) ``name``; ``values`` replace options of the drafter (in a chain: of each
        member that has them)."""
        kinds = chain_members(name)
        if len(kinds) == 1:
            setup = self.with_options(name, **values) if values else self
            return kinds[0].build(target, setup.options_of(name), setup.context)
        built: list[Drafter] = []
        try:
            for kind in kinds:
                own = {k: v for k, v in values.items() if kind.options and k in {f.name for f in fields(kind.options)}}
                built.append(self.build(kind.name, target, **own))
        except BaseException:
            for drafter in built:
                drafter.close()
            raise
        return ChainDrafter(*built)


def summary_table() -> str:
    """The README's short drafter table: name, what drafts, backends (tests/drafters/test_drafter_table.py keeps the
    README's copy equal to this)."""
    lines = ["| `--drafter` | what drafts | backends |", "|---|---|---|"]
    lines += [f"| `{kind.name}` | {kind.summary} | {', '.join(kind.backends)} |" for kind in DRAFTERS.values()]
    return "\n".join(lines)


def markdown_table() -> str:
    """docs/drafters.md's drafter table with every option (tests/drafters/test_drafter_table.py keeps its copy
    equal)."""
    lines = [
        "| `--drafter` | what drafts | needs of the backend | its options: flag, models.toml key (default) |",
        "|---|---|---|---|",
    ]
    for kind in DRAFTERS.values():
        shown = []
        for i in kind.option_infos():
            where = ", ".join(x for x in (f"`{i.flag}`" if i.flag else "", f"`{i.name}`" if i.toml else "") if x)
            if where:
                shown.append(f"{where} ({'none' if i.default is None else i.default}): {i.help}")
        lines.append(f"| `{kind.name}` | {kind.summary} | {kind.needs_in_words()} | {'<br>'.join(shown) or '—'} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m localspec.drafters.table [--short]
    import sys

    print(summary_table() if "--short" in sys.argv[1:] else markdown_table())
