"""Train an EAGLE-3 head with the training-time test (TTT), on self-distilled sequences.

Knows:
- the head's inputs: the hidden states entering three target layers (low, middle,
  high; ``eagle3_feature_layers``) side by side, fused by ``fc``, with the next
  token's embedding; its own pre-norm output replaces them at later steps;
- the draft vocabulary: the ``draft_vocab`` most frequent tokens of the training
  data (``vocab.rank_tokens``), stored as the published ``d2t`` (draft id →
  offset to the target id) and ``t2d`` (target id → in the draft vocabulary);
- the training-time test: the head is unrolled for ``steps`` steps. At step k,
  position t feeds token x_{t+1+k} with the head's step-(k-1) output at t, and
  predicts x_{t+2+k}; it attends to the target-fed entries 0..t of step 0 and
  to its own entries at t of steps 1..k (its draft chain), as at inference;
- optional feature noise (``with_feature_noise``): uniform, relative to each layer's scale;
- the loss: at each step the soft cross-entropy between the target's
  distribution restricted to the draft vocabulary and the head's (reported as
  KL, i.e. less the target's entropy: the same gradient), on positions
  whose target top-1 token is in the draft vocabulary, weighted 0.8^k (the
  reference's weights); there is no feature regression in EAGLE-3;
- the published EAGLE-3 layout (``midlayer.*``, ``fc``, ``norm``, ``lm_head``,
  ``d2t``, ``t2d``, ``draft_vocab_size``, ``target_hidden_size``).

Two ways to get the target's side of a batch: online (``make_batch``: the target runs over the batch
in every step) or offline (``make_cached_batch``: the three layers' inputs from a cache made once,
``eagle3_features.py``, and the target's distribution from the data's final hidden states through
its lm_head), as SpecForge offers both.

One deliberate difference from the reference: step k's entries at t take RoPE
position t + k (the position of the token they stand for, as speculab's tree
gives a depth-d node), where the reference keeps position t at every step.

Does not know: the loop (``loop.py``) or where the data comes from (``distill_data.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from speculab.models.eagle3_head import Eagle3Head, eagle3_feature_layers
from speculab.models.kv_cache import KVCache
from speculab.models.llama import ForwardBatch, Transformer, causal_batch
from speculab.train.eagle import head_config

TTT_STEPS = 7  # the reference's unrolled length
STEP_DECAY = 0.8  # loss weight of step k: 0.8 ** k


@dataclass(frozen=True)
class Eagle3Batch:
    tokens: Tensor  # [batch, n] the sequences, padded
    features: Tensor  # [batch, n, 3 * hidden] the three target layers' inputs at each position
    target_logp: Tensor  # [batch, n - start, draft_vocab_size] the target's next-token log-probabilities over the draft vocabulary, from position start on
    in_draft_vocab: Tensor  # [batch, n - start] bool: the target's top-1 next token is in the draft vocabulary, from position start on
    lengths: Tensor  # [batch] real tokens per row
    first_query: Tensor  # [batch] the first position whose drafts the loss counts: the last prompt position (0: every one)
    start: int  # min(first_query): positions before it only serve as keys (step 0), never as queries of later steps


def draft_vocabulary(ranking: Tensor, size: int, vocab_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """(draft ids' target ids [size] ascending, d2t [size], t2d [vocab_size] bool) from a token ranking.

    Padded with the lowest unranked ids when the ranking is shorter than ``size``."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"draft vocabulary size {size} must be between 1 and the target's {vocab_size}")
    chosen = ranking[:size].tolist()
    if len(chosen) < size:
        taken = set(chosen)
        chosen += [t for t in range(vocab_size) if t not in taken][: size - len(chosen)]
    target_ids = torch.tensor(sorted(chosen), dtype=torch.long)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[target_ids] = True
    return target_ids, target_ids - torch.arange(size), t2d


def new_eagle3_head(target: Transformer, target_ids: Tensor, seed: int = 0, init_std: float = 0.02) -> Eagle3Head:
    """A fresh fp32 EAGLE-3 head; its lm_head starts as the target's rows of the draft vocabulary."""
    torch.manual_seed(seed)
    config = dataclasses.replace(target.config, num_layers=1)
    head = Eagle3Head(config, target.config.hidden_size, len(target_ids))
    for name, p in head.named_parameters():
        if name.endswith("norm.weight"):
            torch.nn.init.ones_(p)
        elif p.dim() == 2:
            torch.nn.init.normal_(p, std=init_std)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.lm_head_rows(target_ids).float())
        head.d2t.copy_(target_ids - torch.arange(len(target_ids)))
    return head.float()


def _layout(items: list[tuple]) -> tuple[Tensor, Tensor, Tensor, int]:
    """(tokens [batch, n] padded, lengths [batch], first_query [batch], start) of a batch of items."""
    lengths = torch.tensor([len(item[0]) for item in items])
    bsz, n = len(items), int(lengths.max())
    tokens = torch.zeros(bsz, n, dtype=torch.long)
    for i, item in enumerate(items):
        tokens[i, : len(item[0])] = torch.tensor(item[0])
    first_query = torch.tensor([max(0, item[2] - 1) if len(item) > 2 and item[2] is not None else 0 for item in items])
    first_query = torch.minimum(first_query, (lengths - 3).clamp(min=0))
    return tokens, lengths, first_query, int(first_query.min())


def _target_distribution(logits: Tensor, target_ids: Tensor, vocab_size: int) -> tuple[Tensor, Tensor]:
    """(log-probabilities over the draft vocabulary, whether the top-1 is in it) from full-vocabulary logits."""
    in_draft = torch.zeros(vocab_size, dtype=torch.bool)
    in_draft[target_ids] = True
    return logits[..., target_ids].log_softmax(-1), in_draft[logits.argmax(-1)]


@torch.no_grad()
def make_batch(target: Transformer, target_ids: Tensor, items: list[tuple]) -> Eagle3Batch:
    """items: (token ids [n], unused EAGLE-1 features[, answer start]) per sequence; the target is run on them.

    With an answer start (the prompt's length; None: every position), the loss counts only the positions the
    head drafts from at inference (the last prompt position on): a code window in the prompt is the target
    reading, not writing.
    """
    tokens, lengths, first_query, start = _layout(items)
    bsz, n = tokens.shape
    layers = eagle3_feature_layers(target.config.num_layers)
    cache = target.new_cache(bsz, n)
    at = torch.arange(start, n).expand(bsz, n - start)  # the target's logits only where the loss reads them
    out = target(tokens, causal_batch(torch.arange(bsz), torch.zeros(bsz, dtype=torch.long), n), cache, logits_at=at, capture_layers=layers)
    features = torch.cat([out.captured[i] for i in layers], dim=-1).float()
    logp, in_draft = _target_distribution(out.logits.float(), target_ids, target.config.vocab_size)
    return Eagle3Batch(tokens, features, logp, in_draft, lengths, first_query, start)


@torch.no_grad()
def make_cached_batch(target: Transformer, target_ids: Tensor, items: list[tuple]) -> Eagle3Batch:
    """items: (token ids [n], final hidden states [n - 1, H], answer start or None, layer features [n - 1, 3H]).

    No target forward: the features come from the offline cache (``eagle3_features.py``), the target's
    distribution from the data's final (post-norm) hidden states through its lm_head. Equal to
    ``make_batch`` up to the cache's bf16 rounding of the features.
    """
    tokens, lengths, first_query, start = _layout(items)
    bsz, n = tokens.shape
    features = torch.zeros(bsz, n, items[0][3].shape[-1])
    final = torch.zeros(bsz, n - start, items[0][1].shape[-1])  # positions start..n-1 (n-1: never a target)
    for i, (ids, hidden, _, fused) in enumerate(items):
        features[i, : len(ids) - 1] = fused.float()
        final[i, : len(ids) - 1 - start] = hidden[start:].float()
    logp, in_draft = _target_distribution(target.lm_head(final).float(), target_ids, target.config.vocab_size)
    return Eagle3Batch(tokens, features, logp, in_draft, lengths, first_query, start)


def with_feature_noise(batch: Eagle3Batch, width: float, generator: torch.Generator | None = None) -> Eagle3Batch:
    """The batch with uniform noise on the fed features, of ``width`` times each layer's RMS at that position.

    EAGLE-1's noise (±0.1 on post-norm features) made relative: the three layers' inputs differ in scale
    by orders of magnitude, so one absolute width would drown the low layer or miss the high one.
    """
    if width <= 0:
        return batch
    bsz, n, fused = batch.features.shape
    per_layer = batch.features.view(bsz, n, 3, fused // 3)
    rms = per_layer.pow(2).mean(-1, keepdim=True).sqrt()
    noise = torch.rand(per_layer.shape, generator=generator) - 0.5
    return dataclasses.replace(batch, features=(per_layer + noise * width * rms).view(bsz, n, fused))


def unrolled_hidden(head: Eagle3Head, target: Transformer, batch: Eagle3Batch, steps: int) -> Iterator[Tensor]:
    """The head's pre-norm outputs [batch, m, H] at each unrolled step, at positions t = start..q-1
    (q = n - 2, m = q - start).

    Step k at position t feeds token x_{t+1+k} with step k-1's output at t (the target's features at
    step 0), sits at RoPE position t + k, and sees step 0's entries 0..t and its own entries at t of
    steps 1..k: exactly what a draft chain grown from position t sees at inference. Step 0 runs at every
    position (later steps read them all as keys); the later steps only from ``batch.start`` on.
    """
    bsz, n = batch.tokens.shape
    q, start = n - 2, batch.start
    m = q - start
    rows = torch.arange(bsz)
    every, t = torch.arange(q), torch.arange(start, q)
    width = q + (steps - 1) * m  # cache: step 0's q entries, then m entries per later step
    cache = KVCache(1, bsz, head.config.num_kv_heads, head.config.head_dim, width, torch.float32, batch.features.device)
    mask = torch.zeros(q, width, dtype=torch.bool)
    mask[:, :q] = every[None, :] <= every[:, None]  # step 0: position t sees the target-fed entries 0..t
    # rows as a tensor, not a slice: reading the cache then copies, so the next step's in-place
    # writes leave what autograd saved for this step untouched (and the mask is cloned for the same reason)
    fwd = ForwardBatch(rows, every.expand(bsz, q), every.expand(bsz, q), mask.clone()[None, None].expand(bsz, 1, q, width), None)
    hidden = head.hidden(target, batch.tokens[:, every + 1], batch.features[:, :q], fwd, cache)[:, start:]
    yield hidden
    mask = mask[start:]  # the later steps' queries: positions start..q-1
    for k in range(1, steps):
        slots = q + (k - 1) * m + torch.arange(m)
        mask[torch.arange(m), slots] = True  # and, from step k on, its own draft at step k
        tokens = batch.tokens[:, (t + 1 + k).clamp(max=n - 1)]  # past the sequence: padding, masked in the loss
        fwd = ForwardBatch(rows, (t + k).expand(bsz, m), slots.expand(bsz, m), mask.clone()[None, None].expand(bsz, 1, m, width), None)
        hidden = head.hidden(target, tokens, hidden, fwd, cache)
        yield hidden


def ttt_loss(
    head: Eagle3Head, target: Transformer, batch: Eagle3Batch, steps: int = TTT_STEPS, feature_noise: float = 0.0
) -> tuple[Tensor, dict]:
    """The weighted sum over the unrolled steps of the soft cross-entropy, and per-step top-1 agreement."""
    batch = with_feature_noise(batch, feature_noise)
    bsz, n = batch.tokens.shape
    q = n - 2  # step-0 positions t = 0..n-3 feed x_{t+1} and predict x_{t+2}
    if q < 1:
        raise ValueError("EAGLE-3 training needs sequences of at least 3 tokens")
    steps = max(1, min(steps, q - batch.start))
    t = torch.arange(batch.start, q)
    drafts_here = t[None, :] >= batch.first_query[:, None]  # [batch, m] positions the head drafts from
    total = torch.zeros(())
    metrics: dict[str, Tensor] = {}
    for k, hidden in enumerate(unrolled_hidden(head, target, batch, steps)):
        logp = head.logits(target, hidden).float().log_softmax(-1)  # [bsz, m, draft_vocab_size]
        predicted = t + 1 + k  # the target position whose next-token distribution step k learns
        column = (predicted - batch.start).clamp(max=n - 1 - batch.start)
        valid = drafts_here & (predicted[None, :] < batch.lengths[:, None] - 1) & batch.in_draft_vocab[:, column]
        if not valid.any():
            break
        target_logp = batch.target_logp[:, column]
        # KL(target ‖ head): the reference's soft cross-entropy less the target's entropy (same gradient, floor 0)
        loss = (target_logp.exp() * (target_logp - logp)).sum(-1)[valid].mean()
        total = total + STEP_DECAY**k * loss
        with torch.no_grad():
            metrics[f"top1_step{k}"] = (logp.argmax(-1) == target_logp.argmax(-1))[valid].float().mean()
    metrics["top1"] = metrics["top1_step0"]
    return total, metrics


def save_eagle3_head(head: Eagle3Head, target_raw: dict, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write the published EAGLE-3 layout (fused projections split back; d2t and t2d beside the weights)."""
    out.mkdir(parents=True, exist_ok=True)
    c = head.config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    wq, wk, wv = head.self_attn.qkv_proj.weight.split([q, kv, kv])
    gate, up = head.mlp.gate_up_proj.weight.chunk(2)
    m = "midlayer."
    weights = {
        "fc.weight": head.fc.weight,
        "norm.weight": head.norm.weight,
        "lm_head.weight": head.lm_head.weight,
        m + "hidden_norm.weight": head.hidden_norm.weight,
        m + "input_layernorm.weight": head.input_layernorm.weight,
        m + "post_attention_layernorm.weight": head.post_attention_layernorm.weight,
        m + "self_attn.q_proj.weight": wq,
        m + "self_attn.k_proj.weight": wk,
        m + "self_attn.v_proj.weight": wv,
        m + "self_attn.o_proj.weight": head.self_attn.o_proj.weight,
        m + "mlp.gate_proj.weight": gate,
        m + "mlp.up_proj.weight": up,
        m + "mlp.down_proj.weight": head.mlp.down_proj.weight,
    }
    state = {k: v.detach().to(dtype).contiguous() for k, v in weights.items()}
    draft_vocab_size = head.lm_head.weight.shape[0]
    target_ids = head.d2t + torch.arange(draft_vocab_size)
    t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
    t2d[target_ids] = True
    state |= {"d2t": head.d2t.detach().clone(), "t2d": t2d}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = head_config(target_raw) | {
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": draft_vocab_size,
        "target_hidden_size": head.target_hidden,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    config.pop("bias", None)  # EAGLE-3's fc has no bias
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out / "model.safetensors"
