"""End to end: sampled speculative decoding draws from the target's distribution (engine, drafters, verifier)."""

import pytest
import torch

from speculab.engine import Engine
from speculab.models.eagle3_head import load_eagle3_head
from speculab.models.eagle_head import load_eagle_head
from speculab.models.llama import causal_batch
from speculab.sampling import SamplingParams, target_probs
from speculab.speculative.proposer import make_proposer
from tests.helpers import speculab_from_hf, tiny_hf_model, tiny_model, write_eagle3_head, write_eagle_head

VOCAB = 12


def exact_second_token(model, prompt, temperature):
    """P(second generated token) = sum over first tokens t of p(t | prompt) p(. | prompt, t), computed exactly."""

    def probs(tokens):
        cache = model.new_cache(1, 32)
        out = model(torch.tensor([tokens]), causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), len(tokens)), cache)
        return (out.logits[0, -1].float() / temperature).softmax(-1)

    first = probs(prompt)
    return sum(first[t] * probs(prompt + [t]) for t in range(VOCAB))


@pytest.mark.parametrize("method", ["draft", "draft-reduced", "ngram"])
def test_second_token_distribution_matches_target(method):
    target = tiny_model(seed=5, vocab_size=VOCAB)
    drafter = tiny_model(seed=6, vocab_size=VOCAB)
    prompt = [3, 7, 3, 7, 3]
    exact = exact_second_token(target, prompt, temperature=1.0)
    counts = torch.zeros(VOCAB)
    batch, rounds = 16, 150  # 2,400 samples, fixed seeds: deterministic, so it cannot flake
    for rnd in range(rounds):
        options = {
            "draft": dict(model=drafter, num_speculative_tokens=3),
            # the draft never proposes 4 of the 12 tokens: only recovered tokens can bring them
            "draft-reduced": dict(model=drafter, num_speculative_tokens=3, draft_vocab=torch.tensor([0, 2, 3, 5, 7, 8, 9, 11])),
            "ngram": dict(num_speculative_tokens=3, prompt_lookup_max=2),
        }[method]
        engine = Engine(target, max_batch=batch, max_seq_len=32, proposer=make_proposer(method.removesuffix("-reduced"), **options))
        params = [SamplingParams(max_tokens=2, temperature=1.0, seed=rnd * batch + i, ignore_eos=True) for i in range(batch)]
        for r in engine.generate([prompt] * batch, params):
            counts[r.output_ids[1]] += 1
    empirical = counts / counts.sum()
    tv = 0.5 * float((empirical - exact).abs().sum())
    assert tv < 0.05, (tv, empirical, exact)  # sampling error alone at N=2400, 12 tokens: ~0.02


def exact_third_token(model, prompt, params):
    """P(third generated token) under ``params`` (temperature, top-k, top-p), summed exactly over the first two."""

    def probs(tokens):
        cache = model.new_cache(1, 32)
        out = model(torch.tensor([tokens]), causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), len(tokens)), cache)
        return target_probs(out.logits[0, -1:], params)[0]

    first = probs(prompt)
    total = torch.zeros(VOCAB)
    for a in range(VOCAB):
        if first[a] > 0:
            second = probs(prompt + [a])
            total += sum(first[a] * second[b] * probs(prompt + [a, b]) for b in range(VOCAB) if second[b] > 0)
    return total


@pytest.mark.parametrize("layout", ["eagle", "eagle3"])
def test_eagle_tree_third_token_follows_filtered_target(tmp_path, layout):
    """An EAGLE tree (3 deep, 3 wide) under temperature, top-k and top-p: the third token (the second
    speculative position, reached through accepted tree nodes as well as recovered ones) is distributed as
    the target's filtered distribution says."""
    hf = tiny_hf_model("llama", seed=5, vocab_size=VOCAB)
    target = speculab_from_hf(hf)
    if layout == "eagle":
        head = load_eagle_head(write_eagle_head(tmp_path, hf.config, seed=3), target)
    else:  # a 6-token draft vocabulary (every other token): the rest only come as recovered tokens
        head = load_eagle3_head(write_eagle3_head(tmp_path, hf.config, seed=3, draft_vocab=6), target)
    prompt = [3, 7, 3, 7, 3]
    base = SamplingParams(max_tokens=3, temperature=0.9, top_k=6, top_p=0.85, ignore_eos=True)
    exact = exact_third_token(target, prompt, base)
    counts, accepted = torch.zeros(VOCAB), 0
    batch, rounds = 16, 150  # 2,400 samples, fixed seeds: deterministic, so it cannot flake
    for rnd in range(rounds):
        proposer = make_proposer(layout, head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8)
        engine = Engine(target, max_batch=batch, max_seq_len=32, proposer=proposer)
        params = [SamplingParams(**{**base.__dict__, "seed": rnd * batch + i}) for i in range(batch)]
        for r in engine.generate([prompt] * batch, params):
            counts[r.output_ids[2]] += 1
            accepted += r.stats.accepted_tokens
    assert accepted > rounds * batch // 20  # drafts are accepted (about one request in nine here): that path is exercised
    empirical = counts / counts.sum()
    tv = 0.5 * float((empirical - exact).abs().sum())
    assert tv < 0.05, (tv, empirical, exact)
