"""EAGLE-1/2 draft heads (Li et al. 2024), chain drafting, on the torch backend.

An EAGLE head predicts the target's next *feature* (its last hidden state, what the LM head reads) from
the current feature and the embedding of the token that follows it: input_j = fc([embed(x_{j+1}); f_j]),
then one Llama decoder layer (without its first norm) with the head's own KV cache; the target's LM head
turns a predicted feature into next-token logits. Drafting feeds the target's real features for the newly
verified positions, then runs on its own predicted features for k steps; rejected positions leave the
head's cache by truncation.

Checkpoint format, as released with the EAGLE reference code: a folder with config.json (Llama config keys;
`bias` for the fc bias) and pytorch_model.bin or model.safetensors with `fc.weight` [H, 2H], `fc.bias`,
`layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.mlp.{gate,up,down}_proj.weight`,
`layers.0.post_attention_layernorm.weight` and optionally `embed_tokens.weight` (else the target's).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from localspec.backends.torch_hf import HF_LAYER_NAMES
from localspec.drafters.base import Drafter
from localspec.drafters.draft_model import GREEDY, pick_token
from localspec.errors import ConfigError, ModelError
from localspec.types import Draft



def load_eagle_state(folder: Path) -> tuple[dict, dict]:
    """(config.json, state dict) of an EAGLE-1/2 head folder."""
    import torch
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: no readable config.json for an EAGLE head ({exc})") from exc
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file
        state = load_file(str(folder / "model.safetensors"))
    elif (folder / "pytorch_model.bin").is_file():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise ModelError(f"{folder}: no pytorch_model.bin or model.safetensors")
    if "fc.weight" not in state:
        raise ModelError(f"{folder}: not an EAGLE-1/2 head (no fc.weight)")
    return config, state


class EagleHead:
    """The head's modules and its KV cache (positions are the target's context positions)."""

    def __init__(self, config: dict, state: dict, target) -> None:
        import torch
        from torch import nn
        from localspec.backends.torch_decoder import Decoder, DecoderConfig
        tcfg = target.model.cfg
        hidden = config.get("hidden_size", tcfg.hidden_size)
        if hidden != tcfg.hidden_size:
            raise ConfigError(f"the EAGLE head's hidden size {hidden} does not match the target's {tcfg.hidden_size}")
        heads = config.get("num_attention_heads", tcfg.n_heads)
        cfg = DecoderConfig(tcfg.vocab_size, hidden, config.get("intermediate_size", tcfg.intermediate_size), 1,
                            heads, config.get("num_key_value_heads", heads), hidden // heads,
                            rms_eps=config.get("rms_norm_eps", tcfg.rms_eps),
                            rope_theta=config.get("rope_theta", tcfg.rope_theta),
                            rope_scaling=config.get("rope_scaling", tcfg.rope_scaling), tie_embeddings=True,
                            max_positions=tcfg.max_positions)
        self.decoder = Decoder(cfg)
        self.fc = nn.Linear(2 * hidden, hidden, bias="fc.bias" in state)
        mapped = {"weight": state["fc.weight"]}
        if "fc.bias" in state:
            mapped["bias"] = state["fc.bias"]
        layer = {}
        for key, tensor in state.items():
            if key.startswith("layers.0."):
                module, _, part = key[len("layers.0."):].rpartition(".")
                if module in HF_LAYER_NAMES:  # an EAGLE layer is a Llama layer without its input norm
                    layer[f"layers.0.{HF_LAYER_NAMES[module]}.{part}"] = tensor
        missing = [k for k in ("q", "k", "v", "o", "gate", "up", "down", "mlp_norm")
                   if f"layers.0.{k}.weight" not in layer]
        if missing:
            raise ModelError(f"EAGLE head: missing layer weights {missing}")
        embed = state.get("embed_tokens.weight", target.model.embed.weight.detach())
        dtype = next(target.model.parameters()).dtype
        with torch.no_grad():
            self.fc.load_state_dict(mapped)
            self.decoder.load_state_dict({**layer, "embed.weight": embed}, strict=False)
        self.decoder.layers[0].attn_norm = nn.Identity()  # layer 0 of an EAGLE head has no input norm
        self.decoder.norm = nn.Identity()  # its output is a feature: the target's LM head reads it as is
        device = target.device
        self.decoder.to(device=device, dtype=dtype).eval()
        self.fc.to(device=device, dtype=dtype).eval()
        self.decoder.allocate_cache(target.n_ctx)
        self.lm_head = (target.model.embed.weight if target.model.lm_head is None else target.model.lm_head.weight)
        self.device, self.dtype = device, dtype
        self.lo = 0  # the first context position in the head's cache

    def step(self, tokens: Sequence[int], features, start: int):
        """Feed (token, feature) pairs at positions start..; returns the predicted features [n, H]."""
        import torch
        with torch.inference_mode():
            ids = torch.tensor(list(tokens), dtype=torch.long, device=self.device)
            x = self.fc(torch.cat([self.decoder.embed(ids), features.to(self.dtype)], dim=-1))
            return self.decoder.forward_embeddings(x, start, lo=self.lo)

    def logits(self, feature) -> np.ndarray:
        import torch
        with torch.inference_mode():
            return (feature @ self.lm_head.T).float().cpu().numpy()


class EagleDrafter(Drafter):
    """Chain drafting with an EAGLE head. Needs the target's features: the torch backend."""

    name = "eagle"
    needs_hidden_states = True

    def __init__(self, target, head_folder: Path, seed: Optional[int] = None) -> None:
        if getattr(target, "name", "") != "torch":
            raise ConfigError("the eagle drafter runs on the torch backend: add --backend torch")
        config, state = load_eagle_state(Path(head_folder))
        self.head = EagleHead(config, state, target)
        self.target_vocab = target.vocab_size
        self.rng = np.random.default_rng(seed)
        self._fed = 0  # context positions j whose (token j+1, feature j) the head's cache holds, from _first
        self._first: Optional[int] = None
        self._last = None  # the head's predicted feature after the last fed position

    def begin(self, prompt: Sequence[int]) -> None:
        self._first, self._fed, self._last = None, 0, None

    def propose(self, context: Sequence[int], max_tokens: int, hidden=None) -> Draft:
        import torch
        if hidden is not None:  # (first position, target features [n, H]) of the newly verified positions
            pos, rows = hidden
            if self._first is None:
                self._first = pos
            end = self._first + self._fed
            if pos > end:  # positions the head never saw (steps without features): start over from here
                self._first, self._fed, end = pos, 0, pos
            self.head.lo = self._first
            rows = rows[end - pos:]
            n = min(len(rows), len(context) - 1 - end)
            if n > 0:
                feats = torch.as_tensor(np.asarray(rows[:n]), device=self.head.device)
                out = self.head.step(context[end + 1:end + 1 + n], feats, end)
                self._fed += n
                self._last = out[-1:]
        if self._last is None or max_tokens <= 0:
            return Draft()
        sampling = self.sampling or GREEDY
        tokens, rows_q, feature, at = [], [], self._last, self._first + self._fed
        for i in range(max_tokens):
            token = pick_token(self.head.logits(feature)[0], sampling, self.rng, self.target_vocab, rows_q)
            tokens.append(token)
            if i + 1 < max_tokens:
                feature = self.head.step([token], feature, at + i)[-1:]
        # the drafted positions leave the head's cache at the next call: it only counts what was fed
        return Draft.chain(tokens, np.stack(rows_q) if rows_q else None)

    def figures(self) -> dict:
        return {"eagle_positions_fed": self._fed}
