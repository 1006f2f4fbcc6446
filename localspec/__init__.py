"""localspec: a local chat runner that answers faster with speculative decoding."""

__version__ = "0.1.0"
