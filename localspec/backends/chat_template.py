"""Rendering a conversation with a model's own chat template (the Jinja2 text shipped in its metadata).

Rendered the way Hugging Face tokenizers render it (trim_blocks, lstrip_blocks, a ``tojson`` that keeps
non-ASCII text, ``raise_exception``), inside Jinja's sandbox since templates come with downloaded files.
A model without a template gets ChatML, the most common format among small chat models.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from functools import lru_cache

from localspec.errors import ModelError

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def render_chat(
    template: str | None,
    messages: Sequence[dict],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    tools=None,
    options: dict | None = None,
) -> str:
    """``options``: the template's own variables (``enable_thinking``), left undefined when not given."""
    import jinja2.exceptions

    try:
        return _compile(template or CHATML).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            **({"tools": tools} if tools else {}),  # templates test `tools is defined` or `if tools`
            **(options or {}),
        )
    except jinja2.exceptions.TemplateError as exc:
        raise ModelError(f"the model's chat template failed to render: {exc}") from exc


@lru_cache(maxsize=8)
def _compile(template: str):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise ModelError(f"the model's chat template refused the conversation: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateError as exc:
        raise ModelError(f"the model's chat template is not valid Jinja2: {exc}") from exc
