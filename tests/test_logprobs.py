"""The chunked log-prob/entropy path equals the full-logits path (values and gradients, fp32), tile by tile."""

from __future__ import annotations

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.model.logprobs import ChunkedLMHeadLogProbs, completion_scores, full_logits_scores
from swarmnode.model.models import load_model, load_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_and_pad():
    cfg = load_config("tiny-cpu", ["model.tiny.warm_start_steps=0"])
    model = load_model(cfg.model, cfg.task, "cpu")
    return model, load_tokenizer(cfg.model, cfg.task).pad_token_id


def _reference(hidden, weight, bias, targets, inv_temp):
    logits = (hidden @ weight.t() + (bias if bias is not None else 0)) * inv_temp[:, None]
    log_z = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(1, targets[:, None]).squeeze(1) - log_z
    return logp, log_z - (torch.softmax(logits, dim=-1) * logits).sum(-1)


@pytest.mark.parametrize("token_chunk,vocab_chunk", [(1, 7), (5, 64), (64, 1000)])
def test_kernel_matches_plain_softmax(token_chunk, vocab_chunk):
    g = torch.Generator().manual_seed(0)
    N, H, V = 13, 16, 150
    hidden = (0.3 * torch.randn(N, H, generator=g)).requires_grad_()  # logits of a realistic scale
    weight = (0.5 * torch.randn(V, H, generator=g)).requires_grad_()
    bias = torch.randn(V, generator=g, requires_grad=True)
    targets = torch.randint(0, V, (N,), generator=g)
    inv_temp = 1 / torch.rand(N, generator=g).add(0.3)
    up_lp, up_ent = torch.randn(N, generator=g), torch.randn(N, generator=g)
    outs = []
    for fn in (_reference, lambda *a: ChunkedLMHeadLogProbs.apply(*a, token_chunk, vocab_chunk)):
        logp, ent = fn(hidden, weight, bias, targets, inv_temp)
        grads = torch.autograd.grad((logp * up_lp).sum() + (ent * up_ent).sum(), (hidden, weight, bias))
        outs.append((logp, ent, *grads))
    for ref, got in zip(*outs):
        assert torch.allclose(ref, got, atol=1e-5, rtol=1e-5), (ref - got).abs().max()


def test_model_path_equals_full_logits_values_and_gradients(model_and_pad):
    """Ragged completions, per-row temperatures, tiles smaller than the batch and the vocabulary."""
    model, pad = model_and_pad
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    completions = [[20, 21, 22, 23, 24], [30], [40, 41, 42], [50, 51]]
    temps = [1.0, 0.6, 1.3, 0.9]
    g = torch.Generator().manual_seed(1)
    up_lp, up_ent = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    results = []
    for fn in (full_logits_scores, lambda *a: completion_scores(*a, token_chunk=3, vocab_chunk=40)):
        model.zero_grad(set_to_none=True)
        s = fn(model, prompts, completions, temps, pad)
        ((s.logp * up_lp).sum() + (s.entropy * up_ent).sum()).backward()
        results.append((s, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full, full_grads), (chunked, chunked_grads) = results
    assert torch.equal(full.mask, chunked.mask)
    assert torch.all(chunked.logp[~chunked.mask] == 0) and torch.all(chunked.entropy[~chunked.mask] == 0)
    assert (chunked.logp - full.logp).abs().max() < 1e-5
    assert (chunked.entropy - full.entropy).abs().max() < 1e-5
    assert float(chunked.entropy.detach()[chunked.mask].min()) > 0
    for name, grad in full_grads.items():
        scale = max(1.0, float(grad.abs().max()))
        assert (chunked_grads[name] - grad).abs().max() < 1e-5 * scale, name
