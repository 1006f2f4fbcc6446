"""DFlash and DSpark heads in their released Hugging Face layout, read by localspec's own code: config.json
and *.safetensors only (a repo's modeling .py is never imported or run).

DFlash (z-lab, `DFlashDraftModel`): `layers.N.*` Qwen3 decoder layers (q/k norms), `fc` [H, n·H_target]
fusing the target's hidden states at `dflash_config.target_layer_ids` (layer *outputs*: the inputs of the
layers after them), `hidden_norm` after `fc`, the final `norm`; `block_size` and `dflash_config.mask_token_id`;
the target's embedding and LM head are reused. DSpark adds a Markov head (`markov_head.markov_w1` [V, R],
`markov_w2` [V_draft, R]: logits of block row i get w2·w1[token before it]) and optionally a confidence head
(`confidence_head.proj` [1, H + R], sigmoid: the chance row i's token is accepted); its rows are
anchor-first (row 0 predicts the token after the anchor) unless `sample_from_anchor` is false, and a reduced
draft vocabulary comes with its own `lm_head` and `d2t` (draft id d is target id d + d2t[d]). Config keys
follow the published variants: `dflash_config{...}`, top-level keys, or the speculators format
(`transformer_layer_config`, `aux_hidden_state_layer_ids` = layer inputs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.errors import ConfigError, ModelError

MARKOV_W1, MARKOV_W2 = "markov_head.markov_w1.weight", "markov_head.markov_w2.weight"
CONF_W, CONF_B = "confidence_head.proj.weight", "confidence_head.proj.bias"
_REFUSED = {  # variants llama.cpp or the papers added that localspec does not run yet
    "candidate_selector.": "DFlash2's candidate selector",
    "attention_conv.": "DFlash2's dynamic convolutions",
}


@dataclass(frozen=True)
class DFlashLayout:
    """What a head is, in the terms both backends use."""

    kind: str  # "dflash" or "dspark"
    block_size: int
    mask_token: int
    extract_layers: tuple[int, ...]  # target layers whose *inputs* fc reads (n_layers: the last one's output)
    n_layers: int
    hidden: int
    sample_from_anchor: bool  # row 0 (the anchor) predicts the next token; else row i predicts position P+i
    causal: bool  # attention inside the block (released heads: bidirectional)
    markov_rank: int = 0
    confidence: bool = False
    embed_scale: float = 1.0

    @property
    def max_draft(self) -> int:
        """Tokens one block drafts: every row but the anchor's, or all rows when the anchor predicts."""
        return self.block_size if self.sample_from_anchor else self.block_size - 1

    def rows_for(self, k: int) -> int:
        """Block rows (anchor included) that draft k tokens."""
        return k if self.sample_from_anchor else k + 1


def read_config(folder: Path) -> dict:
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError(f"{folder}: no such folder (a DFlash/DSpark head is a folder with config.json and weights)")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: no readable config.json for a DFlash/DSpark head ({exc})") from exc
    if "transformer_layer_config" in config:  # the speculators format nests the layer geometry
        config = {**config, **config["transformer_layer_config"]}
    return config


def load_state(folder: Path) -> dict:
    """The head's tensors (torch, names without a leading "model."), from its safetensors files."""
    from safetensors import safe_open

    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{folder}: no .safetensors weights (localspec reads heads from safetensors only)")
    state = {}
    try:
        for path in files:
            with safe_open(str(path), framework="pt") as f:
                names = f.keys()  # a safetensors handle, not a dict
                for name in names:
                    state[name.removeprefix("model.")] = f.get_tensor(name)
    except Exception as exc:  # a truncated or foreign file: say which, not a safetensors traceback
        raise ModelError(f"{folder}: the head's weights cannot be read ({exc}); download it again") from exc
    return state


def dflash_layout(config: dict, state: dict, target_hidden: int, target_layers: int, vocab: int) -> DFlashLayout:
    """Check a head against a target of ``target_layers`` layers of width ``target_hidden`` and a
    ``vocab``-token vocabulary; the errors say when a head belongs to another model or is a variant not run."""
    for prefix, what in _REFUSED.items():
        if any(k.startswith(prefix) or f".{prefix}" in k for k in state):
            raise ConfigError(f"this head is {what} variant, which localspec does not run; use a DFlash/DSpark head")
    if "fc.weight" not in state or "hidden_norm.weight" not in state:
        raise ModelError("not a DFlash/DSpark head (no fc.weight / hidden_norm.weight)")
    sub = config.get("dflash_config") or {}
    hidden = int(config.get("hidden_size", 0))
    if hidden != target_hidden:
        raise ConfigError(
            f"the head's hidden size {hidden} is not the target's {target_hidden}: it was trained for another model"
        )
    extract = _extract_layers(config, sub)
    if not extract or not all(1 <= i <= target_layers for i in extract):
        raise ConfigError(
            f"the head reads target layers {[i - 1 for i in extract]}; the target has {target_layers}: "
            f"it was trained for another model"
        )
    fused = int(state["fc.weight"].shape[1])
    if fused != len(extract) * target_hidden:
        raise ConfigError(
            f"the head's fc reads {fused} features, not {len(extract)} layers x {target_hidden}: it belongs to "
            f"another model"
        )
    mask = sub.get("mask_token_id", config.get("mask_token_id"))
    if mask is None or not 0 <= int(mask) < vocab:
        raise ConfigError(f"the head's mask token {mask} is not in the target's {vocab}-token vocabulary")
    _check_variant(config, sub, state)
    markov = MARKOV_W1 in state
    n_layers = int(config.get("num_hidden_layers", 0))
    missing = [i for i in range(n_layers) if f"layers.{i}.self_attn.q_proj.weight" not in state]
    if n_layers < 1 or missing:
        raise ModelError(f"the head declares {n_layers} layers but has no weights for layers {missing}")
    causal = config.get("is_causal")
    anchor = config.get("sample_from_anchor")
    if anchor is None:  # DFlash-lineage DSpark exports sample from the anchor; EAGLE-3-style ones do not
        anchor = markov and "aux_hidden_state_layer_ids" not in config and "transformer_layer_config" not in config
    return DFlashLayout(
        kind="dspark" if markov else "dflash",
        block_size=int(sub.get("block_size", config.get("block_size", 16))),
        mask_token=int(mask),
        extract_layers=extract,
        n_layers=n_layers,
        hidden=hidden,
        sample_from_anchor=bool(anchor),
        causal=bool(sub.get("causal", False) if causal is None else causal),
        markov_rank=int(state[MARKOV_W1].shape[1]) if markov else 0,
        confidence=CONF_W in state,
        embed_scale=float(sub.get("input_embedding_scale", config.get("input_embedding_scale")) or 1.0),
    )


def _check_variant(config: dict, sub: dict, state: dict) -> None:
    """Refuse what localspec does not run: logit scaling, non-vanilla Markov heads, a half Markov head."""
    for key in ("output_multiplier", "final_logit_softcapping"):
        if float(sub.get(key, config.get(key)) or 1.0) not in (0.0, 1.0):
            raise ConfigError(f"the head scales its logits ({key}), which localspec does not run yet")
    if config.get("markov_head_type", "vanilla") != "vanilla":
        raise ConfigError(f"markov_head_type {config['markov_head_type']!r}: only the vanilla Markov head runs")
    if MARKOV_W1 in state and MARKOV_W2 not in state:
        raise ModelError(f"a DSpark head with {MARKOV_W1} needs {MARKOV_W2}")


def _extract_layers(config: dict, sub: dict) -> tuple[int, ...]:
    if config.get("aux_hidden_state_layer_ids"):  # speculators: already layer inputs
        return tuple(int(i) for i in config["aux_hidden_state_layer_ids"])
    ids = sub.get("target_layer_ids", config.get("target_layer_ids")) or []
    return tuple(int(i) + 1 for i in ids)


def draft_to_target(state: dict, vocab: int) -> np.ndarray | None:
    """Target id of each row of the head's own LM head (None: it uses the target's, or has the full vocabulary)."""
    if "lm_head.weight" not in state:
        return None
    rows = int(state["lm_head.weight"].shape[0])
    if "d2t" not in state:
        if rows != vocab:
            raise ModelError(f"the head's {rows}-token LM head needs a d2t map to the target's {vocab} tokens")
        return None
    d2t = np.asarray(state["d2t"]).astype(np.int64).reshape(-1)
    if len(d2t) != rows:
        raise ModelError(f"the head's d2t has {len(d2t)} entries for a {rows}-token LM head")
    ids = np.arange(rows) + d2t
    if ids.min() < 0 or ids.max() >= vocab or len(np.unique(ids)) != rows:
        raise ConfigError(f"the head's d2t maps outside the target's {vocab} tokens: it belongs to another model")
    return ids
