"""`localspec train-eagle --layout eagle3`: an EAGLE-3 head (Li et al. 2025) distilled from the target.

What it learns from, per corpus position j: the inputs of three target layers (the layers the head will
read at inference: 2, L//2, L-3), fused by ``fc`` into g_j, and the target's own greedy next token after
each position (the token a draft must match for greedy verification to keep it). The loss is the
cross-entropy of the head's prediction against that token over a reduced draft vocabulary: the corpus's
most frequent tokens, mapped back to target ids by d2t.

Training-time test (the EAGLE-3 paper's name): at inference the head drafts its second token from its own
output state, not from a target feature, so it is trained that way too. Step s (1..STEPS) of row j is the
pair (token j+s, state) at position j+s-1, where the state is g_j at step 1 and the step s-1 output of row
j after it; its query sees the step-1 keys of positions 0..j (the context the head's cache holds then) and
the keys of its own row's earlier steps (the drafted slots), as drafting does. Each step's loss counts
STEP_WEIGHT^(s-1).

The result is a folder in the released EAGLE-3 layout (`fc`, `midlayer.*`, `norm`, `lm_head`, `d2t`,
`t2d`), which eagle_heads.py loads for torch and `localspec convert-eagle` writes as a llama.cpp GGUF.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from localspec.train.save import EAGLE_LAYER_NAMES, head_config

STEPS = 3  # drafted tokens trained per position (training-time test)
STEP_WEIGHT = 0.8
DRAFT_VOCAB = 8192  # at most this many draft-vocabulary tokens (the corpus's most frequent)


def draft_vocabulary(labels: Sequence, eog: Sequence[int], limit: int = DRAFT_VOCAB) -> list[int]:
    """Target ids of the draft vocabulary, ascending: the tokens the target itself most often picks next
    in the corpus (what drafts must match), end-of-turn tokens kept."""
    counts = Counter(int(t) for row in labels for t in row)
    kept = {t for t, _ in counts.most_common(max(0, limit - len(eog)))} | set(eog)
    return sorted(kept)


def draft_lm_head(target_head, draft_ids: Sequence[int]) -> tuple:
    """(draft ids as a tensor, an LM head over them that starts as the target's rows, the map target id ->
    draft id with -100 outside the draft vocabulary)."""
    import torch
    from torch import nn

    ids = torch.tensor(sorted(draft_ids), dtype=torch.long)
    lm_head = nn.Linear(target_head.shape[1], len(ids), bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(target_head[ids])
    to_draft = torch.full((target_head.shape[0],), -100, dtype=torch.long)
    to_draft[ids] = torch.arange(len(ids))
    return ids, lm_head, to_draft


def features_and_greedy(backend, piece: Sequence[int]):
    """(the feature layers' rows [n, layers x H], the target's greedy next token after each position [n]) of
    one window: what EAGLE-3 and DFlash heads learn from."""
    import torch

    out = backend.forward(piece, return_hidden=True)
    return torch.from_numpy(out.hidden), torch.from_numpy(out.logits.argmax(-1))


class Eagle3TrainHead:
    """The EAGLE-3 modules, trainable: fc [H, 3H], one layer whose q/k/v read [norm(embedding); norm(state)],
    the final norm and the draft-vocabulary LM head. The target's embedding is read, frozen, not saved."""

    def __init__(self, target_model, layers: Sequence[int], seed: int) -> None:
        import torch
        from torch import nn

        from localspec.backends.torch.decoder import Decoder, DecoderConfig, RMSNorm

        torch.manual_seed(seed)
        t = target_model.cfg
        self.feature_layers, h = tuple(layers), t.hidden_size
        self.cfg = DecoderConfig(
            1, h, t.intermediate_size, 1, t.n_heads, t.n_kv_heads, t.head_dim, rms_eps=t.rms_eps,
            rope_theta=t.rope_theta, rope_scaling=t.rope_scaling, tie_embeddings=True, max_positions=t.max_positions,
        )  # fmt: skip
        self.decoder = Decoder(self.cfg)  # rotary tables, attention and MLP weights of its one layer
        layer = self.decoder.layers[0]
        c = self.cfg
        layer.q = nn.Linear(2 * h, c.n_heads * c.head_dim, bias=False)
        layer.k = nn.Linear(2 * h, c.n_kv_heads * c.head_dim, bias=False)
        layer.v = nn.Linear(2 * h, c.n_kv_heads * c.head_dim, bias=False)
        self.fc = nn.Linear(len(self.feature_layers) * h, h, bias=False)
        self.input_norm, self.hidden_norm, self.norm = (RMSNorm(h, c.rms_eps) for _ in range(3))
        target_head = target_model.embed.weight if target_model.lm_head is None else target_model.lm_head.weight
        self.target_head = target_head.detach().float().cpu()
        with torch.no_grad():  # the target's own final norm; small attention and MLP outputs at first
            self.norm.weight.copy_(target_model.norm.weight.detach().float().cpu())
            layer.o.weight.mul_(0.1)
            layer.down.weight.mul_(0.1)
        self.embed = target_model.embed.weight.detach().float().cpu()
        self.vocab_size = t.vocab_size
        self.lm_head = self.draft_ids = self.to_draft = None  # choose_vocabulary, once the labels are known

    def choose_vocabulary(self, draft_ids: Sequence[int]) -> None:
        """The draft vocabulary (target ids); its LM head starts as the target's rows for them."""
        self.draft_ids, self.lm_head, self.to_draft = draft_lm_head(self.target_head, draft_ids)

    def parameters(self):
        modules = (self.fc, self.decoder.layers, self.input_norm, self.hidden_norm, self.norm, self.lm_head)
        return [p for m in modules for p in m.parameters()]

    def target_data(self, backend, piece: Sequence[int]):
        return features_and_greedy(backend, piece)

    def loss(self, tokens, data, noise: float, gen) -> tuple:
        """(loss, step-1 top-1 agreement count, step-1 positions) on one window."""
        import torch
        import torch.nn.functional as F

        feats, labels = data
        n = len(tokens)
        g = self.fc(feats[: n - 1])
        if noise > 0:
            g = g + (torch.rand(g.shape, generator=gen) - 0.5) * noise * g.detach().abs().mean()
        layer, dec = self.decoder.layers[0], self.decoder
        total, agree, first = 0.0, 0, n - 1
        state, keys, values = g, None, []
        for s in range(1, STEPS + 1):
            m = n - s  # rows j = 0..m-1: token j+s at position j+s-1, predicting the target's token after j+s
            if m <= 0:
                break
            state = state[:m]
            positions = torch.arange(s - 1, s - 1 + m)
            cos, sin = dec.rope(positions, state.dtype)
            x = torch.cat([self.input_norm(self.embed[tokens[s : s + m]]), self.hidden_norm(state)], dim=-1)
            q, k, v = self._qkv(layer, x, cos, sin)
            if keys is None:
                keys = (k, v)  # step 1: the context's keys (row j = position j)
            values = [(kk[:m], vv[:m]) for kk, vv in values] + [(k, v)]
            out = state + layer.o(self._attend(q, keys, values[1:] if s > 1 else [], m))
            out = out + dec.mlp(layer, out)
            logits = self.lm_head(self.norm(out))
            want = self.to_draft[labels[s : s + m]]
            step_loss = F.cross_entropy(logits, want, ignore_index=-100)
            if torch.isfinite(step_loss):
                total = total + STEP_WEIGHT ** (s - 1) * step_loss
            if s == 1:
                agree = int(((logits.argmax(-1) == want) & (want >= 0)).sum())
            state = out
        return total, agree, first

    def _qkv(self, layer, x, cos, sin):
        from localspec.backends.torch.decoder import rotate

        c, n = self.cfg, x.shape[0]
        q = rotate(layer.q(x).view(n, c.n_heads, c.head_dim), cos, sin)
        k = rotate(layer.k(x).view(n, c.n_kv_heads, c.head_dim), cos, sin)
        return q, k, layer.v(x).view(n, c.n_kv_heads, c.head_dim)

    def _attend(self, q, context, own: list, m: int):
        """Row j's query over the context keys of rows 0..j and its own row's keys of earlier steps."""
        import torch

        c = self.cfg
        rep = c.n_heads // c.n_kv_heads
        k1, v1 = (t.repeat_interleave(rep, dim=1) for t in context)  # [rows, heads, hd]
        scale = c.head_dim**-0.5
        scores = torch.einsum("jhd,rhd->hjr", q, k1) * scale  # [heads, m, rows]
        rows = torch.arange(k1.shape[0])
        scores = scores.masked_fill(rows[None, None, :] > torch.arange(m)[None, :, None], float("-inf"))
        diag = [torch.einsum("jhd,jhd->hj", q, k.repeat_interleave(rep, dim=1)) * scale for k, _ in own]
        weights = torch.softmax(torch.cat([scores, *(d[..., None] for d in diag)], dim=-1), dim=-1)
        out = torch.einsum("hjr,rhd->jhd", weights[..., : k1.shape[0]], v1)
        for i, (_, v) in enumerate(own):
            out = out + weights[..., k1.shape[0] + i].T[..., None] * v.repeat_interleave(rep, dim=1)
        return out.reshape(m, c.n_heads * c.head_dim)

    def state_dict(self) -> dict:
        import torch

        layer = self.decoder.layers[0]
        state = {
            "fc.weight": self.fc.weight,
            "midlayer.input_layernorm.weight": self.input_norm.weight,
            "midlayer.hidden_norm.weight": self.hidden_norm.weight,
            "norm.weight": self.norm.weight,
            "lm_head.weight": self.lm_head.weight,
        }
        for ours, theirs in EAGLE_LAYER_NAMES.items():
            state[f"midlayer.{theirs}.weight"] = getattr(layer, ours).weight
        state = {k: v.detach().contiguous().clone() for k, v in state.items()}
        state["d2t"] = self.draft_ids - torch.arange(len(self.draft_ids))
        t2d = torch.zeros(self.vocab_size, dtype=torch.bool)
        t2d[self.draft_ids] = True
        state["t2d"] = t2d
        return state

    def config(self) -> dict:
        return head_config(
            self.cfg,
            "LlamaForCausalLMEagle3",
            vocab_size=self.vocab_size,
            draft_vocab_size=len(self.draft_ids),
            # the layers' outputs (SpecForge's convention): the inputs of layers + 1, which the head reads
            eagle_config={"eagle_aux_hidden_state_layer_ids": [i - 1 for i in self.feature_layers]},
        )
