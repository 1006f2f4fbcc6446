"""OpenAI response objects, with each answer's speculation figures: llama-server's `timings` and vLLM-style
per-request counts (`speculation`)."""

from __future__ import annotations

import secrets
import time

FINISH = {"stop": "stop", "length": "length", "context": "length", "cancelled": "stop", "tool_calls": "tool_calls"}


def chat_finish(finish: str, called: bool) -> str:
    """A chat answer that called tools and ended by itself finishes with 'tool_calls'."""
    return "tool_calls" if called and finish == "stop" else finish


def new_id(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(12)}"


def usage(record: dict) -> dict:
    prompt, generated = record.get("prompt_tokens", 0), record.get("generated_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def timings(record: dict) -> dict:
    """llama-server's names and counting: prompt = the prompt tokens computed this request (the last one, which
    localspec's first decoding step feeds, included), cache = those reused; predicted = the answer's."""
    prefill_s, decode_s = record.get("prefill_s", 0.0), record.get("decode_s", 0.0)
    prompt = record.get("prompt_tokens", 0)
    computed = min(prompt, record.get("prefill_tokens", 0) + 1) if prompt else 0
    generated = record.get("generated_tokens", 0)
    return {
        "cache_n": prompt - computed,
        "prompt_n": computed,
        "prompt_ms": round(prefill_s * 1e3, 3),
        "prompt_per_token_ms": round(prefill_s * 1e3 / computed, 3) if computed else 0.0,
        "prompt_per_second": record.get("prefill_tok_s", 0.0),
        "predicted_n": generated,
        "predicted_ms": round(decode_s * 1e3, 3),
        "predicted_per_token_ms": round(decode_s * 1e3 / generated, 3) if generated else 0.0,
        "predicted_per_second": record.get("decode_tok_s", 0.0),
        "draft_n": record.get("drafted", 0),
        "draft_n_accepted": record.get("accepted", 0),
    }


def speculation(record: dict) -> dict:
    """vLLM's per-request counts, plus the drafter and the in-session speedup the chat shows."""
    return {
        "drafter": record.get("drafter_name"),
        "num_spec_steps": record.get("steps", 0),  # target forward passes while decoding
        "num_draft_tokens": record.get("drafted", 0),
        "num_accepted_draft_tokens": record.get("accepted", 0),
        "mean_acceptance_length": record.get("mean_accepted_length", 0.0),
        "acceptance_rate": record.get("acceptance_rate"),
        "acceptance_by_position": record.get("acceptance_by_position", []),
        "speedup_in_session": record.get("speedup"),
        "mode": record.get("mode", "fast"),  # "exact" under `serve --exact`: bit-identical greedy output
        **({"grammar": record["grammar"]} if record.get("grammar") else {}),  # structured output's figures
    }


def figures(record: dict) -> dict:
    return {"usage": usage(record), "timings": timings(record), "speculation": speculation(record)}


def token_logprobs(entries, session) -> list[dict]:
    """The engine's TokenLogprob entries in OpenAI's chat shape ({token, logprob, bytes, top_logprobs}); a token
    that ends generation is not part of the answer and is left out. On the engine thread (it reads the vocab)."""

    def named(token: int, logprob: float) -> dict:
        raw = session.text.token_bytes(token)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    return [
        {**named(e.token, e.logprob), "top_logprobs": [named(t, lp) for t, lp in e.top]}
        for e in entries
        if not session.text.ends_generation(e.token)
    ]


def chat_logprobs(entries: list[dict] | None) -> dict | None:
    return None if entries is None else {"content": entries}


def completion_logprobs(entries: list[dict] | None, offset: int = 0) -> dict | None:
    """The completions API's older shape: parallel lists, `top_logprobs` a {token: logprob} map per token."""
    if entries is None:
        return None
    offsets, at = [], offset
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": offsets,
    }


def chat_reply(rid: str, model: str, message: dict, finish: str, record: dict, logprobs=None) -> dict:
    choice = {"index": 0, "message": message, "finish_reason": FINISH.get(finish, finish),
              "logprobs": chat_logprobs(logprobs)}  # fmt: skip
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [choice], **figures(record)}  # fmt: skip


def completion_reply(rid: str, model: str, text: str, finish: str, record: dict, logprobs=None) -> dict:
    choice = {"index": 0, "text": text, "finish_reason": FINISH.get(finish, finish),
              "logprobs": completion_logprobs(logprobs)}  # fmt: skip
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [choice], **figures(record)}  # fmt: skip


def chunk(
    rid: str, model: str, chat: bool, delta: dict | None = None, finish: str | None = None, first=False, logprobs=None
) -> dict:
    """One streamed chunk: a delta (chat: content, reasoning_content or tool_calls; completions: text), the first
    one saying the role, or the finish reason; ``logprobs``: its tokens' log-probabilities, shaped for the API
    (chat_logprobs, completion_logprobs)."""
    delta, finish = delta or {}, FINISH.get(finish, finish)
    if chat:
        delta = {"role": "assistant", "content": "", **delta} if first else delta
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        kind = "chat.completion.chunk"
    else:
        text = delta.get("text", "")
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}
        kind = "text_completion"
    return {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": [choice]}


NATIVE_STOP = {"stop": "eos", "length": "limit", "context": "limit"}  # llama-server's stop_type per finish


def native_reply(model: str, text: str, finish: str, record: dict) -> dict:
    """llama-server's own reply (its /completion and /infill, not OpenAI's), with the fields its editor
    clients read (llama.vscode, llama.vim): the content, why it stopped, the token counts and timings."""
    t = timings(record)
    return {"content": text, "stop": True, "stop_type": NATIVE_STOP.get(finish, "none"), "stopping_word": "",
            "model": model, "tokens_predicted": t["predicted_n"], "tokens_evaluated": t["prompt_n"] + t["cache_n"],
            "tokens_cached": t["cache_n"], "truncated": False, "has_new_line": "\n" in text, "timings": t,
            "speculation": speculation(record)}  # fmt: skip
