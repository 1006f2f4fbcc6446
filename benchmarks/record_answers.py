"""Record the target's greedy answers to a workload, as JSONL that `localspec simulate` replays.

python benchmarks/record_answers.py --model PATH.gguf --out benchmarks/results/answers-NAME.jsonl

``--fim``: the editor-autocomplete workload of benchmarks/fim.py instead (its `/infill` requests, prompts built as
`serve` builds them), each record the prompt's and the answer's token ids (what controller_replay.py replays).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workload import DEFAULT_WORKLOAD, load_cases  # noqa: E402

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.chat.conversation import Conversation  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fim", action="store_true", help="the /infill workload of benchmarks/fim.py (token ids)")
    args = ap.parse_args()
    _, path = resolve_model(args.model)
    if args.fim:
        return record_fim(path, args.out)
    with LlamaCppBackend(path, n_ctx=4096) as backend, args.out.open("w") as out:
        for case in load_cases(args.workload):
            conv = Conversation()
            conv.messages = case["messages"]
            prompt = conv.prompt_tokens(backend, reserve=case["max_tokens"])
            done = generate(backend, NoDrafter(), prompt, SamplingParams(temperature=0), max_tokens=case["max_tokens"])
            messages = case["messages"] + [{"role": "assistant", "content": done.text}]
            out.write(json.dumps({"id": case["id"], "kind": case["kind"], "messages": messages}) + "\n")
            print(case["id"], len(done.tokens), flush=True)


def record_fim(path: Path, out_path: Path) -> None:
    import fim

    from localspec.apps.server.requests import parse_infill
    from localspec.chat.model_text import ModelText

    with LlamaCppBackend(path, n_ctx=8192) as backend, out_path.open("w") as out:
        text = ModelText(backend, path.name, fim.N_PREDICT)
        for request in fim.workload(fim.FILES, fim.CURSORS):
            fields = {k: request[k] for k in ("input_prefix", "input_suffix", "input_extra")}
            infill = parse_infill({**fields, "n_predict": fim.N_PREDICT}).infill  # as `serve` reads /infill
            prompt = text.infill_prompt(infill, fim.N_PREDICT)
            done = generate(backend, NoDrafter(), prompt, SamplingParams(temperature=0), max_tokens=fim.N_PREDICT)
            record = {"id": request["id"], "kind": "fim", "prompt_tokens": prompt, "answer_tokens": done.tokens}
            out.write(json.dumps(record) + "\n")
            print(request["id"], len(done.tokens), flush=True)


if __name__ == "__main__":
    main()
