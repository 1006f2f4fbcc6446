"""The EAGLE drafter: chain or tree drafting with a head on the torch backend (EAGLE-1/2/3, `eagle_heads.py`),
MLX (`eagle_mlx.py`, chains) or llama.cpp (EAGLE-3 GGUF heads, `eagle_llama.py`).

Each call first feeds the head the target's features of the newly verified positions (slot j of the head's
cache holds the pair (token j+1, feature j)), then drafts from the head's prediction after the last one.

Chain: k tokens, each picked under the target's sampler settings from the head's logits, with their q rows,
so verification is rejection sampling with the residual. Rejected positions leave the head's cache because
the next call only counts, and overwrites from, what was verified.

Tree (EAGLE-2's dynamic tree, when the backend has tree attention): the `width` best tokens after the last
feature start the tree; at each further depth the `width` leaves with the highest path probability (the
product of the head's probabilities along the path) are expanded in one batched head call, with tree
attention over the head's cache (each node sees the context and its own ancestors), each adding its `width`
best children; finally the `nodes` best-scoring tokens of all form the draft. A tree's tokens are point
masses chosen by the head, so verification tries children in order against the residual (exact). The head
runs the expansion (``head.tree(base)``: torch by an attention mask over its cache, llama.cpp by a sequence
per expanded node) and ranks its outputs (``head.top``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.drafters.base import DEFAULT_TURN, Drafter, DrafterNeeds, Turn, check_fit, head_for
from localspec.drafters.eagle.torch_head import TREE_SLOTS, head_summary, load_eagle_head
from localspec.drafters.feature_feed import FeatureFeed, FedByFeatures
from localspec.drafters.heads.files import head_folder, is_gguf_head
from localspec.drafters.picking import GREEDY, pick_token
from localspec.errors import ConfigError
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft

TREE_WIDTH = 4  # children per expanded node and expanded nodes per depth


@dataclass(frozen=True)
class EagleOptions:
    head: str | None = option(
        None,
        "an EAGLE head: a folder or a downloaded Hub repo (torch, MLX), an eagle3 GGUF (llama.cpp); default: "
        "the model's in models.toml for the backend",
        toml=False,
        kind=str,
    )
    tree: int = option(
        0,
        "draft trees of N tokens (EAGLE-2 dynamic trees, verified with tree attention) instead of chains",
        toml=False,
    )


def build(target, options: EagleOptions, context) -> EagleDrafter:
    if not options.head:
        raise ConfigError(
            "--drafter eagle needs --eagle-head FOLDER|REPO|FILE (an EAGLE-1/2/3 head: config.json + "
            "pytorch_model.bin or model.safetensors; on llama.cpp an eagle3 GGUF, which `localspec convert-eagle` "
            "writes; `localspec train-eagle` makes a head)"
        )
    return EagleDrafter(target, head_folder(options.head), context.seed, tree_nodes=options.tree)


class EagleDrafter(FedByFeatures, Drafter):
    name = "eagle"
    # fed the target's features of the layers its head reads (chains; a tree-drafting one needs tree attention)
    needs = DrafterNeeds(hidden_states=True, feature_layers=True)

    def __init__(
        self,
        target,
        head_folder: Path | None,
        seed: int | None = None,
        tree_nodes: int = 0,
        tree_width: int = TREE_WIDTH,
        head=None,
    ) -> None:
        """``head``: a head already built (the torch MTP layer), else the one in ``head_folder``."""
        if tree_nodes:
            self.needs = DrafterNeeds(hidden_states=True, feature_layers=True, tree_attention=True)
        check_fit(target, self)
        if tree_nodes < 0 or tree_width < 1 or tree_nodes > TREE_SLOTS // 2:
            raise ConfigError(f"--eagle-tree must be 0 (chains) or 1..{TREE_SLOTS // 2} nodes, got {tree_nodes}")
        self.head = head if head is not None else head_for(HEADS, target, "EAGLE heads")(Path(head_folder), target)
        self.target = target
        target.set_feature_layers(self.head.feature_layers)
        self.target_vocab = target.vocab_size
        self.tree_nodes, self.tree_width = tree_nodes, tree_width
        self.rng = np.random.default_rng(seed)
        self.sampling = GREEDY  # the target's sampler settings, this turn's
        self.rows = FeatureFeed()  # slot j of the head's cache: (token j+1, feature j)
        self._last = None  # the head's output after the last fed position
        self._trees = self._tree_tokens = 0

    def describe(self) -> str:
        shape = f"trees of {self.tree_nodes}" if self.tree_nodes else "chains"
        return f"{head_summary(self.head)}, {shape}"

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        """A new turn keeps the head's cache for the part of the conversation that did not change: slot j
        (token j+1, feature j) stays valid while tokens 0..j+1 are the same."""
        self.sampling = turn.sampling
        self.target.set_feature_layers(self.head.feature_layers)  # another drafter may have switched them
        self._catch_up()  # what the last turn handed over belongs to its context
        self.rows.keep(prompt, lookahead=1)
        self._last = None

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        if max_tokens <= 0:
            return EMPTY_DRAFT
        catchup = self._catch_up()
        if self._last is None:
            return EMPTY_DRAFT.with_catchup(catchup)
        draft = self._tree(max_tokens) if self.tree_nodes else self._chain(max_tokens)
        return draft.with_catchup(catchup)

    def _put(self, context: Sequence[int], rows: np.ndarray, end: int) -> int:
        """Feature rows [n, F] of positions end.. into the head's cache, paired with tokens end+1.."""
        self.head.lo = self.rows.first
        n = min(len(rows), len(context) - 1 - end)
        if n <= 0:
            return 0
        out = self.head.step(context[end + 1 : end + 1 + n], self.head.fuse(rows[:n]), end)
        self._last = out[-1:]
        return n

    def _chain(self, k: int) -> Draft:
        sampling = self.sampling
        tokens, rows_q, out, at = [], [], self._last, self.rows.end
        for i in range(k):
            token = pick_token(self.head.logits(out)[0], sampling, self.rng, self.target_vocab, rows_q)
            tokens.append(token)
            if i + 1 < k:
                out = self.head.step([token], out, at + i)[-1:]
        return Draft.chain(tokens, np.stack(rows_q) if rows_q else None)

    def _tree(self, depth: int) -> Draft:
        head, width = self.head, self.tree_width
        depth = min(depth, head.max_tree_depth(width))  # the head's cache has room for so many expanded nodes
        base = self.rows.end  # the slot (and position) the pending token's pair will take
        values, indices = head.top(self._last, width)
        tokens = [int(t) for t in indices[0]]
        parents, depths = [-1] * width, [1] * width
        scores = [float(v) for v in values[0]]
        outs: dict[int, object] = {}  # expanded node -> the head's output after it
        frontier, tree = list(range(width)), head.tree(base)
        try:
            for d in range(1, depth):
                inputs = [self._last if parents[node] < 0 else outs[parents[node]] for node in frontier]
                out = tree.step([tokens[node] for node in frontier], inputs, frontier, parents, base + d - 1)
                values, indices = head.top(out, width)
                candidates = []
                for r, node in enumerate(frontier):
                    outs[node] = out[r : r + 1]
                    for value, token in zip(values[r].tolist(), indices[r].tolist(), strict=False):
                        tokens.append(int(token))
                        parents.append(node)
                        depths.append(d + 1)
                        scores.append(scores[node] + min(value, 0.0))
                        candidates.append(len(tokens) - 1)
                frontier = sorted(candidates, key=lambda i: -scores[i])[:width]
        finally:
            tree.end()
        # the best-scoring tokens; a child never scores above its parent, so every parent is kept too
        keep = sorted(range(len(tokens)), key=lambda i: (-scores[i], depths[i]))[: self.tree_nodes]
        keep.sort(key=lambda i: (depths[i], -scores[i]))
        index = {old: new for new, old in enumerate(keep)}
        self._trees += 1
        self._tree_tokens += len(keep)
        return Draft(tuple(tokens[i] for i in keep), tuple(-1 if parents[i] < 0 else index[parents[i]] for i in keep))

    def close(self) -> None:
        close = getattr(self.head, "close", None)
        if close is not None:
            close()

    def end(self) -> dict:
        out = {"eagle_positions_fed": self.rows.fed, "eagle_head": head_summary(self.head)}
        if self._trees:
            out["mean_tree_tokens"] = round(self._tree_tokens / self._trees, 2)
        return out


def _llama_head(path: Path, target):
    """An EAGLE-3 head for a llama.cpp target: a GGUF file of architecture eagle3 (eagle_llama.py)."""
    from localspec.drafters.eagle.llama_head import LlamaEagle3Head

    if path.is_dir():  # a downloaded repo holding the GGUF head
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            path = found[0]
    if not is_gguf_head(path):
        raise ConfigError(
            f"{path}: on llama.cpp an EAGLE head is a GGUF file (architecture eagle3); "
            f"`localspec convert-eagle {path} --target MODEL.gguf -o HEAD.gguf` writes one from a Hugging Face "
            f"EAGLE-3 folder, or run this head with --backend torch"
        )
    return LlamaEagle3Head(path, target)


def _mlx_head(folder: Path, target):
    """An EAGLE head on the MLX backend (chains; mlx_head.py)."""
    from localspec.drafters.eagle.mlx_head import MlxEagleHead

    return MlxEagleHead(folder, target)


# the head loader per backend (the table row's; its keys are the backends eagle runs on)
HEADS = {"llama.cpp": _llama_head, "mlx": _mlx_head, "torch": load_eagle_head}
