"""`localspec train-eagle --layout dflash`: a DFlash block-diffusion head (Chen et al. 2026) distilled from
the target, written in the released layout (dflash_layout.py) that torch runs and llama.cpp gets converted.

What it learns from: the target's inputs of a few layers spread over its depth, for every corpus position,
and the target's own greedy next token after each position. A training block copies drafting exactly: for
an anchor position p (the pending token), the head's context is g_j = hidden_norm(fc(features_j)) for
j < p, each layer's keys and values of g (no input norm, as at inference); the block is [token p, mask,
mask, ...] at positions p.. with attention over that context and the whole block (bidirectional); row i's
output, through the final norm and the draft-vocabulary LM head, must be the target's token at p + i.
Many anchors share one pass over a window (each block sees only its own rows and the context before its
anchor). Row i's cross-entropy counts exp(-(i - 1) / DECAY) of the block size, as the DFlash paper weighs
the early rows that decide acceptance. Half the blocks are cut to a random length, since the adaptive
controller often drafts fewer rows than the block holds and the bidirectional rows then see fewer masks.

The context features are always the target's own (a DFlash head never reads its own output), so unlike
EAGLE no noise is put on them. The mask token is a target token outside the draft vocabulary (one the
target hardly ever picks, so an anchor rarely looks like a mask).
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.train.save import EAGLE_LAYER_NAMES, head_config

BLOCK = 16  # rows per block: the anchor and 15 drafted tokens
LAYERS = 2  # decoder layers of the head
TARGET_LAYERS = 5  # target layers whose outputs fc fuses
ANCHORS = 32  # blocks per training window
DECAY = 7 / 16  # row weights exp(-(i - 1) / (DECAY * BLOCK)): the paper's gamma = 7 for blocks of 16


def target_layer_ids(n_layers: int, count: int = TARGET_LAYERS) -> tuple[int, ...]:
    """Target layers (their outputs) spread from layer 1 to layer L-3, as the released heads pick them."""
    last = max(1, n_layers - 3)
    count = max(1, min(count, last))
    if count == 1:
        return (last,)
    return tuple(sorted({round(1 + (last - 1) * i / (count - 1)) for i in range(count)}))


class DFlashTrainHead:
    """The DFlash modules, trainable: fc [H, n·H] and hidden_norm, LAYERS Qwen3-style layers (q/k norms), the
    final norm, a draft-vocabulary LM head. The target's embedding is read, frozen, not saved."""

    def __init__(self, target_model, seed: int, layers: int = LAYERS, block: int = BLOCK) -> None:
        import torch
        from torch import nn

        from localspec.backends.torch.decoder import Decoder, DecoderConfig, RMSNorm

        torch.manual_seed(seed)
        t = target_model.cfg
        self.layer_ids = target_layer_ids(t.n_layers)
        # what the torch backend hands out: the input of layer i + 1, or the last layer's normed output
        self.feature_layers = tuple(-1 if i + 1 == t.n_layers else i + 1 for i in self.layer_ids)
        self.block, h = block, t.hidden_size
        self.cfg = DecoderConfig(
            1, h, t.intermediate_size, layers, t.n_heads, t.n_kv_heads, t.head_dim, rms_eps=t.rms_eps,
            rope_theta=t.rope_theta, rope_scaling=t.rope_scaling, qk_norm=True, tie_embeddings=True,
            max_positions=t.max_positions + block,
        )  # fmt: skip
        self.decoder = Decoder(self.cfg)
        self.fc = nn.Linear(len(self.layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, t.rms_eps)
        with torch.no_grad():  # the target's own final norm; small attention and MLP outputs at first
            self.decoder.norm.weight.copy_(target_model.norm.weight.detach().float().cpu())
            for layer in self.decoder.layers:
                layer.o.weight.mul_(0.1)
                layer.down.weight.mul_(0.1)
        target_head = target_model.embed.weight if target_model.lm_head is None else target_model.lm_head.weight
        self.target_head = target_head.detach().float().cpu()
        self.embed = target_model.embed.weight.detach().float().cpu()
        self.vocab_size = t.vocab_size
        self.lm_head = self.draft_ids = self.to_draft = self.mask_token = None  # choose_vocabulary

    def choose_vocabulary(self, draft_ids: Sequence[int]) -> None:
        """The draft vocabulary (target ids; its LM head starts as the target's rows) and the mask token."""
        from localspec.train.eagle3 import draft_lm_head

        self.draft_ids, self.lm_head, self.to_draft = draft_lm_head(self.target_head, draft_ids)
        outside = (self.to_draft < 0).nonzero().flatten()
        self.mask_token = int(outside[-1]) if len(outside) else self.vocab_size - 1

    def parameters(self):
        modules = (self.fc, self.hidden_norm, self.decoder.layers, self.decoder.norm, self.lm_head)
        return [p for m in modules for p in m.parameters()]

    def target_data(self, backend, piece: Sequence[int]):
        from localspec.train.eagle3 import features_and_greedy

        return features_and_greedy(backend, piece)

    def loss(self, tokens, data, noise: float, gen) -> tuple:
        """(loss, first-row top-1 agreement count, blocks) on one window. Under torch.no_grad (held-out
        evaluation) the anchors are evenly spaced and every block full, so the figures compare across epochs."""
        import torch
        import torch.nn.functional as F

        feats, labels = data
        n, b = len(tokens), self.block
        training = torch.is_grad_enabled()
        anchors, lengths = self._anchors(n, gen, training)
        k = len(anchors)
        if k == 0:
            return torch.zeros((), requires_grad=training), 0, 0
        rows = torch.arange(b)
        positions = (anchors[:, None] + rows[None, :]).reshape(-1)  # [k·b]
        ids = torch.full((k, b), self.mask_token, dtype=torch.long)
        ids[:, 0] = tokens[anchors]
        hidden = self.forward_blocks(self.embed[ids.reshape(-1)], positions, feats, anchors, lengths)
        target_pos = positions.view(k, b)[:, 1:]  # row i predicts the target's token at p + i
        valid = (target_pos < n) & (rows[None, 1:] < lengths[:, None])
        want = torch.full(target_pos.shape, -100, dtype=torch.long)
        want[valid] = self.to_draft[labels[target_pos[valid] - 1]]
        logits = self.lm_head(hidden.view(k, b, -1)[:, 1:])  # [k, b-1, V_draft]
        weight = torch.exp(-(rows[1:] - 1).float() / (DECAY * b)).expand(k, -1)
        per_row = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), want.reshape(-1), reduction="none")
        counted = (want.reshape(-1) >= 0).float() * weight.reshape(-1)
        loss = (per_row * counted).sum() / counted.sum().clamp(min=1e-6)
        first = want[:, 0]
        agree = int(((logits[:, 0].argmax(-1) == first) & (first >= 0)).sum())
        return loss, agree, int((first >= 0).sum())

    def _anchors(self, n: int, gen, training: bool):
        """Anchor positions (each with at least one context position and one target token after it) and
        block lengths: random ones in training, evenly spaced full blocks in evaluation."""
        import torch

        span = n - 2  # anchors 1 .. n-2
        if span <= 0:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        k = min(ANCHORS, span)
        if not training:
            anchors = 1 + torch.linspace(0, span - 1, k).round().long().unique()
            return anchors, torch.full((len(anchors),), self.block, dtype=torch.long)
        anchors = 1 + torch.randperm(span, generator=gen)[:k].sort().values
        lengths = torch.randint(2, self.block + 1, (k,), generator=gen)
        full = torch.rand(k, generator=gen) < 0.5
        return anchors, torch.where(full, self.block, lengths)

    def forward_blocks(self, x, positions, feats, anchors, lengths):
        """Final-normed rows [k·b, H] of k blocks (embeddings x [k·b, H] at ``positions``) over the context
        g of the window's features: block row r sees context j < its anchor and its own block's first
        ``lengths`` rows."""
        import torch

        from localspec.backends.torch.decoder import rotate

        dec, c = self.decoder, self.cfg
        k, b, n = len(anchors), self.block, feats.shape[0]
        g = self.hidden_norm(self.fc(feats))
        cos_c, sin_c = dec.rope(torch.arange(n), g.dtype)
        cos_b, sin_b = dec.rope(positions, g.dtype)
        block_of = torch.arange(k).repeat_interleave(b)
        context = torch.arange(n)[None, :] < anchors[block_of][:, None]  # [k·b, n]
        row = torch.arange(b).repeat(k)
        own = (block_of[:, None] == block_of[None, :]) & (row[None, :] < lengths[block_of][:, None])
        mask = torch.cat([context, own], dim=1)
        for layer in dec.layers:
            h = layer.attn_norm(x)
            q = rotate(layer.q_norm(layer.q(h).view(-1, c.n_heads, c.head_dim)), cos_b, sin_b)
            kb, vb = dec.keys_values(layer, h, cos_b, sin_b)
            kc, vc = dec.keys_values(layer, g, cos_c, sin_c)
            x = x + layer.o(dec.attention(q, torch.cat([kc, kb]), torch.cat([vc, vb]), mask))
            x = x + dec.mlp(layer, x)
        return dec.norm(x)

    def state_dict(self) -> dict:
        import torch

        state = {
            "fc.weight": self.fc.weight,
            "hidden_norm.weight": self.hidden_norm.weight,
            "norm.weight": self.decoder.norm.weight,
            "lm_head.weight": self.lm_head.weight,
        }
        names = {**EAGLE_LAYER_NAMES, "attn_norm": "input_layernorm"}
        names |= {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
        for i, layer in enumerate(self.decoder.layers):
            for ours, theirs in names.items():
                state[f"layers.{i}.{theirs}.weight"] = getattr(layer, ours).weight
        state = {key: v.detach().contiguous().clone() for key, v in state.items()}
        state["d2t"] = self.draft_ids - torch.arange(len(self.draft_ids))
        return state

    def config(self) -> dict:
        config = head_config(
            self.cfg,
            "DFlashDraftModel",
            vocab_size=self.vocab_size,
            draft_vocab_size=len(self.draft_ids),
            block_size=self.block,
            dflash_config={"target_layer_ids": list(self.layer_ids), "mask_token_id": self.mask_token},
        )
        config["num_hidden_layers"] = self.cfg.n_layers
        config["model_type"] = "qwen3"
        return config
