"""The drafter table is the one place a drafter is registered: the command line, models.toml, /help, the
README and docs/drafters.md follow it, and a flag travels cli -> config -> session -> drafter."""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fakes import ScriptedBackend

from localspec.apps.cli import build_parser
from localspec.apps.tui.slash import help_text
from localspec.config import load_models, settings_from_args
from localspec.drafters.base import Drafter
from localspec.drafters.table import DRAFTERS, DrafterKind, markdown_table, summary_table
from localspec.errors import ConfigError
from localspec.options import option
from localspec.session import Session
from localspec.types import Draft

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DRAFTERS_PAGE = ROOT / "docs" / "drafters.md"


def options_of(kind):
    return [i for i in kind.option_infos() if i.flag]


def test_every_drafter_option_has_its_flag_with_help_and_default():
    help_text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for kind in DRAFTERS.values():
        for info in options_of(kind):
            assert info.flag in help_text, info.flag
            assert info.help.split(" (")[0][:30] in " ".join(help_text.split()), info.help
    assert "--suffix-min-prob" in help_text and "--ngram-max" in help_text and "--eagle-tree" in help_text


def test_a_flag_reaches_the_drafter(tmp_path):
    args = build_parser().parse_args(
        ["run", "x", "--drafter", "ngram", "--ngram-min", "1", "--ngram-max", "3", "--suffix-max-depth", "8"]
    )
    settings = settings_from_args(args)
    sources = {name: source for name, _, source in settings.rows}
    assert sources["ngram.min"] == "flag" and sources["suffix.max_depth"] == "flag"
    assert sources["suffix.min_token_prob"] == "default"
    backend = ScriptedBackend(vocab_size=20)
    with Session(backend, settings.drafters.build("ngram", backend), settings.sampling, "m") as session:
        assert (session.drafter.n_min, session.drafter.n_max) == (1, 3)
    assert settings.drafters.options_of("suffix").max_depth == 8


def test_models_toml_tables_reach_the_drafter_and_flags_override_them(tmp_path, monkeypatch):
    path = tmp_path / "models.toml"
    path.write_text(
        "[models.mine]\nembedded = 'p/f.gguf'\ndrafters = ['ngram']\n"
        "[models.mine.ngram]\nmin = 3\nmax = 5\n[models.mine.suffix]\nmin_token_prob = 1\n"
    )
    monkeypatch.setenv("LOCALSPEC_MODELS", str(path))
    settings = settings_from_args(build_parser().parse_args(["run", "x", "--model", "mine", "--ngram-max", "7"]))
    assert settings.drafter == "ngram"  # the model's first recommended drafter
    assert settings.drafters.options_of("ngram").min == 3 and settings.drafters.options_of("ngram").max == 7
    assert settings.drafters.options_of("suffix").min_token_prob == 1.0
    rows = {name: (value, source) for name, value, source in settings.rows}
    assert rows["drafter"] == ("ngram", "models.toml") and rows["ngram.max"] == (7, "flag")
    assert rows["ngram.min"] == (3, "models.toml") and rows["models_file"][1] == "environment (LOCALSPEC_MODELS)"


@pytest.mark.parametrize("backend, want", [("llama.cpp", "suffix+mtp"), ("torch", "suffix+mtp"), ("mlx", "suffix")])
def test_the_recommended_drafter_is_the_first_that_runs_on_the_backend(backend, want):
    """qwen3.5-4b recommends suffix+mtp, mtp, suffix: MLX has no MTP drafter, so it gets suffix."""
    settings = settings_from_args(
        build_parser().parse_args(["run", "x", "--model", "qwen3.5-4b", "--backend", backend])
    )
    assert settings.drafter == want


def test_models_toml_accepts_exactly_the_drafters_toml_keys(tmp_path):
    for kind in DRAFTERS.values():
        for info in kind.option_infos():
            if not info.toml:
                continue
            value = {int: 4, float: 0.5, str: "'x'", bool: "true"}[info.kind]
            if (kind.name, info.name) == ("ngram", "min"):
                value = 1
            path = tmp_path / f"{kind.name}-{info.name}.toml"
            path.write_text(f"[models.a]\nembedded = 'p/f.gguf'\n[models.a.{kind.name}]\n{info.name} = {value}\n")
            load_models(user_file=path)  # accepted
    path = tmp_path / "bad.toml"
    path.write_text("[models.a]\nembedded = 'p/f.gguf'\n[models.a.ngram]\nsize = 3\n")
    with pytest.raises(ConfigError, match=r"\[models.a.ngram\]: unknown key 'size' \(allowed: min, max\)"):
        load_models(user_file=path)


def test_help_lists_every_drafter():
    for kind in DRAFTERS.values():
        assert re.search(rf"^  {kind.name} +{re.escape(kind.summary)}$", help_text(), re.M), kind.name


def shown_table(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    return text.split("<!-- drafters -->\n", 1)[1].split("\n<!-- /drafters -->", 1)[0]


def test_the_readme_table_is_the_drafter_table():
    assert shown_table(README) == summary_table(), (
        "README's drafter table is stale: paste `python -m localspec.drafters.table --short`"
    )


def test_the_drafters_page_table_is_the_drafter_table_with_its_options():
    assert shown_table(DRAFTERS_PAGE) == markdown_table(), (
        "docs/drafters.md's drafter table is stale: paste `python -m localspec.drafters.table`"
    )


def test_unknown_drafter_fails_before_loading():
    with pytest.raises(ConfigError, match="unknown drafter 'magic'; choose one of: none, ngram, suffix"):
        settings_from_args(build_parser().parse_args(["run", "x", "--drafter", "magic"]))


# a new drafter is one module (its class, options and builder) plus one table row: nothing else changes
@dataclass(frozen=True)
class EchoOptions:
    width: int = option(3, "tokens it repeats")


class EchoDrafter(Drafter):
    name = "echo"

    def __init__(self, width: int) -> None:
        self.width = width

    def propose(self, context, max_tokens) -> Draft:
        return Draft.chain(list(context[-self.width :])[:max_tokens])


def build_echo(target, options: EchoOptions, context) -> EchoDrafter:
    return EchoDrafter(options.width)


def test_a_new_drafter_is_one_module_and_one_table_row(monkeypatch, tmp_path):
    monkeypatch.setitem(
        DRAFTERS, "echo", DrafterKind("echo", "repeats the last tokens", EchoDrafter, EchoOptions, build_echo)
    )
    assert "--echo-width" in build_parser()._subparsers._group_actions[0].choices["chat"].format_help()
    assert re.search(r"^  echo +repeats the last tokens$", help_text(), re.M)
    assert "| `echo` | repeats the last tokens | cache rollback | `--echo-width`, `width` (3)" in markdown_table()
    assert "| `echo` | repeats the last tokens | llama.cpp, mlx, torch |" in summary_table()
    path = tmp_path / "models.toml"
    path.write_text("[models.mine]\nembedded = 'p/f.gguf'\n[models.mine.echo]\nwidth = 5\n")
    monkeypatch.setenv("LOCALSPEC_MODELS", str(path))
    assert load_models().get("mine").drafter_tables == {"echo": {"width": 5}}
    settings = settings_from_args(build_parser().parse_args(["run", "x", "-m", "mine", "-d", "echo"]))
    assert settings.drafters.options_of("echo") == EchoOptions(5)  # models.toml's
    settings = settings_from_args(
        build_parser().parse_args(["run", "x", "-m", "mine", "-d", "echo", "--echo-width", "2"])
    )
    backend = ScriptedBackend(vocab_size=20)
    with Session(backend, settings.drafters.build(settings.drafter, backend), settings.sampling, "m") as session:
        assert session.drafter.width == 2
        session.switch_drafter("ngram")
        assert session.drafter.name == "ngram"


def test_a_bad_option_value_names_the_flag_that_gave_it():
    with pytest.raises(ConfigError, match=r"max_depth must be at least 4, got 2 \(given by --suffix-max-depth\)"):
        settings_from_args(build_parser().parse_args(["run", "x", "--suffix-max-depth", "2"]))


@pytest.mark.parametrize("source", ["models.toml", "flag"])
def test_a_drafter_the_cache_cannot_serve_gives_way_to_plain_decoding_unless_named(source):
    """A cache that cannot be rolled back (a sliding window that wraps): the recommended suffix drafter and
    the suffix fallback do not fit, so plain decoding runs and says why; a drafter named by flag is refused."""
    from dataclasses import replace as swap

    from localspec.config import Settings
    from localspec.drafters.base import NoDrafter
    from localspec.drafters.table import DrafterSetup
    from localspec.session import _drafter_for

    backend = ScriptedBackend(vocab_size=20)
    backend.capabilities = swap(backend.capabilities, can_truncate=False)
    settings = Settings("m", None, "scripted", "suffix", DrafterSetup(), rows=(("drafter", "suffix", source),))
    if source == "flag":
        with pytest.raises(ConfigError, match="cannot be rolled back"):
            _drafter_for(settings, backend)
        return
    drafter, why = _drafter_for(settings, backend)
    assert isinstance(drafter, NoDrafter) and "suffix cannot run here" in why and why.endswith("plain decoding instead")
