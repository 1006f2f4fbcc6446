"""MiMo's MTP layer on the torch backend (`--drafter mtp` with a MiMo-7B folder: config.json `model_type`
"mimo", `num_nextn_predict_layers`, tensors `model.mtp_layers.0.*` beside the Qwen2 body).

The layer: x = input_proj([hidden_layernorm(h); token_layernorm(embed(token))]) (the hidden row first),
one Qwen2 decoder layer (q/k/v biases), final_layernorm; its logits come from the target's LM head. h is
the target's last hidden state after the final norm (feature -1), so slot j of the layer's cache takes
(token j+1, feature j), the pairing of an EAGLE-1 head (drafters/heads/one_layer.py), driven as EAGLE's
heads are (drafters/heads/feature_drafter.py), chaining on the layer's own output row.
"""

from __future__ import annotations

import json

from localspec.drafters.heads.feature_drafter import FeatureHeadDrafter
from localspec.drafters.heads.one_layer import Eagle1Head
from localspec.errors import ConfigError, ModelError

PREFIX = "model.mtp_layers.0."


def mtp_config(folder) -> dict:
    """The folder's config.json if it declares MTP layers, else a ConfigError naming the model."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: no readable config.json ({exc})") from exc
    if not config.get("num_nextn_predict_layers"):
        raise ConfigError(
            f"{folder.name} has no MTP layers (num_nextn_predict_layers is 0 or missing in its config.json); "
            f"MTP on the torch backend runs MiMo-layout checkpoints: use another drafter"
        )
    return config


def _mtp_tensors(folder) -> dict:
    """The tensors under PREFIX, read from the checkpoint's safetensors (the body is not loaded twice)."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({f for k, f in json.loads(index.read_text())["weight_map"].items() if k.startswith(PREFIX)})
    else:
        files = ["model.safetensors"]
    state = {}
    for name in files:
        with safe_open(str(folder / name), framework="pt") as f:
            names = f.keys()  # a safetensors file handle, not a dict
            state.update({k: f.get_tensor(k) for k in names if k.startswith(PREFIX)})
    names = ("input_proj", "token_layernorm", "hidden_layernorm", "final_layernorm")
    missing = [n for n in names if f"{PREFIX}{n}.weight" not in state]
    if missing:
        raise ModelError(
            f"{folder}: config.json declares MTP layers but {', '.join(PREFIX + n + '.weight' for n in missing)} "
            f"is missing; download the checkpoint again"
        )
    return state


class MimoMtpHead(Eagle1Head):
    """An EAGLE-1-shaped head (its logits from the target's LM head, ``lm_head``) with MiMo's input."""

    version = "mtp"

    def __init__(self, target) -> None:  # not Eagle1Head's: the weights and the input are MiMo's
        from torch import nn

        from localspec.backends.torch.decoder import RMSNorm

        folder = target.path
        if not folder.is_dir():
            raise ConfigError(f"--drafter mtp on torch needs the model's Hugging Face folder, not {folder.name}")
        config = mtp_config(folder)
        state = _mtp_tensors(folder)
        self._setup(config, {}, target, target.model.cfg.hidden_size, attn_bias=True)
        hidden, eps = self.cfg.hidden_size, self.cfg.rms_eps
        self._load_layer(state, PREFIX)
        self.token_norm, self.hidden_norm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.input_proj = nn.Linear(2 * hidden, hidden, bias=False)
        own = (
            (self.token_norm.weight, "token_layernorm.weight"),
            (self.hidden_norm.weight, "hidden_layernorm.weight"),
            (self.input_proj.weight, "input_proj.weight"),
            (self.decoder.norm.weight, "final_layernorm.weight"),
        )
        import torch

        with torch.no_grad():
            for param, name in own:
                param.copy_(state[PREFIX + name])
        self.lm_head = target.model.embed.weight if target.model.lm_head is None else target.model.lm_head.weight
        self._finish(target, [self.token_norm, self.hidden_norm, self.input_proj])

    def step(self, tokens, hidden, start, positions=None, mask=None):
        import torch

        with torch.inference_mode():
            token = self.token_norm(self.decoder.embed(self._ids(tokens)))
            x = self.input_proj(torch.cat([self.hidden_norm(hidden.to(self.dtype)), token], dim=-1))
            return self.decoder.forward_embeddings(x, start, lo=self.lo, positions=positions, mask=mask)


class TorchMtpDrafter(FeatureHeadDrafter):
    """Chains with the MTP layer as the feature-fed head."""

    name = "mtp"

    def __init__(self, target, seed: int | None = None) -> None:
        super().__init__(target, lambda: MimoMtpHead(target), seed)

    def describe(self) -> str:
        return "the target's MTP layer (MiMo), chains"
