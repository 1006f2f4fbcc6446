"""EAGLE draft heads in the published checkpoint formats, run on the torch backend's device.

EAGLE-1/2 (Li et al. 2024): config.json (Llama keys; `bias` for the fc bias) and pytorch_model.bin or
model.safetensors with `fc.weight` [H, 2H] (+ `fc.bias`), `layers.0.self_attn.{q,k,v,o}_proj.weight`,
`layers.0.mlp.{gate,up,down}_proj.weight`, `layers.0.post_attention_layernorm.weight`, optionally
`embed_tokens.weight` (else the target's). Input x = fc([embed(token j+1); feature j]) goes through one
Llama layer without its input norm; the output is the predicted next feature, read by the target's LM head.

EAGLE-3 (Li et al. 2025): the target's hidden states at three depths (inputs of layers 2, L//2 and L-3, or
the outputs the config's `eagle_aux_hidden_state_layer_ids` names) are fused by `fc.weight` [H, 3H]; the
`midlayer` attends over [input_layernorm(embed(token)); hidden_norm(hidden)] (q/k/v read 2H), its output is
fed back as the next hidden state, and `lm_head` [draft vocab, H] after `norm` scores a smaller draft
vocabulary whose id d is target id d + d2t[d]. The embedding is the target's unless the checkpoint has
`embed_tokens.weight`.

Both keep their own KV cache whose slot j belongs to context position j (drafters/heads/one_layer.py, which
EAGLE-1's shape shares with MiMo's MTP layer); a head is told `lo`, the first slot it has filled, and attends
from there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.drafters.heads.one_layer import Eagle1Head, EagleHead
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


def load_eagle_head(folder: Path, target) -> EagleHead:
    config, state = load_eagle_state(folder)
    t = target.model.cfg
    try:
        layout = eagle_layout(config, state, t.hidden_size, t.n_layers, t.vocab_size)
    except (ConfigError, ModelError) as exc:
        raise type(exc)(f"{folder}: {exc}") from exc
    return (Eagle3Head if layout.version == 3 else Eagle1Head)(config, state, target, layout)


class Eagle3Head(EagleHead):
    version = 3

    def __init__(self, config: dict, state: dict, target, layout: EagleLayout) -> None:
        import torch
        from torch import nn

        from localspec.backends.torch.decoder import RMSNorm

        t = target.model.cfg
        self._setup(config, state, target, 2 * t.hidden_size)
        self.feature_layers = layout.feature_layers
        h = t.hidden_size
        self.fc = nn.Linear(len(self.feature_layers) * h, h, bias="fc.bias" in state)
        self.hidden_norm, self.input_norm = RMSNorm(h, self.cfg.rms_eps), RMSNorm(h, self.cfg.rms_eps)
        self.norm = RMSNorm(h, self.cfg.rms_eps)
        self._load_layer(state, "midlayer.")
        with torch.no_grad():
            self.fc.load_state_dict(
                {"weight": state["fc.weight"], **({"bias": state["fc.bias"]} if "fc.bias" in state else {})}
            )
            self.hidden_norm.weight.copy_(state["midlayer.hidden_norm.weight"])
            self.input_norm.weight.copy_(state["midlayer.input_layernorm.weight"])
            self.norm.weight.copy_(state["norm.weight"])
        lm_head = state["lm_head.weight"]
        n_draft = lm_head.shape[0]
        self.draft_to_target = torch.as_tensor(layout.draft_to_target)
        self.lm_head = nn.Linear(h, n_draft, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(lm_head)
        self.target_vocab = t.vocab_size
        self._finish(target, [self.fc, self.hidden_norm, self.input_norm, self.norm, self.lm_head])
        self.draft_to_target = self.draft_to_target.to(self.device)

    def fuse(self, rows):
        import torch

        with torch.inference_mode():
            return self.fc(super().fuse(rows))

    def step(self, tokens, hidden, start, positions=None, mask=None):
        import torch

        dec = self.decoder
        layer = dec.layers[0]
        with torch.inference_mode():
            hidden = hidden.to(self.dtype)
            n = hidden.shape[0]
            if positions is None:
                positions = torch.arange(start, start + n, device=self.device)
            if mask is None:
                mask = torch.ones(n, start + n - self.lo, dtype=torch.bool, device=self.device).tril(start - self.lo)
            cos, sin = dec.rope(positions, self.dtype)
            x = torch.cat([self.input_norm(dec.embed(self._ids(tokens))), self.hidden_norm(hidden)], dim=-1)
            out = hidden + dec.attend(0, layer, x, cos, sin, start, self.lo, mask)
            return out + dec.mlp(layer, out)

    def logits_t(self, out):
        import torch

        with torch.inference_mode():
            draft = self._scores(self.norm(out), self.lm_head.weight)
            full = torch.full((out.shape[0], self.target_vocab), float("-inf"), device=self.device)
            full[:, self.draft_to_target] = draft
            return full


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
