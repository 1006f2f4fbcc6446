"""Model backends. Each is imported lazily so that a missing optional dependency only matters when used."""

from __future__ import annotations

from localspec.errors import ConfigError

BACKENDS = ("llama.cpp", "torch", "mlx")


def load_backend(name: str, path: str, **options):
    """Load ``path`` with the backend called ``name``; options are the backend's own load options."""
    steps = options.pop("steps", "auto")  # the torch backend's own
    if name == "llama.cpp":
        from localspec.backends.llama_cpp.backend import LlamaCppBackend

        return LlamaCppBackend(path, **options)
    if name == "torch":
        from localspec.backends.torch.backend import TorchBackend

        options.pop("n_gpu_layers", None)
        options.pop("on_load", None)
        return TorchBackend(path, steps=steps, **options)
    if name == "mlx":
        from localspec.backends.mlx.backend import MlxBackend

        return MlxBackend(path, n_ctx=options.get("n_ctx"))
    raise ConfigError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
