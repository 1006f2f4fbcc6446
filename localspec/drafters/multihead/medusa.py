"""Medusa heads (Cai et al. 2024, `--drafter medusa`, torch): K extra heads on the target's last hidden state,
head i predicting the token i + 1 places after the pending one; chains or trees (multihead.py).

Released layout (FasterDecoding/Medusa): config.json (`medusa_num_heads`, `medusa_num_layers`,
`base_model_name_or_path`) and `medusa_lm_head.safetensors` or `medusa_lm_head.pt` holding, per head i,
`{i}.{j}.linear.{weight,bias}` for its j < L residual blocks (x + SiLU(W x + b)) and `{i}.{L}.weight`, the
head's own projection to the vocabulary. A `medusa_head.` prefix (a whole MedusaModel's state) and vLLM's
names (`blocks.{i}.layers.{j}`, `lm_heads.{i}`) are read too. The heads and blocks are counted from the
tensors, not the config: the public vicuna-7b-v1.3 head's config says 2 heads while its weights hold 5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from localspec.drafters.multihead.drafter import (
    MultiHeadDrafter,
    build_with_heads,
    check_width,
    config_json,
    read_state,
)
from localspec.errors import ModelError
from localspec.options import option

WEIGHTS = ("medusa_lm_head.safetensors", "medusa_lm_head.pt", "model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class MedusaOptions:
    head: str | None = option(
        None,
        "Medusa heads: a folder or a downloaded Hub repo (config.json + medusa_lm_head.safetensors or .pt); "
        "default: the model's in models.toml",
        toml=False,
        kind=str,
    )
    tree: int = option(
        0, "draft trees of N tokens (best paths over the heads' top tokens) instead of chains", toml=False
    )


class MedusaDrafter(MultiHeadDrafter):
    name = "medusa"


def build(target, options, context) -> MedusaDrafter:
    return build_with_heads(
        target, options, context, MedusaDrafter, HEADS, what="config.json + medusa_lm_head.safetensors or .pt"
    )


class MedusaHeads:
    def __init__(self, folder: Path, target) -> None:
        import torch

        self.folder = Path(folder)
        config = config_json(self.folder, "Medusa heads")
        state = _canonical(read_state(self.folder, WEIGHTS, "Medusa heads"))
        heads = sorted({int(k.split(".")[0]) for k in state})
        if not heads or heads != list(range(len(heads))):
            raise ModelError(f"{self.folder}: no Medusa head tensors ({{i}}.{{j}}.linear.weight, {{i}}.{{L}}.weight)")
        layers = sum(1 for k in state if k.startswith("0.") and k.endswith(".linear.weight"))
        h, vocab = target.model.cfg.hidden_size, target.vocab_size
        self.blocks, self.lm = [], []
        for i in heads:
            blocks = []
            for j in range(layers):
                w, b = state.get(f"{i}.{j}.linear.weight"), state.get(f"{i}.{j}.linear.bias")
                if w is None or b is None:
                    raise ModelError(f"{self.folder}: Medusa head {i} lacks {i}.{j}.linear.weight/bias")
                check_width(f"{i}.{j}.linear.weight", w, (h, h), self.folder, "Medusa")
                blocks.append((w.to(target.device), b.to(target.device)))
            lm = state.get(f"{i}.{layers}.weight")
            if lm is None:
                raise ModelError(f"{self.folder}: Medusa head {i} lacks its vocabulary projection {i}.{layers}.weight")
            check_width(f"{i}.{layers}.weight", lm, (vocab, h), self.folder, "Medusa")
            self.blocks.append(blocks)
            self.lm.append(lm.to(target.device))
        self.depth, self.layers, self.device = len(heads), layers, target.device
        said = config.get("medusa_num_heads")
        self.note = f" (config.json says {said}: the weights decide)" if said not in (None, self.depth) else ""
        self._torch = torch

    def prepare(self, row):
        """Every head's logits at once: they all read the same row."""
        torch = self._torch
        with torch.no_grad():
            h = torch.as_tensor(row, device=self.device, dtype=torch.float32)
            out = []
            for blocks, lm in zip(self.blocks, self.lm, strict=True):
                x = h
                for w, b in blocks:
                    x = x + torch.nn.functional.silu(x @ w.T + b)
                out.append(x @ lm.T)
            return torch.stack(out).cpu().numpy()

    def stage(self, state, token: int, i: int):
        return state[i], state

    def describe(self) -> str:
        return f"Medusa: {self.depth} heads of {self.layers} residual block(s){self.note}"


def _canonical(state: dict) -> dict:
    """Tensor names as `{i}.{j}.linear.*` / `{i}.{L}.weight`, from the released or vLLM's naming."""
    out, vllm = {}, {}
    for key, value in state.items():
        key = key.removeprefix("medusa_head.")
        m = re.fullmatch(r"blocks\.(\d+)\.layers\.(\d+)\.(weight|bias)", key)
        if m:
            out[f"{m[1]}.{m[2]}.linear.{m[3]}"] = value
            continue
        m = re.fullmatch(r"lm_heads\.(\d+)\.weight", key)
        if m:
            vllm[int(m[1])] = value
            continue
        if re.fullmatch(r"\d+\.\d+\.(linear\.)?(weight|bias)", key):
            out[key] = value
    for i, value in vllm.items():  # after its blocks, whose count is known now
        layers = sum(1 for k in out if k.startswith(f"{i}.") and k.endswith(".linear.weight"))
        out[f"{i}.{layers}.weight"] = value
    return out


HEADS = {"torch": MedusaHeads}  # the head loader per backend (the table row's; its keys are the backends it runs on)
