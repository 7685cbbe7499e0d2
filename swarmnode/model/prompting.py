"""Prompt text -> token ids, the one way every engine and the learner encode a task's prompt.

A task's prompt is the user's message. When the tokenizer carries a chat template (instruct models; see
`swarmnode.model.models.load_tokenizer` and `model.prompt_format`) the message is rendered by that template with the
generation prompt appended (the assistant turn's header), and the rendered ids are used as they are (the template
places its own special tokens). Otherwise the text is tokenized plainly with the tokenizer's special tokens (base
models, the built-in tiny model). Either way the ids are left-truncated to `max_tokens`. Samplers put these ids
in the rollout record and the learner re-encodes the prompt with this same function to check them.

A conversational prompt (`swarmnode.tasks.chat`: a system prompt, several messages, chat-template arguments such as
Qwen3's `enable_thinking`) is rendered by the template with those messages and arguments; without a template its
contents are joined as plain text.
"""

from __future__ import annotations

from swarmnode.tasks.chat import chat_parts, plain_render


def uses_chat_template(tokenizer) -> bool:
    """True when prompts are rendered through the tokenizer's chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_messages(text: str) -> list[dict]:
    """The chat messages of a task prompt: a conversation's own, else one user turn."""
    parts = chat_parts(text)
    return parts[0] if parts else [{"role": "user", "content": text}]


def encode_prompt(tokenizer, text: str, max_tokens: int | None = None) -> list[int]:
    """Token ids of one task prompt, chat-rendered when the tokenizer has a template; see the module docstring."""
    parts = chat_parts(text)
    if uses_chat_template(tokenizer):
        messages, kwargs = parts if parts else (prompt_messages(text), {})
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
    else:
        ids = tokenizer(plain_render(parts[0]) if parts else text, add_special_tokens=True)["input_ids"]
    ids = [int(t) for t in ids]
    return ids[-max_tokens:] if max_tokens else ids


def encode_prompts(tokenizer, texts: list[str], max_tokens: int | None = None) -> list[list[int]]:
    """`encode_prompt` of each text."""
    return [encode_prompt(tokenizer, t, max_tokens) for t in texts]
