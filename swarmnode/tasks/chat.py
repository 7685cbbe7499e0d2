"""Conversational prompts inside a `Prompt.text`: a system prompt, several messages, chat-template arguments.

Every engine and the learner encode a prompt from its text alone (`swarmnode.model.prompting.encode_prompt`), and
groups carry the text (SAPO) or its id. A conversation therefore travels as one string: `CHAT_MARK` followed by the
canonical JSON of `{"messages": [...], "kwargs": {...}}` (`kwargs`: the chat template's extra arguments, e.g.
`enable_thinking`). A plain prompt with no system prompt and no template arguments stays plain text, as before.
"""

from __future__ import annotations

import json
from typing import Any

CHAT_MARK = "\x1eswarmnode-chat\x1e"

Message = dict[str, Any]


def chat_text(messages: list[Message], template_kwargs: dict[str, Any] | None = None) -> str:
    """The prompt text of a conversation (see the module docstring)."""
    body = {"messages": [dict(m) for m in messages], "kwargs": dict(template_kwargs or {})}
    return CHAT_MARK + json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def chat_parts(text: str) -> tuple[list[Message], dict[str, Any]] | None:
    """(messages, template kwargs) of a conversation's text; None for a plain prompt."""
    if not text.startswith(CHAT_MARK):
        return None
    body = json.loads(text[len(CHAT_MARK) :])
    return list(body["messages"]), dict(body["kwargs"])


def prompt_text(
    prompt: str | list[Message], system_prompt: str | None = None, template_kwargs: dict[str, Any] | None = None
) -> str:
    """The `Prompt.text` of a prompt (a string or a list of messages) with an optional system prompt (placed
    first unless the messages have one) and chat-template arguments."""
    if isinstance(prompt, str) and not system_prompt and not template_kwargs:
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if system_prompt and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return chat_text(messages, template_kwargs)


def trl_prompt(text: str) -> str | list[Message]:
    """The prompt as TRL hands it to reward functions: the list of messages of a conversation, else the text."""
    parts = chat_parts(text)
    return parts[0] if parts else text


def trl_completion(text: str, prompt: str) -> str | list[Message]:
    """A completion as TRL hands it: `[{"role": "assistant", "content": text}]` after a conversation, else text."""
    return [{"role": "assistant", "content": text}] if prompt.startswith(CHAT_MARK) else text


def plain_render(messages: list[Message]) -> str:
    """A conversation as plain text for a model without a chat template: the contents, a blank line apart."""
    return "\n\n".join(str(m.get("content", "")) for m in messages)
