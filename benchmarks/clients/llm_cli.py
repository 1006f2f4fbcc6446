"""Simon Willison's `llm` CLI with an OpenAI-compatible model entry (extra-openai-models.yaml): a prompt, a
streamed prompt, a conversation continued with `-c`, and `--schema` (structured output: llm sends it as
`response_format` json_schema; the answer must be JSON that the schema takes)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

REQUIREMENT = "llm==0.36"
SCHEMA = "name, age int, one_sentence_bio"  # llm's concise schema syntax
DOG = "Invent a dog."


def configure(home: Path, base_url: str, model: str) -> dict:
    """LLM_USER_PATH with one model entry pointing at the server: the only localspec-specific setting."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "extra-openai-models.yaml").write_text(
        f'- model_id: localspec\n  model_name: {model}\n  api_base: "{base_url}"\n  api_key_name: localspec\n'
        "  supports_schema: true\n"  # llm then sends --schema as response_format json_schema
    )
    (home / "keys.json").write_text(json.dumps({"localspec": "sk-local"}))
    return {**os.environ, "LLM_USER_PATH": str(home)}


def run(env: Path, home: Path, base_url: str, model: str) -> dict:
    child = configure(home, base_url, model)
    llm = str(env / "bin" / "llm")
    steps = {  # `continue` last: the check below reads the last two logged responses
        # greedy: sampled, the 1.5B model sometimes writes one string value without end (it did for 8,000 tokens)
        "schema": [llm, "-m", "localspec", "--no-stream", "-o", "temperature", "0", "--schema", SCHEMA, DOG],
        "prompt": [llm, "-m", "localspec", "--no-stream", "Name three primary colours, comma separated."],
        "stream": [llm, "-m", "localspec", "Write one sentence about the sea."],
        "continue": [llm, "-c", "Now the same about a river."],
    }
    out, answers = {}, {}
    for name, argv in steps.items():
        started = time.perf_counter()
        done = subprocess.run(argv, env=child, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        answers[name] = done.stdout.strip()
        out[name] = {
            "exit_code": done.returncode,
            "wall_s": round(time.perf_counter() - started, 2),
            "output": answers[name][:400],
            "stderr": done.stderr.strip()[-400:],
        }
    logs = subprocess.run([llm, "logs", "-n", "2", "--json"], env=child, capture_output=True, text=True, timeout=60)
    try:
        last_two = json.loads(logs.stdout)
        same = len(last_two) == 2 and last_two[0]["conversation_id"] == last_two[1]["conversation_id"]
    except (ValueError, KeyError, TypeError):
        same = False
    out["continued_in_one_conversation"] = same
    out["schema_answer_valid"] = _dog(answers["schema"])  # the whole answer: "output" keeps 400 characters
    out["ok"] = all(out[s]["exit_code"] == 0 and out[s]["output"] for s in steps) and same
    out["ok"] = out["ok"] and out["schema_answer_valid"]
    return out


def _dog(text: str) -> bool:
    """Whether the answer is what SCHEMA asks for: an object with a string name and bio and an integer age."""
    try:
        dog = json.loads(text)
    except ValueError:
        return False
    fields = isinstance(dog, dict) and isinstance(dog.get("name"), str) and isinstance(dog.get("one_sentence_bio"), str)
    return fields and isinstance(dog.get("age"), int)
