"""Drafting from heads on the target's last hidden state (Medusa, MLP speculators): the heads read the
target's final hidden row h at the last cached position (the row its LM head turned into the pending token)
and draft the tokens after the pending one, stage by stage.

A head set is ``prepare(h) -> state`` and ``stage(state, token, i) -> (logits, state)``: stage i reads the
token before the one it predicts (the pending token for stage 0, its parent in the draft after that) and
the state the stage before it left (Medusa's heads all read h and ignore the token; an MLP speculator's
stages chain a state through the drafted tokens). ``depth`` is how many stages there are.

Chain: each token is picked from its stage's logits under the target's sampler settings, with its q row at
T > 0, so verification is rejection sampling with the residual. Tree (``tree_nodes``, the backend's tree
attention): best-first over paths, a path scored by the sum of its tokens' log-probabilities under their
stages; the best unexpanded candidate joins the tree and adds its stage's ``width`` best next tokens, until
the tree holds ``tree_nodes``. A tree's tokens are point masses, which verification checks child by child
against the residual (exact at any temperature).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from localspec.drafters.base import DEFAULT_TURN, UNTIMED, Costs, Drafter, DrafterNeeds, Turn, check_fit, head_for
from localspec.drafters.picking import GREEDY, pick_token, token_probability
from localspec.errors import ConfigError, ModelError
from localspec.types import Draft, Step

TREE_WIDTH = 4  # the best next tokens a tree node adds as candidates
MAX_TREE = 64


class MultiHeadDrafter(Drafter):
    needs = DrafterNeeds(hidden_states=True)

    def __init__(self, target, heads, seed: int | None = None, tree_nodes: int = 0, width: int = TREE_WIDTH) -> None:
        if tree_nodes:
            self.needs = DrafterNeeds(hidden_states=True, tree_attention=True)
        check_fit(target, self)
        if not 0 <= tree_nodes <= MAX_TREE:
            raise ConfigError(f"--{self.name}-tree must be 0 (chains) or 1..{MAX_TREE} nodes, got {tree_nodes}")
        self.target, self.heads = target, heads
        self.tree_nodes, self.width = tree_nodes, width
        self.vocab = target.vocab_size
        self.rng = np.random.default_rng(seed)
        self.sampling = GREEDY  # the target's sampler settings, this turn's
        self._row: np.ndarray | None = None  # the target's last hidden row ...
        self._at = -1  # ... and its position
        self.drafted = self.trees = 0

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        self.sampling = turn.sampling
        self.target.set_feature_layers((-1,))  # the final normed row; another drafter may have switched them
        self._row, self._at = None, -1

    def costs(self, context: Sequence[int]) -> Costs:
        return UNTIMED  # a head pass per stage: timed by the controller on the first (short) draft

    def observe(self, step: Step) -> None:
        features = step.features
        if features is not None and len(features.rows):
            self._row = np.asarray(features.rows[-1], np.float32)
            self._at = features.start + len(features.rows) - 1

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        k = min(max_tokens, self.heads.depth)
        if k <= 0 or self._row is None or self._at != len(context) - 2:
            return Draft()  # no row of the position before the pending token (a turn's first step with a cached prompt)
        state = self.heads.prepare(self._row)
        draft = self._tree(state, int(context[-1]), k) if self.tree_nodes else self._chain(state, int(context[-1]), k)
        self.drafted += len(draft)
        return draft

    def _chain(self, state, token: int, k: int) -> Draft:
        sampling = self.sampling
        tokens, q_rows, confidence = [], [], []
        for i in range(k):
            logits, state = self.heads.stage(state, token, i)
            token = pick_token(logits, sampling, self.rng, self.vocab, q_rows)
            tokens.append(token)
            confidence.append(token_probability(logits, token))
        return Draft.chain(tokens, np.stack(q_rows) if q_rows else None, confidence)

    def _tree(self, state, token: int, depth: int) -> Draft:
        tokens, parents, depths, scores = [], [], [], []
        heap: list = []  # (-score, order, parent node, depth, token, the state its stage left)
        order = 0

        def expand(node: int, state, token: int, d: int, base: float) -> None:
            nonlocal order
            logits, after = self.heads.stage(state, token, d)
            logp = _log_softmax(logits)
            for t in np.argpartition(-logp, self.width)[: self.width]:
                heapq.heappush(heap, (-(base + float(logp[t])), order, node, d + 1, int(t), after))
                order += 1

        expand(-1, state, token, 0, 0.0)
        while heap and len(tokens) < self.tree_nodes:
            neg, _, parent, d, t, after = heapq.heappop(heap)
            tokens.append(t)
            parents.append(parent)
            depths.append(d)
            scores.append(-neg)
            if d < depth:
                expand(len(tokens) - 1, after, t, d, -neg)
        # parents before children: by depth, then score (a child never scores above its parent)
        keep = sorted(range(len(tokens)), key=lambda i: (depths[i], -scores[i]))
        index = {old: new for new, old in enumerate(keep)}
        self.trees += 1
        return Draft(tuple(tokens[i] for i in keep), tuple(-1 if parents[i] < 0 else index[parents[i]] for i in keep))

    def end(self) -> dict:
        out = {f"{self.name}_drafted": self.drafted, f"{self.name}_stages": self.heads.depth}
        self.drafted = 0
        return out

    def describe(self) -> str:
        shape = f"trees of {self.tree_nodes}" if self.tree_nodes else "chains"
        return f"{self.heads.describe()}, {shape}"


def build_with_heads(target, options, context, drafter: type[MultiHeadDrafter], heads: Mapping, what: str):
    """The drafter with its heads from ``options.head`` (a folder or a downloaded repo), loaded by the loader
    ``heads`` (backend name -> loader) lists for the target's backend."""
    from localspec.drafters.heads.files import head_folder

    name = drafter.name
    if target is None:
        raise ConfigError(f"--drafter {name} needs a loaded target model")
    load = head_for(heads, target, f"--drafter {name}'s heads")
    if not options.head:
        raise ConfigError(
            f"--drafter {name} needs --{name}-head FOLDER|REPO ({what}; `localspec train-drafter --kind {name}` "
            f"makes one)"
        )
    return drafter(target, load(head_folder(options.head), target), context.seed, tree_nodes=options.tree)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max()
    return z - np.log(np.exp(z).sum())


def read_state(folder: Path, names: Sequence[str], what: str) -> dict:
    """The tensors of a head folder: the first of ``names`` (file patterns, best first) that exists;
    safetensors by safetensors, a pickled .pt/.bin only with ``torch.load(weights_only=True)`` (never
    code from the checkpoint)."""
    import torch

    folder = Path(folder)  # (config_json, read first, says when the folder is missing)
    for pattern in names:
        files = sorted(folder.glob(pattern))
        if not files:
            continue
        state = {}
        for file in files:
            try:
                if file.suffix == ".safetensors":
                    from safetensors.torch import load_file

                    state.update(load_file(str(file)))
                else:
                    state.update(torch.load(str(file), map_location="cpu", weights_only=True))
            except Exception as exc:  # a truncated or foreign file: say which and what to do
                raise ModelError(
                    f"{file}: cannot be read as a {what} checkpoint ({type(exc).__name__}: {exc}); download it again"
                ) from exc
        return {k: v.float() for k, v in state.items() if hasattr(v, "float")}
    raise ModelError(f"{folder}: no {what} weights ({' or '.join(names)})")


def config_json(folder: Path, what: str) -> dict:
    import json

    if not Path(folder).is_dir():
        raise ModelError(f"{folder}: no such {what} folder; give the head's folder or a downloaded Hub repo")
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: no readable config.json for the {what} ({exc})") from exc


def check_width(name: str, tensor, want: tuple, folder: Path, what: str) -> None:
    """A ConfigError when a head's tensor does not fit the target (another model's head)."""
    if tuple(tensor.shape) != tuple(want):
        raise ConfigError(
            f"{folder}: {what} tensor {name} is {tuple(tensor.shape)}, this target needs {tuple(want)}: the head "
            f"was trained for another model; use one for this model (or train one with `localspec train-drafter`)"
        )
