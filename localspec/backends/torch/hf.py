"""Hugging Face checkpoint folders for the torch backend: config.json, *.safetensors (one file or sharded
with model.safetensors.index.json), tokenizer.json (through the `tokenizers` package) and the chat template
and special tokens of tokenizer_config.json / generation_config.json."""

from __future__ import annotations

import json
from pathlib import Path

from localspec.backends.tokenizer import Tokenizer
from localspec.errors import ConfigError, ModelError

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral", "mimo")  # mimo: a Qwen2 body (+ MTP layers, drafters/mtp_torch.py)
HF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "q",
    "self_attn.k_proj": "k",
    "self_attn.v_proj": "v",
    "self_attn.o_proj": "o",
    "self_attn.q_norm": "q_norm",
    "self_attn.k_norm": "k_norm",
    "post_attention_layernorm": "mlp_norm",
    "mlp.gate_proj": "gate",
    "mlp.up_proj": "up",
    "mlp.down_proj": "down",
}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ModelError(f"{path} is not valid JSON ({exc})") from exc


def decoder_config(folder: Path):
    from localspec.backends.torch.decoder import DecoderConfig

    cfg = _read_json(folder / "config.json")
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise ModelError(
            f"{folder}: model_type {kind!r} is not one the torch backend implements ({', '.join(SUPPORTED)})"
        )
    heads = cfg["num_attention_heads"]
    return DecoderConfig(
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        n_layers=cfg["num_hidden_layers"],
        n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads", heads),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        rms_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=cfg.get("rope_theta", 10000.0),
        rope_scaling=cfg.get("rope_scaling"),
        attn_bias=kind in ("qwen2", "mimo") or bool(cfg.get("attention_bias")),
        qk_norm=kind == "qwen3",
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_positions=cfg.get("max_position_embeddings", 4096),
    )


def load_hf(folder: Path, dtype):
    """(Decoder with the folder's weights, its tokenizer as a Backend)."""
    from safetensors.torch import load_file

    from localspec.backends.torch.decoder import Decoder

    cfg = decoder_config(folder)
    index = folder / "model.safetensors.index.json"
    files = sorted(set(_read_json(index)["weight_map"].values())) if index.exists() else ["model.safetensors"]
    state = {}
    for name in files:
        if not (folder / name).is_file():
            raise ModelError(f"{folder}: {name} is missing; download the checkpoint again (localspec pull)")
        for key, tensor in load_file(str(folder / name)).items():
            mapped = _map_name(key)
            if mapped == "lm_head.weight" and cfg.tie_embeddings:
                continue  # some tied checkpoints store the embedding twice
            if mapped is not None:
                state[mapped] = tensor.float()
    model = Decoder(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelError(f"{folder}: tensors missing {missing[:3]} / unexpected {unexpected[:3]}")
    return model.to(dtype), HfTokenizer(folder)


def _map_name(key: str) -> str | None:
    if key == "model.embed_tokens.weight":
        return "embed.weight"
    if key == "model.norm.weight":
        return "norm.weight"
    if key == "lm_head.weight":
        return key
    if key.startswith("model.layers."):
        rest = key[len("model.layers.") :]
        i, _, name = rest.partition(".")
        module, _, part = name.rpartition(".")
        if module in HF_LAYER_NAMES:
            return f"layers.{i}.{HF_LAYER_NAMES[module]}.{part}"
    return None  # rotary caches and the like


def _byte_decoder() -> dict:
    """GPT-2's byte-level alphabet: printable stand-ins for the 256 byte values, reversed."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=False)}


class HfTokenizer(Tokenizer):
    """A model folder's tokenizer.json (through the `tokenizers` package), its chat template and special
    tokens."""

    def __init__(self, folder: Path) -> None:
        try:
            import tokenizers
        except ImportError as exc:
            raise ConfigError("Hugging Face tokenizers need the tokenizers package: pip install tokenizers") from exc
        if not (folder / "tokenizer.json").is_file():
            raise ModelError(f"{folder}: no tokenizer.json")
        self.tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = _read_json(folder / "tokenizer_config.json")
        self.chat_template = config.get("chat_template")
        self.model_name = folder.name
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        self._special = {
            t.content if hasattr(t, "content") else t
            for t in self.tok.get_added_tokens_decoder().values()
            if getattr(t, "special", True)
        }
        self.bos_token = self._id(config.get("bos_token"))
        self.eos_token = self._id(config.get("eos_token"))
        self.add_bos = bool(config.get("add_bos_token", False)) and self.bos_token is not None
        eog = _read_json(folder / "generation_config.json").get("eos_token_id", self.eos_token)
        self.eog_tokens = frozenset(t for t in (eog if isinstance(eog, list) else [eog]) if t is not None)
        self._bytes = _byte_decoder()
        spec = json.loads(self.tok.to_str())
        self._byte_level = "ByteLevel" in json.dumps(spec.get("decoder") or {})
        self._kind = (spec.get("model") or {}).get("type", "")

    def _id(self, token) -> int | None:
        if isinstance(token, dict):
            token = token.get("content")
        return self.tok.token_to_id(token) if token else None

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def token_text(self, token: int) -> str:
        return self.tok.id_to_token(token) or ""

    def token_bytes(self, token: int) -> bytes:
        piece = self.tok.id_to_token(token) or ""
        if piece in self._special:
            return b""
        if self._byte_level:
            return bytes(self._bytes.get(c, 32) for c in piece)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")

    def kind(self) -> str:
        return self._kind
