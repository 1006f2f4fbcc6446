"""The EAGLE drafter: a head on the torch backend (EAGLE-1/2/3, `torch_head.py`), MLX (`mlx_head.py`, chains)
or llama.cpp (EAGLE-3 GGUF heads, `llama_head.py`), drafting chains or EAGLE-2 trees as every feature-fed head
does (drafters/heads/feature_drafter.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localspec.drafters.base import head_for
from localspec.drafters.eagle.torch_head import load_eagle_head
from localspec.drafters.heads.feature_drafter import TREE_WIDTH, FeatureHeadDrafter
from localspec.drafters.heads.files import head_folder, is_gguf_head
from localspec.errors import ConfigError
from localspec.options import option


@dataclass(frozen=True)
class EagleOptions:
    head: str | None = option(
        None,
        "an EAGLE head: a folder or a downloaded Hub repo (torch, MLX), an eagle3 GGUF (llama.cpp); default: "
        "the model's in models.toml for the backend",
        toml=False,
        kind=str,
    )
    tree: int = option(
        0,
        "draft trees of N tokens (EAGLE-2 dynamic trees, verified with tree attention) instead of chains",
        toml=False,
    )


def build(target, options: EagleOptions, context) -> EagleDrafter:
    if not options.head:
        raise ConfigError(
            "--drafter eagle needs --eagle-head FOLDER|REPO|FILE (an EAGLE-1/2/3 head: config.json + "
            "pytorch_model.bin or model.safetensors; on llama.cpp an eagle3 GGUF, which `localspec convert-eagle` "
            "writes; `localspec train-eagle` makes a head)"
        )
    return EagleDrafter(target, head_folder(options.head), context.seed, tree_nodes=options.tree)


class EagleDrafter(FeatureHeadDrafter):
    name = "eagle"

    def __init__(
        self,
        target,
        head_folder: Path,
        seed: int | None = None,
        tree_nodes: int = 0,
        tree_width: int = TREE_WIDTH,
    ) -> None:
        """The head in ``head_folder`` (a folder, a downloaded repo or a GGUF, per backend: ``HEADS``)."""

        def load():
            return head_for(HEADS, target, "EAGLE heads")(Path(head_folder), target)

        super().__init__(target, load, seed, tree_nodes, tree_width)


def _llama_head(path: Path, target):
    """An EAGLE-3 head for a llama.cpp target: a GGUF file of architecture eagle3 (eagle_llama.py)."""
    from localspec.drafters.eagle.llama_head import LlamaEagle3Head

    if path.is_dir():  # a downloaded repo holding the GGUF head
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            path = found[0]
    if not is_gguf_head(path):
        raise ConfigError(
            f"{path}: on llama.cpp an EAGLE head is a GGUF file (architecture eagle3); "
            f"`localspec convert-eagle {path} --target MODEL.gguf -o HEAD.gguf` writes one from a Hugging Face "
            f"EAGLE-3 folder, or run this head with --backend torch"
        )
    return LlamaEagle3Head(path, target)


def _mlx_head(folder: Path, target):
    """An EAGLE head on the MLX backend (chains; mlx_head.py)."""
    from localspec.drafters.eagle.mlx_head import MlxEagleHead

    return MlxEagleHead(folder, target)


# the head loader per backend (the table row's; its keys are the backends eagle runs on)
HEADS = {"llama.cpp": _llama_head, "mlx": _mlx_head, "torch": load_eagle_head}
