"""Prompt text -> token ids, the one way every engine and the learner encode a task's prompt.

A task's prompt is the user's message. When the tokenizer carries a chat template (instruct models; see
`swarmnode.model.models.load_tokenizer` and `model.prompt_format`) the message is rendered by that template with the
generation prompt appended (the assistant turn's header), and the rendered ids are used as they are (the template
places its own special tokens). Otherwise the text is tokenized plainly with the tokenizer's special tokens (base
models, the built-in tiny model). Either way the ids are left-truncated to `max_tokens`. Samplers put these ids
in the rollout record and the learner re-encodes the prompt with this same function to check them.
"""

from __future__ import annotations


def uses_chat_template(tokenizer) -> bool:
    """True when prompts are rendered through the tokenizer's chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_messages(text: str) -> list[dict[str, str]]:
    """The chat messages of a task prompt: one user turn."""
    return [{"role": "user", "content": text}]


def encode_prompt(tokenizer, text: str, max_tokens: int | None = None) -> list[int]:
    """Token ids of one task prompt, chat-rendered when the tokenizer has a template; see the module docstring."""
    if uses_chat_template(tokenizer):
        ids = tokenizer.apply_chat_template(prompt_messages(text), add_generation_prompt=True, tokenize=True)
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
    else:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    ids = [int(t) for t in ids]
    return ids[-max_tokens:] if max_tokens else ids


def encode_prompts(tokenizer, texts: list[str], max_tokens: int | None = None) -> list[list[int]]:
    """`encode_prompt` of each text."""
    return [encode_prompt(tokenizer, t, max_tokens) for t in texts]
