"""EAGLE draft heads in the published checkpoint formats (read by drafters/eagle/checkpoint.py), run on the torch
backend's device.

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

from pathlib import Path

from localspec.drafters.eagle.checkpoint import EagleLayout, eagle_layout, load_eagle_state
from localspec.drafters.heads.one_layer import Eagle1Head, EagleHead
from localspec.errors import ConfigError, ModelError


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

        from localspec.backends.torch.decoder import causal_mask

        dec = self.decoder
        layer = dec.layers[0]
        with torch.inference_mode():
            hidden = hidden.to(self.dtype)
            n = hidden.shape[0]
            if positions is None:
                positions = torch.arange(start, start + n, device=self.device)
            if mask is None:
                mask = causal_mask(n, start, self.lo, self.device)
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
