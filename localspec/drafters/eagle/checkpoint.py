"""EAGLE's checkpoint format, as published (torch and MLX heads read it; convert-eagle writes GGUF from it):
a folder with config.json and pytorch_model.bin or model.safetensors. EAGLE-1/2 has `fc.weight` [H, 2H] and a
Llama layer under `layers.0.`; EAGLE-3 fuses three layers' hidden states (`fc.weight` [H, 3H]), has its layer
under `midlayer.` and a draft vocabulary mapped to the target's by `d2t`. ``eagle_layout`` checks a checkpoint
against its target and says which generation it is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.errors import ConfigError, ModelError


def read_eagle_config(folder: Path) -> dict:
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError(f"{folder}: no such folder (an EAGLE head is a folder with config.json and weights)")
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: no readable config.json for an EAGLE head ({exc})") from exc


def load_eagle_state(folder: Path) -> tuple[dict, dict]:
    """(config.json, state dict) of an EAGLE head folder."""
    import torch

    folder = Path(folder)
    config = read_eagle_config(folder)
    try:
        if (folder / "model.safetensors").is_file():
            from safetensors.torch import load_file

            state = load_file(str(folder / "model.safetensors"))
        elif (folder / "pytorch_model.bin").is_file():
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        else:
            raise ModelError(f"{folder}: no pytorch_model.bin or model.safetensors")
    except ModelError:
        raise
    except Exception as exc:  # a truncated or foreign file: say which, not a torch traceback
        raise ModelError(f"{folder}: the EAGLE weights cannot be read ({exc}); download the head again") from exc
    if "fc.weight" not in state:
        raise ModelError(f"{folder}: not an EAGLE head (no fc.weight)")
    return config, state


@dataclass(frozen=True)
class EagleLayout:
    """What a checkpoint is, checked against the target: the generation, the layers whose inputs it reads
    (-1: the last layer's normed output) and, for EAGLE-3, target id of each draft-vocabulary id."""

    version: int
    feature_layers: tuple[int, ...]
    draft_to_target: np.ndarray | None = None


_EAGLE3_KEYS = ("midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "norm.weight", "lm_head.weight")


def eagle_layout(config: dict, state: dict, hidden: int, n_layers: int, vocab: int) -> EagleLayout:
    """Check an EAGLE checkpoint (torch or MLX tensors) against a target of ``n_layers`` layers of width
    ``hidden`` and a ``vocab``-token vocabulary; the errors say when a head belongs to another model."""
    if config.get("hidden_size", hidden) != hidden:
        raise ConfigError(
            f"the EAGLE head's hidden size {config['hidden_size']} does not match the target's "
            f"{hidden}: it was trained for another model"
        )
    fused = int(state["fc.weight"].shape[1])
    if fused % hidden:
        raise ConfigError(
            f"the EAGLE head's fc reads {fused} features, not a multiple of the target's hidden size "
            f"{hidden}: this head belongs to another model"
        )
    if not any(k.startswith("midlayer.") for k in state):
        if fused != 2 * hidden:
            raise ModelError(f"an EAGLE-1/2 head has fc.weight [H, 2H]; this one is {tuple(state['fc.weight'].shape)}")
        return EagleLayout(1, (-1,))
    layers = eagle3_layers(config, n_layers)
    if len(layers) != fused // hidden:
        raise ModelError(
            f"EAGLE-3 head: fc fuses {fused // hidden} hidden states but {len(layers)} layers are named ({layers})"
        )
    if not all(0 <= i < n_layers for i in layers):
        raise ConfigError(
            f"EAGLE-3 head reads layers {layers}; the target has {n_layers}: it was trained for another model"
        )
    for key in _EAGLE3_KEYS:
        if key not in state:
            raise ModelError(f"EAGLE-3 head: no {key}")
    return EagleLayout(3, layers, _draft_to_target(state, vocab))


def _draft_to_target(state: dict, vocab: int) -> np.ndarray:
    """The target id of each EAGLE-3 draft-vocabulary id (draft id d is target id d + d2t[d])."""
    n_draft = int(state["lm_head.weight"].shape[0])
    if "d2t" in state:
        d2t = np.asarray(state["d2t"]).astype(np.int64)
        if d2t.shape[0] != n_draft:
            raise ModelError(f"EAGLE-3 head: d2t has {d2t.shape[0]} entries for a {n_draft}-token draft vocabulary")
    elif n_draft == vocab:
        d2t = np.zeros(n_draft, np.int64)
    else:
        raise ModelError(f"EAGLE-3 head: a {n_draft}-token draft vocabulary needs a d2t map")
    to_target = np.arange(n_draft) + d2t
    if to_target.max() >= vocab or to_target.min() < 0:
        raise ConfigError(f"EAGLE-3 head: d2t maps past the target's {vocab} tokens: it belongs to another model")
    return to_target


def eagle3_layers(config: dict, n_layers: int) -> tuple[int, ...]:
    """The layers whose *inputs* an EAGLE-3 head fuses. The reference code takes the inputs of layers 2,
    L//2 and L-3; a config's `eagle_aux_hidden_state_layer_ids` (SpecForge-trained heads) names layer
    *outputs*, i.e. the inputs of the layers after them (SGLang reads them the same way)."""
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or config.get(
        "eagle_aux_hidden_state_layer_ids"
    )
    if ids:
        return tuple(int(i) + 1 for i in ids)
    return tuple(sorted({2, n_layers // 2, n_layers - 3}))
