"""A DFlash / DSpark head on the torch backend (the released Hugging Face layout, dflash_layout.py).

The head keeps its own KV cache, slot j for context position j. ``inject`` puts the target's features of
positions j.. there: g = hidden_norm(fc(features)), and every layer's keys and values of g (k_norm, rotary
at j; no input norm, as the reference computes them). ``block`` runs [anchor, mask, ...] at positions
P.. through the layers with attention over the cached context and the whole block (bidirectional), and
returns the final-normed rows; the block's own keys land in slots P.. and are overwritten by the next
``inject``. ``logits`` reads rows through the target's LM head (or the head's own draft-vocabulary one);
DSpark's ``markov_bias`` and ``confidence`` condition a row on the token before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localspec.backends.torch.hf import HF_LAYER_NAMES
from localspec.drafters.dflash.layout import (
    CONF_B,
    CONF_W,
    MARKOV_W1,
    MARKOV_W2,
    dflash_layout,
    draft_to_target,
    load_state,
    read_config,
)
from localspec.drafters.heads.torch_ops import half_scores
from localspec.errors import ConfigError, ModelError


class TorchDFlashHead:
    def __init__(self, folder: Path, target) -> None:
        from torch import nn

        from localspec.backends.torch.decoder import Decoder, DecoderConfig, RMSNorm

        config, state = read_config(folder), load_state(folder)
        t = target.model.cfg
        try:
            layout = dflash_layout(config, state, t.hidden_size, t.n_layers, t.vocab_size)
        except (ConfigError, ModelError) as exc:
            raise type(exc)(f"{folder}: {exc}") from exc
        self.layout, h = layout, layout.hidden
        # the target's layer inputs; the input of "layer L" is the last layer's output after the final norm
        # (Hugging Face's last hidden state, what the reference reads)
        self.feature_layers = tuple(-1 if i == t.n_layers else i for i in layout.extract_layers)
        heads = int(config.get("num_attention_heads", t.n_heads))
        self.cfg = DecoderConfig(
            1,
            h,
            int(config.get("intermediate_size", t.intermediate_size)),
            layout.n_layers,
            heads,
            int(config.get("num_key_value_heads", heads)),
            int(config.get("head_dim") or h // heads),
            rms_eps=float(config.get("rms_norm_eps", t.rms_eps)),
            rope_theta=float(config.get("rope_theta", t.rope_theta)),
            rope_scaling=config.get("rope_scaling"),
            attn_bias=bool(config.get("attention_bias", False)),
            qk_norm=True,
            tie_embeddings=True,
            max_positions=target.n_ctx + layout.block_size,
        )
        self.decoder = Decoder(self.cfg)
        self.fc = nn.Linear(int(state["fc.weight"].shape[1]), h, bias=False)
        self.hidden_norm = RMSNorm(h, self.cfg.rms_eps)
        self._load(state)
        modules = [self.decoder, self.fc, self.hidden_norm]
        self.to_target = draft_to_target(state, t.vocab_size)
        if "lm_head.weight" in state:
            self.lm_head = nn.Linear(h, int(state["lm_head.weight"].shape[0]), bias=False)
            self._copy(self.lm_head.weight, state["lm_head.weight"])
            modules.append(self.lm_head)
            self.head_weight = None
        else:
            self.lm_head = None
            self.head_weight = (
                target.model.embed.weight if target.model.lm_head is None else target.model.lm_head.weight
            )
        self.markov_w1 = self.markov_w2 = self.conf = None
        if layout.markov_rank:
            self.markov_w1 = nn.Embedding(*state[MARKOV_W1].shape)
            self.markov_w2 = nn.Linear(layout.markov_rank, int(state[MARKOV_W2].shape[0]), bias=False)
            self._copy(self.markov_w1.weight, state[MARKOV_W1])
            self._copy(self.markov_w2.weight, state[MARKOV_W2])
            modules += [self.markov_w1, self.markov_w2]
            if layout.confidence:
                self.conf = nn.Linear(h + layout.markov_rank, 1, bias=CONF_B in state)
                self._copy(self.conf.weight, state[CONF_W])
                if CONF_B in state:
                    self._copy(self.conf.bias, state[CONF_B])
                modules.append(self.conf)
        self.embed = target.model.embed
        self.device, self.dtype = target.device, next(target.model.parameters()).dtype
        for module in modules:
            module.to(device=self.device, dtype=self.dtype).eval()
        self.decoder.allocate_cache(target.n_ctx + layout.block_size)
        self.vocab = t.vocab_size
        self.lo = 0  # the first slot the drafter has filled; attention reads from there

    @staticmethod
    def _copy(param, value) -> None:
        import torch

        if tuple(param.shape) != tuple(value.shape):
            raise ModelError(f"a DFlash head tensor is {tuple(value.shape)}, expected {tuple(param.shape)}")
        with torch.no_grad():
            param.copy_(value)

    def _load(self, state: dict) -> None:
        import torch

        layers = {}
        for key, tensor in state.items():
            if key.startswith("layers."):
                i, _, rest = key[len("layers.") :].partition(".")
                module, _, part = rest.rpartition(".")
                if module in HF_LAYER_NAMES:
                    layers[f"layers.{i}.{HF_LAYER_NAMES[module]}.{part}"] = tensor
        want = self.decoder.state_dict()
        missing = [k for k in want if k.startswith("layers.") and k not in layers]
        if missing:
            raise ModelError(f"the DFlash head lacks {missing[:3]}")
        with torch.no_grad():
            for key, tensor in layers.items():
                if key not in want:
                    raise ModelError(f"the DFlash head has an unexpected tensor {key}")
                self._copy(want[key], tensor)
            self._copy(self.fc.weight, state["fc.weight"])
            self._copy(self.hidden_norm.weight, state["hidden_norm.weight"])
            self._copy(self.decoder.norm.weight, state["norm.weight"])

    def inject(self, rows: np.ndarray, start: int) -> None:
        """The target's features [n, len(feature_layers) x H] of positions start.. into the cache."""
        import torch

        dec = self.decoder
        with torch.inference_mode():
            g = self.hidden_norm(self.fc(torch.as_tensor(np.asarray(rows), device=self.device).to(self.dtype)))
            n = g.shape[0]
            cos, sin = dec.rope(torch.arange(start, start + n, device=self.device), self.dtype)
            for i, layer in enumerate(dec.layers):
                k, v = dec.keys_values(layer, g, cos, sin)
                dec.k_cache[i, start : start + n], dec.v_cache[i, start : start + n] = k, v

    def block(self, anchor: int, pos: int, rows: int) -> TorchBlock:
        """[anchor, mask x (rows-1)] at positions pos.. through the layers: its final-normed rows."""
        import torch

        ids = torch.tensor([anchor] + [self.layout.mask_token] * (rows - 1), device=self.device)
        with torch.inference_mode():
            x = self.embed(ids) * self.layout.embed_scale
            mask = torch.ones(rows, pos + rows - self.lo, dtype=torch.bool, device=self.device)
            if self.layout.causal:
                mask = mask.tril(pos - self.lo)
            hidden = self.decoder.forward_embeddings(x, pos, lo=self.lo, mask=mask)
        return TorchBlock(self, hidden, 0 if self.layout.sample_from_anchor else 1)

    def logits(self, hidden) -> np.ndarray:
        """Logits [n, V] over the target's vocabulary (-inf outside a draft vocabulary) of output rows."""
        import torch

        with torch.inference_mode():
            if self.lm_head is not None:
                draft = self.lm_head(hidden).float()
            else:
                draft = half_scores(self, hidden, self.head_weight)
            if self.to_target is None:
                return draft.cpu().numpy()
            full = np.full((hidden.shape[0], self.vocab), -np.inf, np.float32)
            full[:, self.to_target] = draft.cpu().numpy()
            return full

    def markov_bias(self, prev: int) -> np.ndarray:
        """DSpark: the bias [V] on a row's logits from the token before it."""
        import torch

        with torch.inference_mode():
            w1 = self.markov_w1(torch.tensor([prev], device=self.device))
            bias = self.markov_w2(w1)[0].float().cpu().numpy()
        if self.to_target is None:
            return bias
        full = np.zeros(self.vocab, np.float32)
        full[self.to_target] = bias
        return full

    def confidence(self, row, prev: int) -> float:
        """DSpark's confidence head: the chance that a row's token (after ``prev``) is accepted."""
        import torch

        with torch.inference_mode():
            w1 = self.markov_w1(torch.tensor([prev], device=self.device))
            return float(torch.sigmoid(self.conf(torch.cat([row[None], w1], dim=-1))).item())


@dataclass
class TorchBlock:
    """A drafted block's final-normed rows; a token's logits (and DSpark's confidence) follow from its row
    and the token drafted before it."""

    head: TorchDFlashHead
    hidden: object  # [rows, H] on the device
    first: int  # the row of the first drafted token
    _logits: np.ndarray | None = field(default=None, repr=False)

    def row(self, i: int, prev: int) -> tuple[np.ndarray, float | None]:
        head = self.head
        if self._logits is None:  # every drafted row in one pass through the vocabulary matrix
            self._logits = head.logits(self.hidden[self.first :])
        logits = self._logits[i]
        if head.markov_w1 is None:
            return logits, None
        logits = logits + head.markov_bias(prev)
        conf = head.confidence(self.hidden[self.first + i], prev) if head.conf is not None else None
        return logits, conf
