"""What a user asks the answer to follow, checked and compiled to an llguidance grammar.

Each way in (the API's ``response_format`` json_object / json_schema, llama-server's ``json_schema`` and
``grammar`` body fields, ``--json-schema`` and ``--grammar`` on the command line) ends in a ``Grammar``; a bad
schema or grammar is a ``ConfigError`` that names what is wrong, before anything is generated.

JSON is written compact where the schema leaves the choice: fixed separators (", " and ": ", as
``json.dumps`` writes them) and no free whitespace, so that every separator, quote and known key is forced by
the grammar and drafted for free, and the answer's distribution is the model's restricted to that one layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import ConfigError

JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class Grammar:
    kind: str  # json_schema, json_object, gbnf, lark, regex: what the user gave
    text: str  # the llguidance grammar it compiled to

    @property
    def is_json(self) -> bool:
        return self.kind in ("json_schema", "json_object")


def json_schema(schema: dict | str, where: str = "the JSON schema") -> Grammar:
    """A JSON Schema (a dict, or its text)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{where} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            ) from None
    if not isinstance(schema, dict):
        raise ConfigError(f"{where} must be a JSON object (a schema), got {type(schema).__name__}")
    return _checked("json_schema", _llg().LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT), where)


def json_object() -> Grammar:
    """Any JSON object (``response_format`` json_object)."""
    return json_schema({"type": "object"})


def gbnf(text: str, where: str = "the GBNF grammar") -> Grammar:
    """A grammar in llama.cpp's GBNF (``root ::= ...``)."""
    try:
        compiled = _llg().grammar_from("gbnf", text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not a grammar llguidance reads: {_first_line(exc)}") from None
    return _checked("gbnf", compiled, where)


def lark(text: str, where: str = "the Lark grammar") -> Grammar:
    return _checked("lark", _llg().LLMatcher.grammar_from_lark(text), where)


def regex(pattern: str, where: str = "the regex") -> Grammar:
    return _checked("regex", _llg().LLMatcher.grammar_from_regex(pattern), where)


def grammar_text(text: str, where: str = "the grammar") -> Grammar:
    """A grammar file's text: Lark when it starts with a ``start:`` rule or ``%llguidance``, else GBNF."""
    head = text.lstrip()
    return lark(text, where) if head.startswith(("start:", "%llguidance")) else gbnf(text, where)


def from_option(value: str, flag: str) -> Grammar:
    """``--json-schema FILE|JSON`` or ``--grammar FILE``: a path is read, anything else is the text itself."""
    path = Path(value).expanduser()
    if not value.lstrip().startswith("{") and path.is_file():
        try:
            value, where = path.read_text(encoding="utf-8"), f"{flag} {path}"
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {flag} {path}: {exc}") from None
    elif flag == "--grammar" or not value.lstrip().startswith("{"):
        raise ConfigError(f"{flag} {value}: no such file (give a file, or the schema's JSON itself)")
    else:
        where = flag
    return json_schema(value, where) if flag == "--json-schema" else grammar_text(value, where)


def _llg():
    import llguidance  # on first use: its import takes ~0.1 s, which no command without a grammar should pay

    return llguidance


def _checked(kind: str, compiled: str, where: str) -> Grammar:
    error = _llg().LLMatcher.validate_grammar(compiled)
    if error:
        raise ConfigError(f"{where} cannot be used: {_first_line(error)}")
    return Grammar(kind, compiled)


def _first_line(error) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
