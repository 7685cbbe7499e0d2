"""Per-token log-probs (and the sampling distribution's entropy) of completions under a causal LM.

Layout: prompts are left-padded so every prompt ends at the same column P, completions are right-padded after
it, and position ids count only real tokens (cumsum of the attention mask), exactly what HF `generate` does
with a left-padded batch.

Two paths compute the same numbers from temperature-scaled logits:
- `completion_scores` (the learner's): the decoder's last hidden states of the completion tokens go through
  `ChunkedLMHeadLogProbs`, which never materialises [B, T, V] logits. It projects [token_chunk, vocab_chunk]
  tiles, folds each into an online logsumexp (and the running sum of p*z for the entropy), and recomputes the
  tiles in backward, in place (two fp32 tiles per step). Padding positions are not projected at all. Memory for
  the logits: a few tiles plus a few fp32 numbers per token, instead of about four [B, T, V] fp32 copies
  (measured in bench/learner-memory/learner_memory.py).
- `full_logits_scores`: the plain path (the model's [B, T+1, V] logits, fp32 log-softmax), kept as the
  reference the chunked path is tested against, and used for models whose head is not a plain linear layer.
The chunked design follows TRL's `ChunkedLogProbFunction` (trl/kernels/chunked_logprob.py) and prime-rl's
chunked lm_head, in plain torch: the projections run on the BLAS, gradients are accumulated in fp32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swarmnode.model.transfers import to_device

TOKEN_CHUNK = 2048  # tokens per lm_head tile
VOCAB_CHUNK = 8192  # vocabulary columns per tile: a 2048 x 8192 fp32 tile is 64 MiB; two are alive at most


def pad_batch(
    prompt_tokens: list[list[int]], completions: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(input_ids [B, P+T], attention_mask [B, P+T], completion mask [B, T], T) for the layout above."""
    if len(prompt_tokens) != len(completions) or not prompt_tokens:
        raise ValueError(f"need one prompt per completion (got {len(prompt_tokens)} and {len(completions)})")
    if any(not p for p in prompt_tokens):
        raise ValueError("every prompt needs at least one token")
    P = max(len(p) for p in prompt_tokens)
    T = max(1, max(len(c) for c in completions))
    # rows built as Python lists and converted once: per-row tensor writes cost ~6 small ops a row (measured 4 %
    # of a tiny-model learner step)
    pairs = list(zip(prompt_tokens, completions))
    ids = torch.tensor(
        [[pad_id] * (P - len(p)) + list(p) + list(c) + [pad_id] * (T - len(c)) for p, c in pairs], dtype=torch.long
    )
    attn = torch.tensor(
        [[0] * (P - len(p)) + [1] * (len(p) + len(c)) + [0] * (T - len(c)) for p, c in pairs], dtype=torch.long
    )
    comp_mask = torch.tensor([[True] * len(c) + [False] * (T - len(c)) for _, c in pairs], dtype=torch.bool)
    return ids, attn, comp_mask, T


def _mm_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with an fp32 result; half inputs on CUDA are multiplied in their dtype with fp32 output."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16):
        try:
            return torch.mm(a, b, out_dtype=torch.float32)
        except (NotImplementedError, RuntimeError):  # a GPU or build without the mixed-dtype GEMM (not measured)
            pass
    return torch.mm(a.float(), b.float())


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The projection's dtype: the autocast dtype inside autocast, else the weight's."""
    kind = hidden.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else weight.dtype


def online_tiles(
    hidden, weight, bias, targets, inv_temp, token_chunk: int, vocab_chunk: int, variance=False, below=False
):
    """(log p(target), entropy, log Z, Var(log p) or None, P(token < target) or None) per row of
    `softmax((hidden @ weight.T + bias) * inv_temp)`, tile by tile (online logsumexp; no [N, V] tensor)."""
    cdt = _compute_dtype(hidden, weight)
    N, V = hidden.shape[0], weight.shape[0]
    dev = hidden.device
    running_max = torch.full((N,), float("-inf"), device=dev)
    sum_exp = torch.zeros(N, device=dev)
    sum_exp_z = torch.zeros(N, device=dev)  # sum_v exp(z_v - max) * z_v, for the entropy
    sum_exp_z2 = torch.zeros(N, device=dev) if variance else None  # sum_v exp(z_v - max) * z_v^2
    sum_below = torch.zeros(N, device=dev) if below else None  # sum over v < target of exp(z_v - max)
    target_z = torch.zeros(N, device=dev)
    with torch.autocast(dev.type, enabled=False):
        for t0 in range(0, N, token_chunk):
            rows = slice(t0, min(t0 + token_chunk, N))
            h = hidden[rows].to(cdt)
            for v0 in range(0, V, vocab_chunk):
                v1 = min(v0 + vocab_chunk, V)
                z = _mm_fp32(h, weight[v0:v1].to(cdt).t())
                if bias is not None:
                    z += bias[v0:v1].float()
                z *= inv_temp[rows, None].float()
                new_max = torch.maximum(running_max[rows], z.amax(dim=1))
                rescale = torch.exp(running_max[rows] - new_max)
                e = (z - new_max[:, None]).exp_()  # the only other tile alive: exp(z - max)
                local = targets[rows] - v0
                if sum_below is not None:
                    cols = torch.arange(v1 - v0, device=dev)
                    sum_below[rows] = sum_below[rows] * rescale + (e * (cols[None, :] < local[:, None])).sum(dim=1)
                sum_exp[rows] = sum_exp[rows] * rescale + e.sum(dim=1)
                e_dot_z = torch.bmm(e[:, None, :], z[:, :, None]).view(-1)  # sum_v e*z without a third tile
                sum_exp_z[rows] = sum_exp_z[rows] * rescale + e_dot_z
                if sum_exp_z2 is not None:  # e * z in place (e is not needed after this)
                    e_z2 = torch.bmm(e.mul_(z)[:, None, :], z[:, :, None]).view(-1)
                    sum_exp_z2[rows] = sum_exp_z2[rows] * rescale + e_z2
                del e
                running_max[rows] = new_max
                inside = (local >= 0) & (local < v1 - v0)
                picked = z.gather(1, local.clamp(0, v1 - v0 - 1)[:, None]).squeeze(1)
                target_z[rows] = torch.where(inside, picked, target_z[rows])
    log_z = running_max + torch.log(sum_exp)
    mean_z = sum_exp_z / sum_exp
    var = None
    if sum_exp_z2 is not None:
        var = (sum_exp_z2 / sum_exp - mean_z * mean_z).clamp_(min=0.0)  # Var(log p) under p: no gradient
    return target_z - log_z, log_z - mean_z, log_z, var, None if sum_below is None else sum_below / sum_exp


class ChunkedLMHeadLogProbs(torch.autograd.Function):
    """(log p(target), entropy) per token of `softmax((hidden @ weight.T + bias) * inv_temp)`, tile by tile.

    hidden [N, H], weight [V, H], bias [V] or None, targets [N] long, inv_temp [N] (1 / temperature per token).
    Both outputs are float32 [N] and differentiable with respect to hidden, weight and bias. With `variance`, a
    third output: the variance of log p under p at each token (no gradient; the typicality check's scale).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, inv_temp, token_chunk: int, vocab_chunk: int, variance=False):
        ctx.set_materialize_grads(False)
        cdt = _compute_dtype(hidden, weight)
        inv_temp = inv_temp.float()
        logp, entropy, log_z, var, _ = online_tiles(
            hidden, weight, bias, targets, inv_temp, token_chunk, vocab_chunk, variance=variance
        )
        ctx.save_for_backward(hidden, weight, bias, targets, inv_temp, log_z, entropy)
        ctx.cdt, ctx.token_chunk, ctx.vocab_chunk = cdt, token_chunk, vocab_chunk
        if var is None:
            return logp, entropy
        ctx.mark_non_differentiable(var)
        return logp, entropy, var

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy, *_grad_variance):
        hidden, weight, bias, targets, inv_temp, log_z, entropy = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        cdt, N, V = ctx.cdt, hidden.shape[0], weight.shape[0]
        g_h = torch.zeros(hidden.shape, device=hidden.device) if need_h else None
        g_w = torch.zeros(weight.shape, device=weight.device) if need_w else None
        g_b = torch.zeros(bias.shape, device=bias.device) if need_b and bias is not None else None
        for t0 in range(0, N, ctx.token_chunk):
            rows = slice(t0, min(t0 + ctx.token_chunk, N))
            h = hidden[rows].to(cdt)
            for v0 in range(0, V, ctx.vocab_chunk):
                v1 = min(v0 + ctx.vocab_chunk, V)
                w = weight[v0:v1].to(cdt)
                z = _mm_fp32(h, w.t())
                if bias is not None:
                    z += bias[v0:v1].float()
                z *= inv_temp[rows, None]
                log_p = z.sub_(log_z[rows, None])  # in place: two fp32 tiles at most (log p and p)
                p = torch.exp(log_p)
                # d log p_target / dz_j = 1[j = target] - p_j;  d H / dz_j = -p_j (log p_j + H), so
                # grad_j = -p_j (g_lp + g_H (log p_j + H)) + g_lp 1[j = target]
                g_lp = grad_logp[rows].float() if grad_logp is not None else torch.zeros_like(log_z[rows])
                if grad_entropy is not None:
                    grad = log_p.add_(entropy[rows, None]).mul_(grad_entropy[rows, None].float())
                    grad.add_(g_lp[:, None]).mul_(p).neg_()
                else:
                    grad = p.mul_(-g_lp[:, None])
                del p, log_p
                local = targets[rows] - v0
                hit = torch.where((local >= 0) & (local < v1 - v0), g_lp, torch.zeros_like(g_lp))
                grad.scatter_add_(1, local.clamp(0, v1 - v0 - 1)[:, None], hit[:, None])
                grad *= inv_temp[rows, None]  # back through the temperature, onto the raw logits
                if g_h is not None:
                    g_h[rows] += _mm_fp32(grad.to(cdt), w)
                if g_w is not None:
                    g_w[v0:v1] += _mm_fp32(grad.t().to(cdt), h)
                if g_b is not None:
                    g_b[v0:v1] += grad.sum(dim=0)
        cast = lambda g, like: g.to(like.dtype) if g is not None else None  # noqa: E731
        return cast(g_h, hidden), cast(g_w, weight), cast(g_b, bias), None, None, None, None, None


@dataclass
class CompletionScores:
    """Per completion token: log-prob (with grad), entropy of the sampling distribution, and the mask [B, T]."""

    logp: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor
    where: tuple[torch.Tensor, torch.Tensor] | None = None  # (rows, columns) of the mask's True positions
    variance: torch.Tensor | None = None  # Var(log p) under p per token (`completion_scores(variance=True)`)


def _prepare(model, prompt_tokens, completions, temperature, pad_id):
    """The padded batch on the model's device, plus `where`: (rows, columns) of the completion tokens, found on
    the host (no device synchronisation) and copied without the host waiting."""
    device = next(model.parameters()).device
    ids, attn, mask, T = pad_batch(prompt_tokens, completions, pad_id)
    temps = torch.as_tensor(temperature, dtype=torch.float32).reshape(-1)
    if temps.numel() not in (1, ids.shape[0]) or not bool((temps > 0).all()):
        raise ValueError(f"temperature must be > 0, one value or one per row (got {temperature})")
    where = tuple(to_device(index, device) for index in mask.nonzero(as_tuple=True))
    ids, attn, mask = (to_device(t, device) for t in (ids, attn, mask))
    position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)
    return ids, attn, position_ids, mask, T, to_device(temps.expand(ids.shape[0]).contiguous(), device), where


def _plain_linear_head(model) -> torch.nn.Module | None:
    """The output layer when the logits are exactly `head(last_hidden_state)` (no scaling or soft-capping)."""
    cfg = getattr(model, "config", None)
    if any(getattr(cfg, k, None) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling")):
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return head if isinstance(head, torch.nn.Linear) and hasattr(model, "get_decoder") else None


def completion_scores(
    model,
    prompt_tokens: list[list[int]],
    completions: list[list[int]],
    temperature: float | Sequence[float],
    pad_id: int,
    token_chunk: int = TOKEN_CHUNK,
    vocab_chunk: int = VOCAB_CHUNK,
    variance: bool = False,
) -> CompletionScores:
    """Log-probs and entropies [B, T] of each completion token given its prompt, without [B, T, V] logits.

    `temperature` is one value or one per row. Padding positions hold 0 in both tensors and False in the mask;
    the EOS token, when a completion has one, is an ordinary completion token and inside the mask. With
    `variance`, also Var(log p) under p per token (`CompletionScores.variance`).
    """
    head = _plain_linear_head(model)
    if head is None:
        return full_logits_scores(model, prompt_tokens, completions, temperature, pad_id, variance)
    ids, attn, position_ids, mask, T, temps, where = _prepare(model, prompt_tokens, completions, temperature, pad_id)
    out = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False)
    hidden = out.last_hidden_state[:, -(T + 1) : -1]  # position P-1+t predicts completion token t
    rows, cols = where  # the completion tokens, as `hidden[mask]` would take them, without a device sync
    outputs = ChunkedLMHeadLogProbs.apply(
        hidden[rows, cols],
        head.weight,
        head.bias,
        ids[:, -T:][rows, cols],
        (1.0 / temps)[rows],
        token_chunk,
        vocab_chunk,
        variance,
    )
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    logp, entropy, *var = (zeros.index_put(where, out) for out in outputs)
    return CompletionScores(logp, mask, entropy, where, var[0] if var else None)


def full_logits_scores(
    model,
    prompt_tokens: list[list[int]],
    completions: list[list[int]],
    temperature: float | Sequence[float],
    pad_id: int,
    variance: bool = False,
) -> CompletionScores:
    """The reference path: the model's full [B, T+1, V] logits, fp32 log-softmax."""
    ids, attn, position_ids, mask, T, temps, where = _prepare(model, prompt_tokens, completions, temperature, pad_id)
    out = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, logits_to_keep=T + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float() / temps.view(-1, 1, 1)
    targets = ids[:, -T:]
    log_z = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    probs = torch.softmax(logits, dim=-1)
    entropy = log_z - (probs * logits).sum(dim=-1)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    var = None
    if variance:
        with torch.no_grad():
            var = torch.where(mask, (probs * logits.square()).sum(dim=-1) - (log_z - entropy).square(), zero)
    return CompletionScores(torch.where(mask, logp, zero), mask, torch.where(mask, entropy, zero), where, var)


def completion_logprobs(
    model,
    prompt_tokens: list[list[int]],
    completions: list[list[int]],
    temperature: float | Sequence[float],
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp [B, T] float32 with grad, mask [B, T] bool): `completion_scores` without the entropy."""
    scores = completion_scores(model, prompt_tokens, completions, temperature, pad_id)
    return scores.logp, scores.mask


def behaviour_mismatch(model, generations, temperature: float, pad_id: int) -> tuple[float, float]:
    """(mean, max) |behaviour log-prob - learner forward log-prob| per completion token.

    `generations` are engine outputs (`prompt_tokens`, `completions`, `logprobs`): the gap GEPO's weights see
    between what the sampler reported and what the learner recomputes for the same tokens.
    """
    prompts = [g.prompt_tokens for g in generations for _ in g.completions]
    completions = [c for g in generations for c in g.completions]
    with torch.no_grad():
        logp, mask = completion_logprobs(model, prompts, completions, temperature, pad_id)
    behaviour = torch.zeros_like(logp)
    for i, lp in enumerate(lp for g in generations for lp in g.logprobs):
        behaviour[i, : len(lp)] = torch.tensor(lp)
    diff = (logp - behaviour).abs()[mask]
    return diff.mean().item(), diff.max().item()
