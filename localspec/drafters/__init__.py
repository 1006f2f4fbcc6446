"""Drafter names -> drafter objects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localspec.backends.base import Backend
from localspec.drafters.base import Drafter, NoDrafter
from localspec.drafters.ngram import N_MAX, N_MIN
from localspec.errors import ConfigError

DRAFTERS = ("none", "ngram", "suffix", "draft", "eagle", "random")
# "random" proposes random tokens: useless on purpose, a floor for `localspec bench` and the controller


@dataclass(frozen=True)
class DrafterOptions:
    ngram_min: int = N_MIN
    ngram_max: int = N_MAX
    suffix: dict = field(default_factory=dict)  # SuffixParams fields
    suffix_cache_dir: str | None = None
    draft_model: str | None = None  # path of the draft model's file (--drafter draft)
    draft_name: str | None = None  # how the user named it, for messages
    known_drafts: tuple[str, ...] = ()  # the draft models models.toml recommends for the target
    # a model name -> its file on disk for the target's backend (the session's resolver: the one place)
    find_model: Callable[[str], str] | None = field(default=None, compare=False, repr=False)
    eagle_head: str | None = None  # folder or Hub repo of an EAGLE head (--drafter eagle)
    eagle_tree: int = 0  # tokens per EAGLE tree draft (0: chains)
    seed: int | None = None


def check_drafter_name(name: str) -> None:
    if name not in DRAFTERS:
        raise ConfigError(f"unknown drafter {name!r}; choose one of: {', '.join(DRAFTERS)}")


def make_drafter(name: str, backend: Backend | None = None, options: DrafterOptions = DrafterOptions()) -> Drafter:
    check_drafter_name(name)
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        from localspec.drafters.ngram import NgramDrafter

        return NgramDrafter(options.ngram_min, options.ngram_max)
    if name == "draft":
        return _draft_model(backend, options)
    if name == "eagle":
        from localspec.drafters.eagle import EagleDrafter

        if not options.eagle_head:
            raise ConfigError(
                "--drafter eagle needs --eagle-head FOLDER|REPO (an EAGLE-1/2/3 head: config.json + "
                "pytorch_model.bin or model.safetensors; `localspec train-eagle` makes one)"
            )
        return EagleDrafter(backend, eagle_folder(options.eagle_head), options.seed, tree_nodes=options.eagle_tree)
    if name == "random":
        from localspec.drafters.random import RandomDrafter

        return RandomDrafter(backend.vocab_size if backend is not None else 32000, options.seed)
    # the suffix drafter
    from localspec.drafters.suffix import SuffixDrafter, SuffixParams
    from localspec.drafters.suffix_store import AnswerStore

    params = SuffixParams(**options.suffix)
    store = None
    if backend is not None and params.cache_tokens > 0:
        directory = Path(options.suffix_cache_dir) if options.suffix_cache_dir else None
        store = AnswerStore.for_tokenizer(backend.tokenizer_key(), params.cache_tokens, directory)
    return SuffixDrafter(params, store)


def eagle_folder(spec: str) -> Path:
    """A head folder on disk, or a Hub repo id already downloaded into the Hugging Face cache."""
    path = Path(spec).expanduser()
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, local_files_only=True))
    except Exception as exc:
        raise ConfigError(
            f"EAGLE head {spec!r} is neither a folder nor a downloaded Hub repo ({type(exc).__name__}); "
            f"`localspec pull MODEL --backend torch` downloads a model's head"
        ) from exc


def _draft_model(target: Backend | None, options: DrafterOptions) -> Drafter:
    from localspec.backends import load_backend
    from localspec.drafters.draft_model import DraftModelDrafter
    from localspec.vocab import shared_vocab

    if target is None:
        raise ConfigError("the draft drafter needs a loaded target model")
    path = options.draft_model
    if not path and options.known_drafts and options.find_model:  # the target's recommended draft
        path = options.find_model(options.known_drafts[0])
    if not path:
        listed = ", ".join(options.known_drafts) or "none listed in models.toml for this model"
        raise ConfigError(
            f"--drafter draft needs --draft-model NAME|PATH (a smaller model with the same "
            f"tokenizer); known drafts: {listed}"
        )
    draft = load_backend(target.name, path, n_ctx=target.n_ctx, n_threads=getattr(target, "n_threads", None))
    try:
        shared = shared_vocab(target, draft, options.known_drafts)
    except BaseException:
        draft.close()
        raise
    return DraftModelDrafter(draft, shared, target.vocab_size, options.seed)
