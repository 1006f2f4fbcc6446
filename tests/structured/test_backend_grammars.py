"""Structured output on the PyTorch backend, whose grammar tokenizer is built from a Hugging Face tokenizer (or
a GGUF's vocabulary read by torch): a tiny random decoder with a byte-level BPE tokenizer trained in the test, and
the real SmolLM2-135M, answer JSON that follows the schema, greedy and sampled, plain and with drafts. (MLX runs
the same engine path; its backend tests run where mlx imports.)"""

import json

import jsonschema
import numpy as np
import pytest
from support.tiny_torch import write_hf_checkpoint

from localspec.drafters.base import NoDrafter
from localspec.drafters.grammar import GrammarDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.loop import generate
from localspec.sampling import SamplingParams
from localspec.structured import grammar
from localspec.structured.constraint import Constraint

torch = pytest.importorskip("torch")
from localspec.backends.torch.backend import TorchBackend  # noqa: E402

CLOSED = {  # every answer ends: a random model cannot write on forever inside it
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green", "blue"]}, "bright": {"type": "boolean"}},
    "required": ["colour", "bright"],
    "additionalProperties": False,
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "born": {"type": "integer", "minimum": 1000, "maximum": 2100},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    },
    "required": ["name", "born", "languages"],
    "additionalProperties": False,
}


def answers(backend, schema: dict, prompt: list[int], max_tokens: int, seeds: int):
    """The answers under the schema at T = 0 and T = 0.8 (``seeds`` seeds), plain and with grammar+n-gram
    drafts."""
    for temperature, seed in [(0.0, 0)] + [(0.8, s) for s in range(1, seeds + 1)]:
        for drafter in (NoDrafter(), GrammarDrafter(NgramDrafter(1, 4))):
            constraint = Constraint(
                grammar.json_schema(schema), backend.tokenizer.grammar_tokenizer(), backend.vocab_size
            )
            backend.truncate(0)
            done = generate(
                backend,
                drafter,
                prompt,
                SamplingParams(temperature=temperature),
                max_tokens=max_tokens,
                rng=np.random.default_rng(seed),
                constraint=constraint,
            )
            yield temperature, drafter, done


def test_a_random_torch_decoder_with_a_hugging_face_tokenizer_answers_the_schema(tmp_path):
    write_hf_checkpoint(tmp_path, "qwen2")
    backend = TorchBackend(tmp_path, n_ctx=256, n_threads=2)
    prompt = backend.tokenizer.tokenize("Pick a colour: ")
    for temperature, drafter, done in answers(backend, CLOSED, prompt, max_tokens=60, seeds=3):
        assert done.finish_reason == "stop", (temperature, done.text)
        jsonschema.validate(json.loads(done.text), CLOSED)
        if isinstance(drafter, GrammarDrafter):  # the keys and separators came as forced drafts
            assert done.stats.grammar["forced_accepted"] > 0


@pytest.mark.model
def test_smollm2_on_torch_answers_the_schema():
    from localspec.chat.conversation import Conversation
    from localspec.models.registry import resolve_model

    backend = TorchBackend(resolve_model("smollm2-135m")[1], n_ctx=512, n_threads=2)
    conv = Conversation()
    conv.add("user", "Describe Ada Lovelace as JSON: her name, the year she was born and the languages she knew.")
    prompt = conv.prompt_tokens(backend, reserve=120)
    for temperature, _, done in answers(backend, PERSON, prompt, max_tokens=120, seeds=1):
        assert done.finish_reason == "stop", (temperature, done.text)
        jsonschema.validate(json.loads(done.text), PERSON)
    backend.close()
