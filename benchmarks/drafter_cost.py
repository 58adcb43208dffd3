"""Cost of a drafter's step against one target forward, after a 1,200-token context (fp32, batch 1).

- draft model: one forward of one token on its own KV cache (a chain drafts one token per forward), over
  the whole vocabulary and over its 8,192 most frequent tokens (``draft_vocab``, where it ships a ranking);
- EAGLE head: one head step over ``topk`` frontier nodes (one step of the EAGLE-2 tree), lm_head included,
  over the whole vocabulary and over the head's 4,096 most frequent tokens (``draft_vocab``).
Medians of 20, interleaved. Usage: python benchmarks/drafter_cost.py [DRAFT_DIR EAGLE_DIR].
The last stdout line is one JSON document.
"""

import json
import statistics
import sys
import time

import torch

from speculab.methods import DEFAULT_DRAFT, DEFAULT_EAGLE, METHODS, make_proposer
from speculab.models.draft_vocab import load_token_ranking
from speculab.models.eagle_head import load_eagle_head
from speculab.models.llama import causal_batch, prefill
from speculab.models.loading import load_model
from speculab.runtime import load

CONTEXT, TOPK, DRAFT_VOCAB, DRAFT_MODEL_VOCAB = 1200, 8, 4096, 8192


def file_parameters(folder) -> int:
    """Parameters stored in the checkpoint (prepacked modules hide theirs from .parameters())."""
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(f"{folder}/model.safetensors").values())


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    draft_dir, eagle_dir = sys.argv[1:3] if len(sys.argv) > 2 else (DEFAULT_DRAFT, DEFAULT_EAGLE)
    target = load(None, "float32").model
    draft = load_model(draft_dir, torch.float32)
    head = load_eagle_head(eagle_dir, target)
    context = torch.randint(0, target.config.vocab_size, (CONTEXT,)).tolist()
    t_cache, d_cache = target.new_cache(1, CONTEXT + 64), draft.new_cache(1, CONTEXT + 64)
    prefill(target, t_cache, 0, context)
    prefill(draft, d_cache, 0, context)
    h_cache = head.new_cache(1, CONTEXT + 64)
    h_cache.lengths[0] = CONTEXT  # the head's cache holds the context's entries (values do not change the cost)
    one = torch.tensor([[context[0]]])
    nodes = torch.tensor([context[:TOPK]])
    feats = torch.randn(1, TOPK, target.config.hidden_size)
    ranking = load_token_ranking(eagle_dir, target.config.vocab_size)[:DRAFT_VOCAB]
    tree = {k: METHODS["eagle"].defaults[k] for k in ("num_steps", "num_draft_tokens")}  # unused here: only the logits are timed
    reduced = make_proposer("eagle", head=head, target=target, topk=TOPK, draft_vocab=ranking, **tree)
    draft_ranking = load_token_ranking(draft_dir, target.config.vocab_size)[:DRAFT_MODEL_VOCAB]
    draft_reduced = make_proposer("draft", model=draft, draft_vocab=draft_ranking, num_speculative_tokens=1).reduced
    runs = {"target": [], "draft": [], "draft_reduced_vocab": [], "eagle_step": [], "eagle_step_reduced_vocab": []}
    for _ in range(20):
        batch = causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1)
        runs["target"].append(timed(lambda: target(one, batch, t_cache)))
        runs["draft"].append(timed(lambda: draft(one, causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1), d_cache)))
        runs["draft_reduced_vocab"].append(
            timed(lambda: draft(one, causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1), d_cache, lm_head=draft_reduced.logits))
        )
        hb = causal_batch(torch.arange(1), torch.tensor([CONTEXT]), TOPK)
        with torch.no_grad():
            runs["eagle_step"].append(timed(lambda: head(target, nodes, feats, hb, h_cache)))
            runs["eagle_step_reduced_vocab"].append(timed(lambda: reduced._logits(head.hidden(target, nodes, feats, hb, h_cache))))
    ms = {k: statistics.median(v) * 1e3 for k, v in runs.items()}
    result = {
        "context": CONTEXT,
        "topk": TOPK,
        "ms": ms,
        "draft_token_cost": ms["draft"] / ms["target"],
        "draft_token_reduced_vocab_cost": ms["draft_reduced_vocab"] / ms["target"],
        "draft_model_vocab": DRAFT_MODEL_VOCAB,
        "eagle_step_cost": ms["eagle_step"] / ms["target"],
        "eagle_step_reduced_vocab_cost": ms["eagle_step_reduced_vocab"] / ms["target"],
        "draft_vocab": DRAFT_VOCAB,
        "draft_parameters": file_parameters(draft_dir),
        "eagle_parameters": file_parameters(eagle_dir),
    }
    print({k: f"{v:.2f} ms" for k, v in ms.items()}, file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
