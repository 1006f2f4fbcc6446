"""`localspec export`: the vLLM / SGLang command for each drafter kind, K from the saved chats, and refusals."""

import json
import shlex

import pytest

from localspec.apps.cli import main
from localspec.apps.export import METHODS, command, plan, settled_k
from localspec.chat.conversation import Conversation
from localspec.chat.store import SavedChat
from localspec.errors import ConfigError
from localspec.models.registry import load_registry


def exported(model, drafter, engine, k=None, chats=()):
    return command(plan(load_registry(), model, drafter, engine, k, chats))


def vllm_config(lines):
    args = shlex.split(lines[-1])
    assert args[:3] == ["vllm", "serve", args[2]]
    return args[2], json.loads(args[args.index("--speculative-config") + 1])


@pytest.mark.parametrize(
    "model,drafter,method,draft",
    [
        ("llama3-8b", "suffix", "suffix", None),
        ("llama3-8b", "ngram", "ngram", None),
        ("llama3-8b", "draft", "draft_model", "meta-llama/Llama-3.2-1B-Instruct"),
        ("llama3-8b", "eagle", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
        ("mimo-7b-rl", "mtp", "mtp", None),
        ("mimo-7b-rl", "suffix+mtp", "mtp", None),  # a chain: the engine runs its model drafter
        ("vicuna-7b", "medusa", "medusa", "FasterDecoding/medusa-vicuna-7b-v1.3"),
        ("qwen3-8b", "dflash", "dflash", load_registry().get("qwen3-8b").head("dflash", "torch")),
    ],
)
def test_vllm_gets_the_equivalent_method_with_k(model, drafter, method, draft):
    repo, config = vllm_config(exported(model, drafter, "vllm", k=6))
    assert repo == load_registry().get(model).torch_repo
    assert config["method"] == method and config["num_speculative_tokens"] == 6
    assert config.get("model") == draft


@pytest.mark.parametrize(
    "model,drafter,algorithm,draft",
    [
        ("llama3-8b", "ngram", "NGRAM", None),
        ("llama3-8b", "draft", "STANDALONE", "meta-llama/Llama-3.2-1B-Instruct"),
        ("llama3-8b", "eagle", "EAGLE3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
        ("mimo-7b-rl", "mtp", "NEXTN", None),
        ("qwen3-8b", "dflash", "DFLASH", load_registry().get("qwen3-8b").head("dflash", "torch")),
    ],
)
def test_sglang_gets_the_equivalent_algorithm(model, drafter, algorithm, draft):
    args = shlex.split(exported(model, drafter, "sglang", k=3)[-1])
    assert args[:4] == ["python", "-m", "sglang.launch_server", "--model-path"]
    flags = dict(zip(args[3::2], args[4::2], strict=False))
    assert flags["--speculative-algorithm"] == algorithm
    assert flags.get("--speculative-draft-model-path") == draft
    if algorithm == "NGRAM":
        assert flags["--speculative-num-draft-tokens"] == "3"
    else:  # a chain of K steps, one candidate per step: K + 1 tokens per verify
        assert (flags["--speculative-num-steps"], flags["--speculative-num-draft-tokens"]) == ("3", "4")


def chat(model, method, drafted, steps, plain_steps):
    saved = SavedChat("x", model, Conversation())
    saved.add("user", "hi")
    stats = {"method": method, "drafted": drafted, "steps": steps, "speclen": {"plain_steps": plain_steps}}
    saved.add("assistant", "hello", stats)
    return saved


def test_k_is_what_the_controller_settled_on_in_saved_chats_else_the_default():
    chats = [
        chat("llama3-8b", "ngram", 120, 50, 30),
        chat("llama3-8b", "ngram", 60, 20, 10),
        chat("other", "ngram", 999, 1, 0),
    ]
    chats.append(chat("llama3-8b", "suffix", 500, 10, 0))  # another drafter's turns do not count
    assert settled_k(chats, "llama3-8b", "ngram") == (6, 2)  # 180 tokens over 30 drafting steps
    lines = exported("llama3-8b", "ngram", "vllm", chats=chats)
    assert vllm_config(lines)[1]["num_speculative_tokens"] == 6 and "2 saved chat turn(s)" in lines[1]
    lines = exported("llama3-8b", "eagle", "vllm")
    assert vllm_config(lines)[1]["num_speculative_tokens"] == METHODS["eagle"].k and "default" in lines[1]


def test_plain_and_the_default_drafter():
    assert shlex.split(exported("llama3-8b", "none", "vllm")[-1]) == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
    ]
    assert vllm_config(exported("llama3-8b", None, "vllm"))[1]["method"] == "suffix"  # its first recommended
    args = shlex.split(exported("llama3-8b", None, "sglang")[-1])  # SGLang has no suffix decoding: the next one
    assert args[args.index("--speculative-algorithm") + 1] == "STANDALONE"


@pytest.mark.parametrize(
    "model,drafter,engine,message",
    [
        ("qwen3.5-4b", "mtp", "vllm", "no Hugging Face checkpoint"),
        ("llama3-8b", "suffix", "sglang", "sglang has no suffix method; `--engine vllm` has one"),
        ("llama3-8b", "lookahead", "vllm", "no counterpart of localspec's 'lookahead'"),
        ("llama3-8b", "medusa", "vllm", "names no medusa head"),
        ("smollm2-135m", "draft", "vllm", "none of its draft models"),
    ],
)
def test_what_cannot_be_exported_is_refused_with_what_to_do(model, drafter, engine, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("'", ".")):
        exported(model, drafter, engine)


def test_the_command_line_prints_the_command(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LOCALSPEC_DATA", str(tmp_path))
    assert main(["export", "--engine", "vllm", "llama3-8b", "--drafter", "ngram", "-k", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# llama3-8b") and vllm_config(out)[1]["num_speculative_tokens"] == 4
    assert main(["export", "--engine", "vllm", "nope"]) == 1
    assert "unknown model 'nope'" in capsys.readouterr().err
