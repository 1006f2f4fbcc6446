"""--json-schema and --grammar on the command line: a bad one is one line before the model loads; a good one
makes the real SmolLM2-135M answer in the schema (at the chat's default temperature, where it rarely writes
JSON on its own)."""

import json

import pytest

from localspec.apps.cli import main

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_a_bad_schema_or_grammar_is_one_line_before_the_model_loads(capsys, tmp_path):
    assert main(["run", "--json-schema", '{"type": "strin"}', "hi"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Invalid type: strin" in err and "Traceback" not in err
    (tmp_path / "bad.gbnf").write_text("root ::= missing\n")
    assert main(["run", "--grammar", str(tmp_path / "bad.gbnf"), "hi"]) == 1
    err = capsys.readouterr().err
    assert "bad.gbnf" in err and "missing" in err


@pytest.mark.model
def test_run_answers_in_the_schema(capsys, tmp_path):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(SCHEMA))
    for seed in ("1", "2"):
        argv = ["run", "--json-schema", str(path), "--seed", seed, "--max-tokens", "120", "--json"]
        assert main([*argv, "Describe Ada Lovelace: her name and her age at death."]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["finish_reason"] == "stop" and result["drafter"] == "suffix"
        answer = json.loads(result["text"])
        assert set(answer) == {"name", "age"} and isinstance(answer["age"], int)
        grammar = result["stats"]["grammar"]
        assert grammar["kind"] == "json_schema" and grammar["forced_drafted"] > 0
        assert result["stats"]["method"] == "grammar+suffix"
