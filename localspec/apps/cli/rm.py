"""`localspec rm`: delete a model's downloaded files from the Hugging Face cache."""

from __future__ import annotations

NAMES = ("rm",)


def add_parser(sub, common) -> None:
    rm = sub.add_parser("rm", help="delete a model's downloaded files from the Hugging Face cache")
    rm.add_argument("model", help="a name from models.toml")


def run(args) -> int:
    from localspec.models import hub

    for line in hub.remove(args.model):
        print(line)
    return 0
