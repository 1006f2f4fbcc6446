"""`localspec train-drafter --kind medusa|mlp`: Medusa heads and MLP speculators distilled from the target.

Both read the target's final hidden row h_t (what its LM head reads) and learn the tokens the target itself
would produce further on: with g_j the target's greedy token after position j (the label a draft must match
for greedy verification to keep it), Medusa head i at position t learns g_{t+i+1} (the token i + 2 places
ahead of t) from h_t alone; MLP stage i learns g_{t+i+1} from its state and the window's token t+i+1
(teacher forcing, as IBM trains its speculators on the target's own text). Each stage's cross-entropy counts
DECAY^i (Medusa's lambda_k). The heads are per position, so a step trains on POSITIONS random positions of a
window rather than all of them; held-out figures use every position.

Medusa: heads of one residual block, zero-initialised (x + SiLU(W x + b) starts as x), each with its own
vocabulary projection starting as the target's LM head (Medusa-1's recipe). MLP speculator: IBM's layout with
tie_weights (one embedding, head and norm shared by the stages, stages >= 1 one projection), the embedding
and head starting as the target's, the projections as the identity. Both are written in the released layout
(medusa.py and mlp_speculator.py load them; so would the projects that released them).
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.drafters.multihead.mlp_speculator import rms, stage_weights

MEDUSA_HEADS = 4
MLP_STAGES = 4
DECAY = 0.8
POSITIONS = 128  # positions per training step (all of them in evaluation)


class _PerPositionHead:
    """What Medusa and MLP training share: the target's rows and greedy tokens, the stage targets, the loss."""

    feature_layers = (-1,)
    depth: int
    weights_file: str

    def _frozen(self, target_model):
        t = target_model
        embed = t.embed.weight.detach().float().cpu()
        lm = embed if t.lm_head is None else t.lm_head.weight.detach().float().cpu()
        return embed, lm

    def target_data(self, backend, piece: Sequence[int]):
        from localspec.train.eagle3 import features_and_greedy

        return features_and_greedy(backend, piece)

    def loss(self, tokens, data, noise: float, gen) -> tuple:
        """(loss, per-stage top-1 agreement counts, positions counted) on one window: the counts over the
        positions every stage has a label for."""
        import torch
        import torch.nn.functional as F

        feats, labels = data
        n = len(tokens) - self.depth  # positions t whose every stage i has its label g_{t+i+1}
        if n <= 0:
            return torch.zeros((), requires_grad=torch.is_grad_enabled()), [0] * self.depth, 0
        pos = torch.arange(n)
        if torch.is_grad_enabled() and n > POSITIONS:
            pos = torch.randperm(n, generator=gen)[:POSITIONS]
        total, agree = 0.0, []  # (no feature noise: the heads read the target's own rows when drafting too)
        for i, logits in enumerate(self.stage_logits(feats[pos], tokens, pos)):
            want = labels[pos + i + 1]
            total = total + DECAY**i * F.cross_entropy(logits, want)
            agree.append(int((logits.argmax(-1) == want).sum()))
        return total / sum(DECAY**i for i in range(self.depth)), agree, len(pos)


class MedusaTrainHead(_PerPositionHead):
    weights_file = "medusa_lm_head.safetensors"

    def __init__(self, target_model, seed: int, heads: int = MEDUSA_HEADS) -> None:
        import torch
        from torch import nn

        torch.manual_seed(seed)
        h = target_model.cfg.hidden_size
        _, lm = self._frozen(target_model)
        self.depth, self.hidden = heads, h
        self.blocks = nn.ModuleList(nn.Linear(h, h) for _ in range(heads))
        self.lm = nn.ModuleList(nn.Linear(h, lm.shape[0], bias=False) for _ in range(heads))
        with torch.no_grad():
            for block, out in zip(self.blocks, self.lm, strict=True):
                block.weight.zero_()
                block.bias.zero_()
                out.weight.copy_(lm)

    def parameters(self):
        return [*self.blocks.parameters(), *self.lm.parameters()]

    def stage_logits(self, h, tokens, pos):
        import torch

        for block, out in zip(self.blocks, self.lm, strict=True):
            yield out(h + torch.nn.functional.silu(block(h)))

    def state_dict(self) -> dict:
        state = {}
        for i, (block, out) in enumerate(zip(self.blocks, self.lm, strict=True)):
            state[f"{i}.0.linear.weight"] = block.weight
            state[f"{i}.0.linear.bias"] = block.bias
            state[f"{i}.1.weight"] = out.weight
        return {k: v.detach().contiguous().clone() for k, v in state.items()}

    def config(self) -> dict:
        return {"medusa_num_heads": self.depth, "medusa_num_layers": 1, "hidden_size": self.hidden}


class MlpTrainHead(_PerPositionHead):
    weights_file = "model.safetensors"

    def __init__(self, target_model, seed: int, stages: int = MLP_STAGES) -> None:
        import torch
        from torch import nn

        torch.manual_seed(seed)
        h = target_model.cfg.hidden_size
        embed, lm = self._frozen(target_model)
        self.depth, self.hidden, self.vocab = stages, h, lm.shape[0]
        self.emb = nn.Embedding(self.vocab, h)
        self.head = nn.Linear(h, self.vocab, bias=False)
        self.proj = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(min(stages, 2)))
        self.ln = nn.LayerNorm(h)  # only its weight and bias are used: the normalisation is RMS (rms())
        with torch.no_grad():
            self.emb.weight.copy_(embed)
            self.head.weight.copy_(lm)
            for p in self.proj:
                p.weight.copy_(torch.eye(h))
        self.state_w, self.emb_w = stage_weights(stages, h)

    def parameters(self):
        return [*self.emb.parameters(), *self.head.parameters(), *self.proj.parameters(), *self.ln.parameters()]

    def stage_logits(self, h, tokens, pos):
        import math

        import torch

        state = rms(h) / math.sqrt(2)  # scale_input
        for i in range(self.depth):
            x = self.proj[min(i, 1)](state) + (self.emb_w / self.state_w) * self.emb(tokens[pos + i + 1])
            state = torch.nn.functional.gelu(rms(x) * self.ln.weight + self.ln.bias)
            yield self.head(state)

    def state_dict(self) -> dict:
        state = {
            "emb.0.weight": self.emb.weight,
            "head.0.weight": self.head.weight,
            "ln.0.weight": self.ln.weight,
            "ln.0.bias": self.ln.bias,
        }
        for i, p in enumerate(self.proj):
            state[f"proj.{i}.weight"] = p.weight
        return {k: v.detach().contiguous().clone() for k, v in state.items()}

    def config(self) -> dict:
        return {
            "architectures": ["MLPSpeculatorPreTrainedModel"],
            "model_type": "mlp_speculator",
            "emb_dim": self.hidden,
            "inner_dim": self.hidden,
            "n_predict": self.depth,
            "vocab_size": self.vocab,
            "scale_input": True,
            "tie_weights": True,
            "top_k_tokens_per_head": [1] * self.depth,
            "n_candidates": 1,
        }
