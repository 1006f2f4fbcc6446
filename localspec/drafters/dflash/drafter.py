"""DFlash and DSpark drafting (`--drafter dflash`, `--drafter dspark`): one forward of a small block-diffusion
head drafts a whole block. Heads: the released Hugging Face layout on torch (dflash_torch.py), llama.cpp's
`dflash` GGUF on llama.cpp (dflash_llama.py; a Hugging Face folder is converted once, dflash_gguf.py).

The head is fed the target's features of the layers it reads for every verified position (its KV cache
holds the context as keys and values of those features). To draft k tokens after the pending token at
position P it runs [pending token, mask, ...] at P.. in one pass; DFlash's row i predicts the token at
P + i, an anchor-first DSpark head's row i the token at P + i + 1, and DSpark adds a Markov bias from the
token before. Each token is picked from its row under the target's sampler settings, with its q row at
T > 0, so verification is min(1, p/q) with the residual; its confidence is DSpark's confidence head where
there is one (the predicted chance of acceptance, which the adaptive controller learns to trust), else the
token's probability under the head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.drafters.base import DEFAULT_TURN, Drafter, DrafterNeeds, Turn, check_fit, head_for
from localspec.drafters.feature_feed import FeatureFeed, FedByFeatures
from localspec.drafters.heads.files import head_folder
from localspec.drafters.picking import GREEDY, pick_token, token_probability
from localspec.errors import ConfigError
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft


@dataclass(frozen=True)
class DFlashOptions:
    head: str | None = option(
        None,
        "the head: a folder or a downloaded Hub repo in the released layout (torch; llama.cpp converts it once), "
        "or a dflash GGUF (llama.cpp); default: the model's in models.toml for the backend",
        toml=False,
        kind=str,
    )


def build(target, options: DFlashOptions, context) -> DFlashDrafter:
    return _build(DFlashDrafter, target, options, context)


def build_dspark(target, options: DFlashOptions, context) -> DFlashDrafter:
    return _build(DSparkDrafter, target, options, context)


def _build(cls, target, options: DFlashOptions, context) -> DFlashDrafter:
    if target is None:
        raise ConfigError(f"the {cls.name} drafter needs a loaded target model")
    if not options.head:
        raise ConfigError(
            f"--drafter {cls.name} needs --{cls.name}-head FOLDER|REPO|FILE.gguf (a {cls.name} head for this "
            f"model; `localspec pull MODEL` fetches the one models.toml names, `localspec train-eagle --layout "
            f"dflash` trains one)"
        )
    return cls(target, load_head(options.head, target), context.seed)


def load_head(spec: str, target):
    """The head for the target's backend (``HEADS``): torch reads the Hugging Face layout, llama.cpp a dflash
    GGUF."""
    from localspec.drafters.heads.files import is_gguf_head

    path = Path(spec).expanduser() if is_gguf_head(spec) else head_folder(spec)
    return head_for(HEADS, target, "DFlash/DSpark heads")(path, target)


def _torch_head(path: Path, target):
    from localspec.drafters.dflash.torch_head import TorchDFlashHead
    from localspec.drafters.heads.files import is_gguf_head

    if is_gguf_head(path):
        raise ConfigError(f"{path.name}: on torch a DFlash head is a Hugging Face folder, not a GGUF file")
    return TorchDFlashHead(path, target)


def _llama_head(path: Path, target):
    from localspec.drafters.dflash.gguf import gguf_head_for
    from localspec.drafters.dflash.llama_head import LlamaDFlashHead
    from localspec.drafters.heads.files import is_gguf_head

    if not is_gguf_head(path):
        path = gguf_head_for(path, target.path)
    return LlamaDFlashHead(path, target)


# the head loader per backend (the table rows' of dflash and dspark; its keys are the backends they run on)
HEADS = {"llama.cpp": _llama_head, "torch": _torch_head}


class DFlashDrafter(FedByFeatures, Drafter):
    name = "dflash"
    needs = DrafterNeeds(hidden_states=True, feature_layers=True)

    def __init__(self, target, head, seed: int | None = None) -> None:
        try:
            check_fit(target, self)
            kind = head.layout.kind
            if kind != self.name:
                raise ConfigError(f"this is a {kind} head: use --drafter {kind} --{kind}-head with it")
        except ConfigError:
            if hasattr(head, "close"):
                head.close()
            raise
        self.target, self.head, self.layout = target, head, head.layout
        target.set_feature_layers(head.feature_layers)
        self.vocab = target.vocab_size
        self.rng = np.random.default_rng(seed)
        self.sampling = GREEDY  # the target's sampler settings, this turn's
        self.rows = FeatureFeed()  # slot j of the head's cache: the target's features of position j
        self._blocks = self._block_rows = 0

    def describe(self) -> str:
        extra = ", a confidence head" if self.layout.confidence else ""
        return f"{self.layout.kind} head, blocks of up to {self.layout.block_size}{extra}"

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        """A new turn keeps the head's cache for the part of the conversation that did not change."""
        self.sampling = turn.sampling
        self.target.set_feature_layers(self.head.feature_layers)  # another drafter may have switched them
        self._catch_up()
        self.rows.keep(prompt, lookahead=0)

    def _put(self, context: Sequence[int], rows: np.ndarray, end: int) -> int:
        self.head.lo = self.rows.first
        self.head.inject(rows, end)
        return len(rows)

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        k = min(max_tokens, self.layout.max_draft)
        if k <= 0:
            return EMPTY_DRAFT
        catchup = self._catch_up()
        pos = len(context) - 1  # the pending token's position: the head must hold every one before it
        if self.rows.first is None or self.rows.end != pos or pos <= self.rows.first:
            return EMPTY_DRAFT.with_catchup(catchup)
        return self._block(context, k).with_catchup(catchup)

    def _block(self, context: Sequence[int], k: int) -> Draft:
        """k tokens after the pending token from one pass of the head."""
        pos = len(context) - 1
        block = self.head.block(int(context[-1]), pos, self.layout.rows_for(k))
        self._blocks, self._block_rows = self._blocks + 1, self._block_rows + self.layout.rows_for(k)
        sampling = self.sampling
        tokens, rows_q, confidence, prev = [], [], [], int(context[-1])
        for i in range(k):
            logits, conf = block.row(i, prev)
            prev = pick_token(logits, sampling, self.rng, self.vocab, rows_q)
            tokens.append(prev)
            confidence.append(conf if conf is not None else _probability(logits, prev, rows_q))
        return Draft.chain(tokens, np.stack(rows_q) if rows_q else None, confidence)

    def end(self) -> dict:
        out = {"dflash_positions_fed": self.rows.fed}
        if self._blocks:
            out["mean_block_rows"] = round(self._block_rows / self._blocks, 2)
        return out

    def close(self) -> None:
        close = getattr(self.head, "close", None)
        if close is not None:
            close()


class DSparkDrafter(DFlashDrafter):
    name = "dspark"


def _probability(logits: np.ndarray, token: int, rows_q: list) -> float:
    """The head's probability of its token: q's at T > 0, else the softmax of its logits."""
    return float(rows_q[-1][token]) if rows_q else token_probability(logits, token)
