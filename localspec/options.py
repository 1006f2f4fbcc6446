"""A component's options as one frozen dataclass, each field declared once with ``option(...)``: its default,
its help text, its command-line flag and whether models.toml may set it. The command line, the models.toml
check, `localspec config` and the docs all read the fields from here."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace

from localspec.errors import ConfigError


def option(default, help: str, *, flag: str | None = "", toml: bool = True, kind: type | None = None):
    """A field of an options dataclass. ``flag``: '' derives ``--{component}-{field}``, None means no flag;
    ``kind``: the value's type when the default (None) does not tell."""
    kind = kind or type(default)
    return field(default=default, metadata={"help": help, "flag": flag, "toml": toml, "kind": kind})


@dataclass(frozen=True)
class OptionInfo:
    component: str  # e.g. the drafter's name
    name: str  # the dataclass field (and its models.toml key)
    default: object
    help: str
    flag: str | None  # None: not on the command line
    toml: bool
    kind: type

    @property
    def dest(self) -> str:
        """The attribute argparse stores the flag in."""
        return f"{self.component}__{self.name}"


def describe(options_type: type, component: str) -> list[OptionInfo]:
    out = []
    for f in fields(options_type):
        meta = f.metadata
        if "help" not in meta:
            continue
        flag = meta["flag"]
        if flag == "":
            flag = f"--{component}-{f.name}".replace("_", "-")
        default = f.default if f.default is not MISSING else None
        out.append(OptionInfo(component, f.name, default, meta["help"], flag, meta["toml"], meta["kind"]))
    return out


def check_value(info: OptionInfo, value, where: str) -> object:
    """A models.toml value of the option's type (TOML writes 1.0 as 1 too), else a ConfigError."""
    kinds = (int, float) if info.kind is float else (info.kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) != (info.kind is bool):
        raise ConfigError(f"{where}: {info.name!r} must be a {info.kind.__name__}, got {value!r}")
    return info.kind(value)


def from_table(options, table: dict, component: str, where: str):
    """``options`` with the models.toml table's keys applied; unknown keys and wrong types are errors
    naming the file, the table and the key."""
    allowed = {i.name: i for i in describe(type(options), component) if i.toml}
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed) or 'none'})")
    values = {key: check_value(allowed[key], value, where) for key, value in table.items()}
    return _replace(options, values, where)


def _replace(options, values: dict, where: str):
    try:
        return replace(options, **values)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
