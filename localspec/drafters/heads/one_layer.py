"""A one-layer decoder head on a torch target: its own KV cache (slot j for context position j, attended
from ``lo``, the first slot filled, and TREE_SLOTS more for a drafted tree), the target's embedding unless it
has its own, its scores in half precision on a CPU. EAGLE-1's shape (Eagle1Head: fc([embed(token);
feature]) through one Llama layer, read by the target's LM head) is also MiMo's MTP layer's
(drafters/mtp/torch_head.py); EAGLE-3 builds on EagleHead (drafters/eagle/torch_head.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backends.torch.hf import HF_LAYER_NAMES
from localspec.drafters.heads.feature_drafter import TREE_SLOTS
from localspec.drafters.heads.torch_ops import half_scores
from localspec.errors import ConfigError, ModelError


class EagleHead:
    """What both generations share: a one-layer Decoder for the cache and rotary tables, the LM head."""

    version = 0
    feature_layers: tuple[int, ...] = (-1,)

    def _setup(self, config: dict, state: dict, target, in_features: int, attn_bias: bool = False) -> None:
        from localspec.backends.torch.decoder import Decoder, DecoderConfig

        t = target.model.cfg
        hidden = t.hidden_size  # eagle_layout checked the checkpoint's
        heads = config.get("num_attention_heads", t.n_heads)
        own = state.get("embed_tokens.weight")  # else the target's embedding is shared, not copied
        self.cfg = DecoderConfig(
            t.vocab_size if own is not None else 1,
            hidden,
            config.get("intermediate_size", t.intermediate_size),
            1,
            heads,
            config.get("num_key_value_heads", heads),
            config.get("head_dim", hidden // heads),
            rms_eps=config.get("rms_norm_eps", t.rms_eps),
            rope_theta=config.get("rope_theta", t.rope_theta),
            rope_scaling=config.get("rope_scaling", t.rope_scaling),
            attn_bias=attn_bias,
            tie_embeddings=True,
            max_positions=t.max_positions + TREE_SLOTS,
        )
        self.decoder = Decoder(self.cfg)
        if own is None:
            self.decoder.embed = target.model.embed
        else:
            import torch

            if tuple(own.shape) != (t.vocab_size, hidden):
                raise ConfigError(
                    f"the EAGLE head's embedding is {tuple(own.shape)}, the target's vocabulary "
                    f"{t.vocab_size} x {hidden}: it belongs to another model"
                )
            with torch.no_grad():
                self.decoder.embed.weight.copy_(own)
        if in_features != hidden:  # EAGLE-3 attention reads [embedding; hidden]
            from torch import nn

            layer, c = self.decoder.layers[0], self.cfg
            layer.q = nn.Linear(in_features, c.n_heads * c.head_dim, bias=False)
            layer.k = nn.Linear(in_features, c.n_kv_heads * c.head_dim, bias=False)
            layer.v = nn.Linear(in_features, c.n_kv_heads * c.head_dim, bias=False)
        self.device, self.dtype = target.device, next(target.model.parameters()).dtype
        self.lo = 0

    def _finish(self, target, modules: Sequence) -> None:
        for module in (self.decoder, *modules):
            module.to(device=self.device, dtype=self.dtype).eval()
        self.decoder.allocate_cache(target.n_ctx + TREE_SLOTS)

    def _load_layer(self, state: dict, prefix: str) -> None:
        """Load the Llama layer saved under ``prefix`` (HF names) into the decoder."""
        import torch

        layer = {}
        for key, tensor in state.items():
            if key.startswith(prefix):
                module, _, part = key[len(prefix) :].rpartition(".")
                if module in HF_LAYER_NAMES:
                    layer[f"layers.0.{HF_LAYER_NAMES[module]}.{part}"] = tensor
        missing = [
            k for k in ("q", "k", "v", "o", "gate", "up", "down", "mlp_norm") if f"layers.0.{k}.weight" not in layer
        ]
        if missing:
            raise ModelError(f"EAGLE head: missing layer weights {missing} under {prefix}")
        with torch.no_grad():
            result = self.decoder.load_state_dict(layer, strict=False)
        bad = [k for k in result.unexpected_keys]
        if bad:
            raise ModelError(f"EAGLE head: unexpected tensors {bad[:3]}")

    def fuse(self, rows):
        """The head's hidden input for target features (numpy rows of the backend's feature_layers, concatenated)."""
        import torch

        return torch.as_tensor(rows, device=self.device).to(self.dtype)

    def step(self, tokens: Sequence[int], hidden, start: int, positions=None, mask=None):
        raise NotImplementedError

    def logits_t(self, out):
        """Next-token logits over the target's vocabulary, float32 on the device."""
        raise NotImplementedError

    def logits(self, out) -> np.ndarray:
        return self.logits_t(out).cpu().numpy()

    def top(self, out, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best next tokens after each row of ``out``: (log-probabilities, token ids), [rows, k] each."""
        import torch

        with torch.inference_mode():
            best = torch.topk(torch.log_softmax(self.logits_t(out), dim=-1), k, dim=-1)
        return best.values.float().cpu().numpy(), best.indices.cpu().numpy()

    @staticmethod
    def max_tree_depth(width: int) -> int:
        return TREE_SLOTS // width  # the cache has TREE_SLOTS slots past the context

    def tree(self, base: int) -> TorchTree:
        return TorchTree(self, base)

    def _scores(self, x, weight):
        return half_scores(self, x, weight)

    def _ids(self, tokens: Sequence[int]):
        import torch

        return torch.tensor(list(tokens), dtype=torch.long, device=self.device)


class Eagle1Head(EagleHead):
    version = 1

    def __init__(self, config: dict, state: dict, target, layout=None) -> None:
        from torch import nn

        self._setup(config, state, target, target.model.cfg.hidden_size)
        hidden = self.cfg.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias="fc.bias" in state)
        fc = {"weight": state["fc.weight"], **({"bias": state["fc.bias"]} if "fc.bias" in state else {})}
        self._load_layer(state, "layers.0.")
        self.fc.load_state_dict(fc)
        self.decoder.layers[0].attn_norm = nn.Identity()  # layer 0 of an EAGLE head has no input norm
        self.decoder.norm = nn.Identity()  # its output is a feature: the target's LM head reads it as is
        self.lm_head = target.model.embed.weight if target.model.lm_head is None else target.model.lm_head.weight
        self._finish(target, [self.fc])

    def step(self, tokens, hidden, start, positions=None, mask=None):
        import torch

        with torch.inference_mode():
            x = self.fc(torch.cat([self.decoder.embed(self._ids(tokens)), hidden.to(self.dtype)], dim=-1))
            return self.decoder.forward_embeddings(x, start, lo=self.lo, positions=positions, mask=mask)

    def logits_t(self, out):
        import torch

        with torch.inference_mode():
            return self._scores(out, self.lm_head)


class TorchTree:
    """One tree's expansion in a torch head's cache: expanded nodes take the slots after the context, and
    each row sees the context and the slots of its ancestors (its own included)."""

    def __init__(self, head: EagleHead, base: int) -> None:
        self.head, self.base, self.slot = head, base, base
        self.slots: dict[int, int] = {}

    def step(self, tokens: Sequence[int], inputs: Sequence, nodes: Sequence[int], parents: Sequence[int], position):
        import torch

        head, n = self.head, len(nodes)
        mask = torch.zeros(n, self.slot + n - head.lo, dtype=torch.bool, device=head.device)
        mask[:, : self.base - head.lo] = True
        for r, node in enumerate(nodes):
            self.slots[node] = self.slot + r
            a = node
            while a >= 0:
                mask[r, self.slots[a] - head.lo] = True
                a = parents[a]
        positions = torch.full((n,), position, device=head.device)
        out = head.step(tokens, torch.cat(list(inputs)), self.slot, positions=positions, mask=mask)
        self.slot += n
        return out

    def end(self) -> None:
        """Nothing to undo: the next feed overwrites the slots from the context's end."""
