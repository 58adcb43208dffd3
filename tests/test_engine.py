"""Baseline decoding in batch slots: batching, continuous batching, stopping, sampling."""

import pytest
import torch

from speculab.engine import Engine
from speculab.sampling import SamplingParams
from tests.helpers import tiny_model


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=3)


def prompts_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


def run_alone(model, prompt, params):
    return Engine(model, max_batch=1, max_seq_len=128).generate([prompt], params)[0].output_ids


def reference_greedy(model, prompt, n):
    """Greedy decoding by full recomputation (no cache reuse): the ground truth."""
    out = list(prompt)
    for _ in range(n):
        engine = Engine(model, max_batch=1, max_seq_len=128)
        out.append(engine.generate([out], SamplingParams(max_tokens=1, ignore_eos=True))[0].output_ids[0])
    return out[len(prompt) :]


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_batch_rows_equal_prompts_run_alone(model, batch):
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    prompts = prompts_of([5 + 7 * i % 23 for i in range(batch)], seed=batch)
    together = Engine(model, max_batch=batch, max_seq_len=128).generate(prompts, params)
    for prompt, request in zip(prompts, together):
        assert request.output_ids == run_alone(model, prompt, params)
        assert request.finish_reason == "length" and len(request.output_ids) == 12


def test_cached_decoding_equals_recomputation(model):
    prompt = prompts_of([9])[0]
    assert run_alone(model, prompt, SamplingParams(max_tokens=8, ignore_eos=True)) == reference_greedy(model, prompt, 8)


def test_requests_join_and_leave_at_any_step(model):
    """Continuous batching: more requests than slots, different budgets; each equals its solo run."""
    engine = Engine(model, max_batch=3, max_seq_len=128)
    prompts = prompts_of([4, 11, 6, 17, 3, 8], seed=5)
    budgets = [3, 9, 5, 2, 7, 4]
    params = [SamplingParams(max_tokens=b, ignore_eos=True) for b in budgets]
    requests = [engine.add_request(p, sp) for p, sp in zip(prompts[:2], params[:2])]
    engine.step()
    engine.step()
    requests += [engine.add_request(p, sp) for p, sp in zip(prompts[2:], params[2:])]
    max_running = 0
    while engine.has_work:
        engine.step()
        max_running = max(max_running, len(engine.running))
        assert [r.slot for r in engine.running] == list(range(len(engine.running)))
    assert max_running == 3
    for r, p, sp in zip(requests, prompts, params):
        assert r.output_ids == run_alone(model, p, sp)


def test_stop_tokens_and_streaming(model):
    prompt = prompts_of([7])[0]
    free = run_alone(model, prompt, SamplingParams(max_tokens=10, ignore_eos=True))
    stop = free[4]
    first_stop = free.index(stop)
    streamed = []
    engine = Engine(model, max_batch=2, max_seq_len=128)
    (request,) = engine.generate(
        [prompt], SamplingParams(max_tokens=10, stop_token_ids=frozenset({stop})), on_token=lambda e: streamed.extend(e.token_ids)
    )
    assert request.output_ids == free[:first_stop] == streamed
    assert request.finish_reason == "stop"
    assert engine.running == [] and engine.cache.lengths == [0, 0]


def test_seeded_sampling_reproducible_and_batch_independent(model):
    prompts = prompts_of([6, 9, 4], seed=11)
    params = [SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, top_k=50, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    together = Engine(model, max_batch=3, max_seq_len=64).generate(prompts, params)
    for prompt, p, r in zip(prompts, params, together):
        assert r.output_ids == run_alone(model, prompt, p)
    other_seed = run_alone(model, prompts[0], SamplingParams(max_tokens=10, temperature=0.9, seed=99, ignore_eos=True))
    assert other_seed != together[0].output_ids  # 10 tokens from a random model: a collision is (1/256)^k unlikely


def test_bad_requests_are_rejected(model):
    engine = Engine(model, max_batch=1, max_seq_len=32)
    with pytest.raises(ValueError, match="exceeds"):
        engine.add_request([5] * 30, SamplingParams(max_tokens=8))
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request([5, 999])
    with pytest.raises(ValueError, match="at least one token"):
        engine.add_request([])


def test_token_logits_are_the_rows_each_token_was_chosen_from(model):
    from speculab.models.llama import causal_batch

    prompt = prompts_of([6], seed=4)[0]
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    events = list(Engine(model, 1, 64, token_logits=True).stream([prompt], params))
    request = events[-1].request
    rows = torch.cat([e.logits for e in events])
    assert rows.shape == (len(request.output_ids), model.config.vocab_size) == (10, model.config.vocab_size)
    assert all(e.logits.shape[0] == len(e.token_ids) for e in events)
    ids = prompt + request.output_ids[:-1]
    cache = model.new_cache(1, len(ids))
    logits = model(torch.tensor([ids]), causal_batch(torch.tensor([0]), torch.tensor([0]), len(ids)), cache).logits[0, len(prompt) - 1 :]
    torch.testing.assert_close(rows, logits, atol=1e-4, rtol=1e-4)  # one full forward: row i gave output token i
    assert rows.argmax(-1).tolist() == request.output_ids  # greedy: each token is its row's argmax
    assert all(e.logits is None for e in Engine(model, 1, 64).stream([prompt], params))  # not asked: none kept


def test_a_request_failing_in_verification_fails_alone(model, monkeypatch):
    """One request whose sampling raises ends with finish_reason "error"; the requests batched with it are untouched."""
    import speculab.engine

    real = speculab.engine.sampling_probs

    def breaks_on_one(logits, params):
        if params.temperature == 0.5:
            raise FloatingPointError("this request's distribution is broken")
        return real(logits, params)

    monkeypatch.setattr(speculab.engine, "sampling_probs", breaks_on_one)
    prompts = prompts_of([6, 9, 4], seed=4)
    good = SamplingParams(max_tokens=8, ignore_eos=True)
    bad = SamplingParams(max_tokens=8, temperature=0.5, seed=1, ignore_eos=True)
    done = Engine(model, max_batch=3, max_seq_len=128).generate(prompts, [good, bad, good])
    assert done[1].finish_reason == "error" and "broken" in done[1].error
    for prompt, request in zip(prompts[::2], done[::2]):
        assert request.finish_reason == "length" and request.output_ids == run_alone(model, prompt, good)


def test_a_request_failing_in_prefill_fails_alone(model, monkeypatch):
    import speculab.engine

    real = speculab.engine.sample_rows

    def breaks_on_one(logits, params, generators):
        if params[0].temperature == 0.5:
            raise FloatingPointError("this request's prefill sample is broken")
        return real(logits, params, generators)

    monkeypatch.setattr(speculab.engine, "sample_rows", breaks_on_one)
    prompts = prompts_of([5, 7], seed=5)
    good = SamplingParams(max_tokens=6, ignore_eos=True)
    done = Engine(model, max_batch=2, max_seq_len=128).generate(prompts, [SamplingParams(max_tokens=6, temperature=0.5), good])
    assert done[0].finish_reason == "error" and done[0].output_ids == []
    assert done[1].output_ids == run_alone(model, prompts[1], good)


def test_an_engines_bytes_are_its_caches_and_one_that_does_not_fit_is_refused(model, monkeypatch):
    from speculab import free_memory
    from speculab.engine import engine_bytes
    from speculab.free_memory import MemoryShortfall
    from speculab.methods import make_proposer

    draft = make_proposer("draft", model=tiny_model(seed=4, num_hidden_layers=1), num_speculative_tokens=3)
    engine = Engine(model, max_batch=3, max_seq_len=96, proposer=draft)
    assert engine_bytes(model, 3, 96, draft) == engine.cache.kv.nbytes + draft.cache.kv.nbytes
    monkeypatch.setattr(free_memory, "available_bytes", lambda device="cpu": engine_bytes(model, 3, 96, draft))
    with pytest.raises(MemoryShortfall, match=r"an engine of 3 slots x 96 positions \(draft\) needs"):
        Engine(model, max_batch=3, max_seq_len=96, proposer=draft)  # the margin is not there
