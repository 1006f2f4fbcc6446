"""The PyTorch backend: `torch_decoder.Decoder` behind the Backend interface, with hidden states.

Loads a GGUF file (weights dequantized with the `gguf` package; tokenizer and chat template from the same
file through llama.cpp's vocabulary-only loader) or a Hugging Face checkpoint folder (`torch_hf.py`).
bf16 on CUDA, fp32 on CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from localspec.backends.base import Backend, Capabilities, ModelBackend, ModelInfo
from localspec.backends.tokenizer import Tokenizer
from localspec.backends.torch.memory import fit_context
from localspec.backends.torch.rows import TorchRows
from localspec.cpus import default_threads
from localspec.errors import ConfigError, ContextOverflow, ModelError
from localspec.types import ForwardOut

DEFAULT_CTX = 4096
STEP_MODES = ("auto", "graphs", "eager", "off")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise ConfigError("the torch backend needs PyTorch: pip install 'localspec[torch]'") from exc
    return torch


class TorchBackend(ModelBackend):
    name = "torch"
    capabilities = Capabilities(can_truncate=True, hidden_states=True, tree_attention=True, feature_layers=True)

    def __init__(
        self,
        path,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        device: str | None = None,
        dtype: str | None = None,
        hidden_layers: Sequence[int] = (-1,),
        steps: str = "auto",
        **_ignored,
    ) -> None:
        super().__init__()
        torch = _torch()
        self.path = Path(path)
        if not self.path.exists():
            raise ModelError(f"{self.path} not found")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = (
            getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        )
        if n_threads or self.device.type == "cpu":  # on CUDA torch keeps its own: CPU threads hardly matter there
            torch.set_num_threads(n_threads or default_threads())
        if self.path.is_dir():
            from localspec.backends.torch.hf import load_hf

            self.model, self.tokenizer = load_hf(self.path, self.dtype)
        else:
            from localspec.backends.llama_cpp.vocab import LlamaVocab

            self.model = load_gguf(self.path, self.dtype)
            self.tokenizer = LlamaVocab.load(self.path)
        self._setup(n_ctx, hidden_layers, steps)

    @classmethod
    def from_decoder(
        cls, model, tokenizer: Tokenizer, n_ctx: int = 512, hidden_layers: Sequence[int] = (-1,), steps: str = "auto"
    ):
        """A backend around a Decoder built in memory (tests, tools) and any tokenizer."""
        self = cls.__new__(cls)
        Backend.__init__(self)
        self.path, self.model, self.tokenizer = Path("<memory>"), model, tokenizer
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self._setup(n_ctx, hidden_layers, steps)
        return self

    def _setup(self, n_ctx: int | None, hidden_layers: Sequence[int], steps: str = "auto") -> None:
        cfg, params = self.model.cfg, list(self.model.parameters())
        # what still has to go onto the device: the weights (unless built there) and the KV cache
        moving = sum(p.numel() * p.element_size() for p in params if p.device != self.device)
        kv_per_token = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * params[0].element_size()
        asked = min(n_ctx or DEFAULT_CTX, cfg.max_positions)
        name = self.path.name if self.path.name != "<memory>" else "the model"
        self.n_ctx, note = fit_context(self.device, name, moving, kv_per_token, asked)
        placement = f"{self.device} {str(self.dtype).removeprefix('torch.')}" + (f" · {note}" if note else "")
        self.info = ModelInfo(
            placement=placement,
            train_ctx=cfg.max_positions,
            n_params=sum(p.numel() for p in params),
            size_bytes=sum(p.numel() * p.element_size() for p in params),
        )
        self.model.to(self.device).eval()
        self.model.allocate_cache(self.n_ctx)
        self.set_steps(steps)
        self.vocab_size = cfg.vocab_size
        self.model_name = self.tokenizer.model_name
        self.set_feature_layers(hidden_layers)

    def set_steps(self, mode: str) -> None:
        """How logits-only steps run (torch_graphs.py). ``mode``: auto (CUDA graphs on a GPU, the ordinary step
        elsewhere), graphs, eager (the fixed-shape step without capture: tests, comparisons) or off. The load
        report says which, and the capture time."""
        if mode not in STEP_MODES:
            raise ConfigError(f"torch steps must be one of {', '.join(STEP_MODES)}, got {mode!r}")
        cuda = self.device.type == "cuda"
        self.steps = None
        loaded = self.info.placement.partition(" · CUDA graphs")[0]
        self.info = replace(self.info, placement=loaded)
        if mode == "off" or (mode == "auto" and not cuda):
            return
        if mode == "graphs" and not cuda:
            raise ConfigError(f"CUDA graphs need a CUDA device, not {self.device}")
        from localspec.backends.torch.graphs import StaticSteps

        steps = StaticSteps(self.model, self.n_ctx, capture=mode != "eager")
        if steps.captured:
            note = f" · CUDA graphs: {len(steps.graphs)} window sizes captured in {steps.capture_s:.1f} s"
            self.info = replace(self.info, placement=loaded + note)
        elif mode != "eager":
            note = " · CUDA graphs off: a captured step differed from the eager one"
            self.info = replace(self.info, placement=loaded + note)
            return
        self.steps = steps

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        """Which hidden states ``forward(return_hidden=True)`` and ``prefill_features`` return, concatenated
        per token in this order: layer i's input, or -1 for the last layer's normed output (EAGLE-1's
        feature); EAGLE-3 asks for three."""
        n = self.model.cfg.n_layers
        bad = [i for i in layers if not -1 <= i < n]
        if bad or not layers:
            raise ConfigError(f"hidden layers {tuple(layers)} asked of a {n}-layer model")
        self.hidden_layers = tuple(layers)
        self.feature_width = self.model.cfg.hidden_size * len(self.hidden_layers)

    # -- cache ----------------------------------------------------------------------------------------
    def truncate(self, keep: int) -> None:
        del self._tokens[max(0, keep) :]  # positions past the length are simply overwritten later

    def _prefill_chunk(self, tokens: Sequence[int], features: bool) -> np.ndarray | None:
        _, hidden = self._run(tokens, logits=False, hidden=self.hidden_layers if features else ())
        return self._features(hidden) if features else None

    def _features(self, hidden: dict) -> np.ndarray:
        torch = _torch()
        return torch.cat([hidden[i] for i in self.hidden_layers], dim=-1).float().cpu().numpy()

    def forward(self, tokens: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        logits, hidden = self._run(tokens, logits=True, hidden=self.hidden_layers if return_hidden else ())
        return ForwardOut(TorchRows(logits), self._features(hidden) if return_hidden else None)

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        """Verify a tree in one pass: tokens[0] is the pending token, tokens[i + 1] a draft token whose parent
        is draft token parents[i] (-1: the pending token). Each sits at position pending + its depth and
        attends to the cache and its own ancestors; row i of the output follows token i. The cache then
        holds every node until ``accept_path`` keeps one branch."""
        n = len(tokens)
        up = [-1] + [p + 1 for p in parents]  # parents in tree rows (row 0: the pending token)
        depth = [0] * n
        ancestors = np.eye(n, dtype=bool)  # row i sees window slot j: itself and its ancestors
        for i in range(1, n):
            depth[i] = depth[up[i]] + 1
            ancestors[i, :i] = ancestors[up[i], :i]
        self._tree_start = len(self._tokens)
        logits, hidden = self._run(
            tokens, logits=True, hidden=self.hidden_layers if return_hidden else (), tree=(depth, ancestors)
        )
        return ForwardOut(TorchRows(logits), self._features(hidden) if return_hidden else None)

    def accept_path(self, path: Sequence[int]) -> None:
        """After ``forward_tree``: keep the pending token and the draft tokens ``path`` (a branch, root first),
        moving their keys and values to consecutive slots; the rest is cut off."""
        start, m = self._tree_start + 1, self.model
        src = [start + i for i in path]
        dst = list(range(start, start + len(path)))
        if src != dst:
            m.k_cache[:, dst] = m.k_cache[:, src]
            m.v_cache[:, dst] = m.v_cache[:, src]
            tokens = [self._tokens[s] for s in src]
            self._tokens[start : start + len(path)] = tokens
        del self._tokens[start + len(path) :]

    def _run(self, tokens: Sequence[int], logits: bool, hidden: Sequence[int] = (), tree=None):
        """The model over ``tokens`` in the next cache slots: a causal chain, or a tree given as (each
        token's depth, the [n, n] bool array of the window slots each row sees). Logits-only steps that fit
        a bucket take the fixed-shape step (torch_graphs.py: a CUDA graph on a GPU)."""
        torch = _torch()
        start, n = len(self._tokens), len(tokens)
        if start + n > self.n_ctx:
            raise ContextOverflow(f"the context is full ({self.n_ctx} tokens); start a new chat or raise --ctx")
        depths, ancestors = tree if tree is not None else (None, None)
        if self.steps is not None and logits and not hidden and self.steps.fits(n, start):
            out = self.steps.run(tokens, start, depths, ancestors), {}
        else:
            positions = mask = None
            if tree is not None:
                positions = torch.tensor([start + d for d in depths], device=self.device)
                mask = torch.ones(n, start + n, dtype=torch.bool)
                mask[:, start:] = torch.from_numpy(ancestors)
                mask = mask.to(self.device)
            out = self._pass(tokens, start, logits, hidden, positions, mask)
        self._tokens.extend(int(t) for t in tokens)
        return out

    def _pass(self, tokens: Sequence[int], start: int, logits: bool, hidden: Sequence[int], positions, mask):
        """One forward of the model over ``tokens`` at ``start`` (a slot hands it to the batch: slots.py)."""
        ids = _torch().tensor(list(tokens), dtype=_torch().long, device=self.device)
        return self.model(ids, start, logits=logits, hidden_layers=hidden, positions=positions, mask=mask)

    def slots(self, count: int):
        from localspec.backends.torch.slots import open_slots  # noqa: PLC0415 - it builds on this class

        return open_slots(self, count)

    def build_id(self) -> str:
        torch = _torch()
        return f"torch {torch.__version__} {self.device} {self.dtype} threads {torch.get_num_threads()}"

    def memory_bytes(self) -> int:
        model = self.model
        cache = 0 if model.k_cache is None else 2 * model.k_cache.numel() * model.k_cache.element_size()
        return self.info.size_bytes + cache


# -- GGUF ------------------------------------------------------------------------------------------------
_LAYER_NAMES = {
    "attn_norm": "attn_norm",
    "attn_q": "q",
    "attn_k": "k",
    "attn_v": "v",
    "attn_output": "o",
    "attn_q_norm": "q_norm",
    "attn_k_norm": "k_norm",
    "ffn_norm": "mlp_norm",
    "ffn_gate": "gate",
    "ffn_up": "up",
    "ffn_down": "down",
}
SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")
NEOX = ("qwen2", "qwen3")  # rotate-half rope, as Hugging Face stores q/k: no rows to un-interleave


def load_gguf(path: Path, dtype):
    """A Decoder with the weights of a GGUF file, dequantized."""
    torch = _torch()
    try:
        import gguf
    except ImportError as exc:
        raise ConfigError("reading GGUF weights into PyTorch needs the gguf package: pip install gguf") from exc
    from localspec.backends.gguf_meta import read_metadata
    from localspec.backends.torch.decoder import Decoder, DecoderConfig

    meta = read_metadata(path)
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED:
        raise ModelError(
            f"{path}: architecture {arch!r} is not one the torch backend implements "
            f"({', '.join(SUPPORTED)}); use the llama.cpp backend"
        )
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}

    def weight(name: str) -> np.ndarray:
        t = tensors[name]
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        return np.asarray(data, dtype=np.float32).reshape(tuple(int(d) for d in reversed(t.shape)))

    a = f"{arch}."
    n_heads, hidden = int(meta[a + "attention.head_count"]), int(meta[a + "embedding_length"])
    n_kv = int(meta.get(a + "attention.head_count_kv", n_heads))
    head_dim = int(meta.get(a + "attention.key_length", hidden // n_heads))
    embed = weight("token_embd.weight")
    cfg = DecoderConfig(
        vocab_size=embed.shape[0],
        hidden_size=hidden,
        intermediate_size=int(meta[a + "feed_forward_length"]),
        n_layers=int(meta[a + "block_count"]),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        rms_eps=float(meta.get(a + "attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(meta.get(a + "rope.freq_base", 10000.0)),
        attn_bias="blk.0.attn_q.bias" in tensors,
        qk_norm="blk.0.attn_q_norm.weight" in tensors,
        tie_embeddings="output.weight" not in tensors,
        max_positions=int(meta.get(a + "context_length", 4096)),
        rope_freq_factors=tuple(weight("rope_freqs.weight").tolist()) if "rope_freqs.weight" in tensors else None,
    )
    state = {"embed.weight": embed, "norm.weight": weight("output_norm.weight")}
    if not cfg.tie_embeddings:
        state["lm_head.weight"] = weight("output.weight")
    for (i, dst, part), name in _layer_tensors(cfg.n_layers, tensors):
        w = weight(name)
        src = name.split(".")[2]
        if arch not in NEOX and src in ("attn_q", "attn_k"):
            # llama.cpp's converter interleaves q/k rows for its rotary layout; undo it
            w = _unpermute(w, n_heads if src == "attn_q" else n_kv)
        state[f"layers.{i}.{dst}.{part}"] = w
    model = Decoder(cfg)
    missing, unexpected = model.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    if [m for m in missing if m != "inv_freq"] or unexpected:
        raise ModelError(f"{path}: tensors missing {missing[:3]} / unexpected {unexpected[:3]} for a {arch} model")
    return model.to(dtype)


def _layer_tensors(n_layers: int, tensors: dict):
    """((layer, our name, weight|bias), GGUF tensor name) for every layer tensor the file has."""
    for i in range(n_layers):
        for src, dst in _LAYER_NAMES.items():
            for part in ("weight", "bias"):
                name = f"blk.{i}.{src}.{part}"
                if name in tensors:
                    yield (i, dst, part), name


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
