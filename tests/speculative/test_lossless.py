"""Every method reproduces the baseline's greedy tokens exactly (fp32 tiny models), batched and ragged."""

import pytest
import torch

from speculab.engine import Engine, sequence_length
from speculab.methods import make_proposer
from speculab.sampling import SamplingParams
from speculab.speculative.errors import VocabularyMismatchError
from tests.helpers import KERNELS, bf16_kv_target, bigram_hf_model, speculab_from_hf, tiny_model, tiny_target

PARAMS = SamplingParams(max_tokens=20, ignore_eos=True)


@pytest.fixture(scope="module", params=KERNELS)
def target(request):
    return tiny_target(request.param, seed=3)[1]


@pytest.fixture(scope="module")
def other_draft():
    return tiny_model(seed=11)


def repetitive_prompts(batch, seed):
    """Prompts with repeated spans, so prompt lookup finds matches; ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(batch):
        span = torch.randint(3, 256, (4 + i % 5,), generator=g).tolist()
        noise = torch.randint(3, 256, (1 + (7 * i) % 11,), generator=g).tolist()
        prompts.append(noise + span * 3 + noise[:2])
    return prompts


def baseline(target, prompts, params=PARAMS):
    return [r.output_ids for r in Engine(target, max_batch=len(prompts), max_seq_len=256).generate(prompts, params)]


def speculative(target, prompts, proposer, params=PARAMS):
    engine = Engine(target, max_batch=len(prompts), max_seq_len=256, proposer=proposer)
    return engine.generate(prompts, params)


METHODS = {
    "ngram": lambda target, other: make_proposer("ngram", num_speculative_tokens=4, prompt_lookup_min=1, prompt_lookup_max=3),
    "suffix": lambda target, other: make_proposer(
        "suffix", num_speculative_tokens=6, max_tree_depth=8, max_cached_requests=4, max_spec_factor=1.0, min_token_prob=0.1
    ),
    "draft-other": lambda target, other: make_proposer("draft", model=other, num_speculative_tokens=3),
    "draft-self": lambda target, other: make_proposer("draft", model=target, num_speculative_tokens=4),
    # a reduced draft vocabulary: 96 of the 256 tokens, in no particular order
    "draft-other-reduced": lambda target, other: make_proposer(
        "draft", model=other, num_speculative_tokens=3, kept_token_ids=torch.randperm(256, generator=torch.Generator().manual_seed(0))[:96]
    ),
}


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_greedy_output_identical_to_baseline(target, other_draft, method, batch):
    prompts = repetitive_prompts(batch, seed=batch)
    requests = speculative(target, prompts, METHODS[method](target, other_draft), PARAMS)
    assert [r.output_ids for r in requests] == baseline(target, prompts)
    for r in requests:  # each token after the prefill's came from one step, as an accepted draft token or the bonus
        assert r.stats.steps <= len(r.output_ids) - 1 <= r.stats.steps + r.stats.accepted_tokens


@pytest.mark.parametrize("method", sorted(METHODS))
def test_greedy_output_identical_to_baseline_on_a_bf16_cache(other_draft, method):
    """A bf16 KV cache (the tiles' attention where the CPU has AMX) changes what the target computes, not that a
    verify computes it as decoding does: every method still gives the baseline's tokens."""
    target = bf16_kv_target(seed=5)[1]
    prompts = repetitive_prompts(3, seed=7)
    expected = baseline(target, prompts)
    got = [r.output_ids for r in speculative(target, prompts, METHODS[method](target, other_draft))]
    assert got == expected


@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_engine_sized_by_sequence_length_fits_its_requests_exactly(target, other_draft, method):
    """No slack: prompt + max_tokens + the proposer's headroom is all a request writes (the drafts of its last steps
    included), so an engine of exactly that size runs it to the end, still lossless; one position less is refused."""
    prompts = repetitive_prompts(3, seed=5)
    proposer = METHODS[method](target, other_draft)
    exact = sequence_length(max(map(len, prompts)), PARAMS.max_tokens, proposer)
    requests = Engine(target, max_batch=3, max_seq_len=exact, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in requests] == baseline(target, prompts)
    assert all(len(r.output_ids) == PARAMS.max_tokens for r in requests)
    with pytest.raises(ValueError, match="draft headroom"):
        Engine(target, max_batch=3, max_seq_len=exact - 1, proposer=METHODS[method](target, other_draft)).generate(prompts, PARAMS)


def test_self_draft_accepts_everything(target):
    """The target drafting for itself is always right: τ = k + 1 on every full step."""
    prompts = repetitive_prompts(3, seed=0)
    requests = speculative(target, prompts, make_proposer("draft", model=target, num_speculative_tokens=4))
    for r in requests:
        assert r.stats.accepted_tokens == r.stats.drafted_depth
        assert r.stats.acceptance_rate == 1.0
        assert r.stats.mean_acceptance_length > 4.0  # 5 per step except the budget-truncated last ones


def test_self_draft_over_a_shuffled_whole_vocabulary_accepts_everything(target):
    """Draft indices map back to the right token ids: the target over every token, listed shuffled, is always right."""
    shuffled = torch.randperm(256, generator=torch.Generator().manual_seed(1))
    requests = speculative(
        target, repetitive_prompts(2, seed=1), make_proposer("draft", model=target, num_speculative_tokens=4, kept_token_ids=shuffled)
    )
    assert all(r.stats.acceptance_rate == 1.0 for r in requests)


def test_ngram_accepts_on_a_cycling_model():
    """Once a model's output cycles, every n-gram draft is right: the engine must accept most of them (0.78 when
    written: only drafts made before an output starts to cycle miss)."""
    model = speculab_from_hf(bigram_hf_model())
    prompts = repetitive_prompts(4, seed=8)
    params = SamplingParams(max_tokens=48, ignore_eos=True)
    requests = speculative(
        model, prompts, make_proposer("ngram", num_speculative_tokens=4, prompt_lookup_min=1, prompt_lookup_max=4), params
    )
    assert [r.output_ids for r in requests] == baseline(model, prompts, params)
    accepted = sum(r.stats.accepted_tokens for r in requests)
    drafted = sum(r.stats.drafted_depth for r in requests)
    assert accepted >= 0.7 * drafted > 0, (accepted, drafted)


def test_seeded_sampling_runs_and_respects_budget(target, other_draft):
    prompts = repetitive_prompts(3, seed=5)
    params = [SamplingParams(max_tokens=15, temperature=0.8, seed=s, ignore_eos=True) for s in range(3)]
    a = speculative(target, prompts, make_proposer("draft", model=other_draft, num_speculative_tokens=3), params)
    b = speculative(target, prompts, make_proposer("draft", model=other_draft, num_speculative_tokens=3), params)
    assert [r.output_ids for r in a] == [r.output_ids for r in b]
    assert all(len(r.output_ids) == 15 for r in a)


def test_vocabulary_mismatch_is_a_clear_error(target):
    small_vocab = tiny_model(seed=1, vocab_size=128)
    with pytest.raises(VocabularyMismatchError, match="vocab_size 128"):
        Engine(target, max_batch=1, max_seq_len=64, proposer=make_proposer("draft", model=small_vocab, num_speculative_tokens=4))


def test_unknown_method_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown method 'medusa'"):
        make_proposer("medusa")


def seeded_sampling(n: int) -> list[SamplingParams]:
    """Seeded sampled requests (coupled: ``--sampling-verify auto``), half of them under top-k and top-p."""
    return [
        SamplingParams(max_tokens=20, ignore_eos=True, temperature=0.8, seed=100 + i, **({"top_k": 20, "top_p": 0.9} if i % 2 else {}))
        for i in range(n)
    ]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_seeded_sampled_output_identical_to_baseline(target, other_draft, method):
    """Coupled sampling: a seeded request's tokens are plain sampling's for its seed, on every kernel kind."""
    prompts = repetitive_prompts(4, seed=9)
    params = seeded_sampling(len(prompts))
    requests = speculative(target, prompts, METHODS[method](target, other_draft), params)
    assert [r.output_ids for r in requests] == baseline(target, prompts, params)
    assert sum(r.stats.accepted_tokens for r in requests) > 0


@pytest.mark.parametrize("method", sorted(METHODS))
def test_seeded_sampled_output_identical_to_baseline_on_a_bf16_cache(other_draft, method):
    target = bf16_kv_target(seed=5)[1]
    prompts = repetitive_prompts(3, seed=7)
    params = seeded_sampling(len(prompts))
    got = [r.output_ids for r in speculative(target, prompts, METHODS[method](target, other_draft), params)]
    assert got == baseline(target, prompts, params)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_logprobs_are_the_targets_as_plain_decoding_reports_them(target, other_draft, method):
    """Each token's logprob and top tokens come from the target's logits at its position, whether it was accepted,
    the bonus or recovered: plain decoding's to fp32 rounding."""
    prompts = repetitive_prompts(3, seed=4)
    params = [SamplingParams(max_tokens=16, ignore_eos=True, logprobs=3)] + seeded_sampling(2)
    params[1:] = [SamplingParams(**{**p.__dict__, "logprobs": 0}) for p in params[1:]]
    requests = speculative(target, prompts, METHODS[method](target, other_draft), params)
    plain = Engine(target, max_batch=3, max_seq_len=256).generate(prompts, params)
    for got, expected in zip(requests, plain):
        assert got.output_ids == expected.output_ids and len(got.logprobs) == len(got.output_ids)
        assert [t.token_id for t in got.logprobs] == got.output_ids
        for a, b in zip(got.logprobs, expected.logprobs):
            assert abs(a.logprob - b.logprob) < 1e-4 and [i for i, _ in a.top] == [i for i, _ in b.top]
            assert all(abs(x - y) < 1e-4 for (_, x), (_, y) in zip(a.top, b.top))
    assert len(requests[0].logprobs[0].top) == 3 and requests[1].logprobs[0].top == ()
