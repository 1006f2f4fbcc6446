"""MLP speculators (IBM, Wertheimer et al. 2024; `--drafter mlp`, torch): a chain of small MLP stages on the
target's last hidden state and the tokens drafted so far (multihead.py drafts chains or trees from them).

Released layout (`model_type: mlp_speculator`; ibm-ai-platform/*-accelerator): config.json (`emb_dim`,
`inner_dim` (0: emb_dim), `n_predict`, `vocab_size`, `scale_input`, `tie_weights`) and model.safetensors
with per stage i `emb.{i}.weight` [V, inner], `proj.{i}.weight` (stage 0: [inner, emb_dim], then
[inner, inner]), `ln.{i}.weight`/`ln.{i}.bias` and `head.{i}.weight` [V, inner]. Stage i:

    state = GELU(LN_i(proj_i(state) + (emb_w / state_w) * emb_i(token)))      logits_i = head_i(state)

with state_w = 0.5 ** (0.5 / n_predict), emb_w = sqrt((1 - state_w^2) * inner / 2), LN an RMS
normalisation (eps 1e-6) with a learnt scale and shift, and, when `scale_input`, the input row first
RMS-normalised without parameters and divided by sqrt(2). With `tie_weights` the stages share one
embedding, head and norm, and stages >= 1 one projection: a checkpoint may store them once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from localspec.drafters.multihead.drafter import (
    MultiHeadDrafter,
    build_with_heads,
    check_width,
    config_json,
    read_state,
)
from localspec.errors import ConfigError, ModelError
from localspec.options import option

WEIGHTS = ("model.safetensors", "*.safetensors", "pytorch_model.bin")
EPS = 1e-6


@dataclass(frozen=True)
class MlpOptions:
    head: str | None = option(
        None,
        "an MLP speculator: a folder or a downloaded Hub repo (config.json with model_type mlp_speculator + "
        "model.safetensors); default: the model's in models.toml",
        toml=False,
        kind=str,
    )
    tree: int = option(
        0, "draft trees of N tokens (best paths over each stage's top tokens) instead of chains", toml=False
    )


class MlpDrafter(MultiHeadDrafter):
    name = "mlp"


def build(target, options, context) -> MlpDrafter:
    return build_with_heads(
        target, options, context, MlpDrafter, HEADS, what="an MLP speculator: config.json + model.safetensors"
    )


def stage_weights(n_predict: int, inner: int) -> tuple[float, float]:
    """(state_w, emb_w): the stage's weights of its state and of the token's embedding."""
    state_w = 0.5 ** (0.5 / n_predict)
    return state_w, math.sqrt((1 - state_w**2) * inner / 2)


def rms(x, eps: float = EPS):
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt()


class MlpSpeculator:
    def __init__(self, folder: Path, target) -> None:
        import torch

        self.folder = Path(folder)
        config = config_json(self.folder, "MLP speculator")
        if config.get("model_type") != "mlp_speculator":
            raise ConfigError(
                f"{self.folder}: config.json model_type is {config.get('model_type')!r}, not 'mlp_speculator'; "
                f"--mlp-head takes an MLP speculator (ibm-ai-platform/*-accelerator)"
            )
        try:
            emb_dim, n = int(config["emb_dim"]), int(config["n_predict"])
            inner = int(config.get("inner_dim") or emb_dim)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{self.folder}: config.json lacks emb_dim / n_predict ({exc})") from exc
        h, vocab = target.model.cfg.hidden_size, target.vocab_size
        if emb_dim != h:
            raise ConfigError(
                f"{self.folder}: the speculator reads {emb_dim}-wide hidden states, this target's are {h}: it was "
                f"trained for another model"
            )
        state = read_state(self.folder, WEIGHTS, "MLP speculator")
        tied = bool(config.get("tie_weights"))

        def get(name: str, i: int, shape: tuple):
            """Stage i's tensor ``name`` ("emb.{}.weight"), or under tie_weights the one it shares (stage 0's;
            stage 1's projection for later stages)."""
            shared = min(i, 1) if name.startswith("proj") else 0
            tensor = state.get(name.format(i), state.get(name.format(shared)) if tied else None)
            if tensor is None:
                raise ModelError(f"{self.folder}: the MLP speculator lacks {name.format(i)}; download it again")
            check_width(name.format(i), tensor, shape, self.folder, "MLP speculator")
            return tensor.to(target.device)

        self.stages = [
            {
                "emb": get("emb.{}.weight", i, (vocab, inner)),
                "proj": get("proj.{}.weight", i, (inner, emb_dim if i == 0 else inner)),
                "ln": get("ln.{}.weight", i, (inner,)),
                "ln_bias": get("ln.{}.bias", i, (inner,)),
                "head": get("head.{}.weight", i, (vocab, inner)),
            }
            for i in range(n)
        ]
        self.depth, self.inner, self.scale_input = n, inner, bool(config.get("scale_input"))
        self.state_w, self.emb_w = stage_weights(n, inner)
        self.device, self._torch = target.device, torch

    def prepare(self, row):
        torch = self._torch
        x = torch.as_tensor(row, device=self.device, dtype=torch.float32)
        return rms(x) / math.sqrt(2) if self.scale_input else x

    def stage(self, state, token: int, i: int):
        torch = self._torch
        s = self.stages[i]
        with torch.no_grad():
            x = state @ s["proj"].T + (self.emb_w / self.state_w) * s["emb"][token]
            x = torch.nn.functional.gelu(rms(x) * s["ln"] + s["ln_bias"])
            return (x @ s["head"].T).cpu().numpy(), x

    def describe(self) -> str:
        return f"MLP speculator: {self.depth} stages, inner width {self.inner}"


HEADS = {"torch": MlpSpeculator}  # the head loader per backend (the table row's; its keys are the backends it runs on)
