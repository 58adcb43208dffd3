"""Chunked prefill: a prompt run a chunk a step beside the running requests gives what a whole prefill gives."""

import pytest
import torch

from speculab.chunked_prefill import REFRESH_STEPS, PacedChunks, Ride, TokenBudget, prefill_room
from speculab.engine import Engine
from speculab.methods import make_proposer
from speculab.models.eagle3_head import load_eagle3_head
from speculab.models.eagle_head import load_eagle_head
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams
from tests.helpers import KERNELS, tiny_model, tiny_target, write_eagle3_head, write_eagle_head

METHODS = ("baseline", "eagle", "eagle3", "draft", "ngram", "suffix")


@pytest.fixture(scope="module", params=KERNELS)
def pair(request):
    return tiny_target(request.param, seed=3)


@pytest.fixture(scope="module")
def proposers(pair, tmp_path_factory):
    hf, target = pair
    folder = tmp_path_factory.mktemp("drafters")
    head = load_eagle_head(write_eagle_head(folder / "eagle", hf.config), target)
    head3 = load_eagle3_head(write_eagle3_head(folder / "eagle3", hf.config), target)
    draft = tiny_model(seed=3, num_hidden_layers=1)
    tree = {"num_steps": 3, "topk": 2, "num_draft_tokens": 5}
    return {
        "baseline": lambda: None,
        "eagle": lambda: make_proposer("eagle", head=head, target=target, **tree),
        "eagle3": lambda: make_proposer("eagle3", head=head3, target=target, **tree),
        "draft": lambda: make_proposer("draft", model=draft, num_speculative_tokens=3),
        "ngram": lambda: make_proposer("ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=3),
        "suffix": lambda: make_proposer(
            "suffix", num_speculative_tokens=3, max_tree_depth=8, max_cached_requests=8, max_spec_factor=1.0, min_token_prob=0.1
        ),
    }


def prompts_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 200, (n,), generator=g).tolist() for n in lengths]


def arrivals(engine: Engine, prompts, params, every: int = 2) -> list:
    """The prompts added one every ``every`` steps (each while the ones before run), run to the end; the requests."""
    requests, steps = [], 0
    while len(requests) < len(prompts) or engine.has_work:
        if len(requests) < len(prompts) and steps % every == 0:
            requests.append(engine.add_request(prompts[len(requests)], params[len(requests)]))
        engine.step()
        steps += 1
    return requests


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_prompts_prefilled_in_chunks_beside_running_ones_give_the_outputs_of_whole_prefills(pair, proposers, method, temperature):
    # a short prompt running while two long ones arrive, the first short request ending while the second prefills:
    # chunks of 1-3 tokens, a prompt moved down a slot when requests left, drafter state built chunk by chunk
    target = pair[1]
    prompts = prompts_of([6, 70, 9, 45], seed=7)
    params = [SamplingParams(max_tokens=m, temperature=temperature, seed=i, ignore_eos=True) for i, m in enumerate((5, 12, 10, 8))]
    whole = arrivals(Engine(target, 3, 128, proposer=proposers[method]()), prompts, params)
    for budget in (TokenBudget(4), TokenBudget(9), PacedChunks(first=3)):
        engine = Engine(target, 3, 128, proposer=proposers[method](), chunked_prefill=budget)
        slots = _slots_joined(engine)
        chunked = arrivals(engine, prompts, params)
        assert [r.output_ids for r in chunked] == [r.output_ids for r in whole], budget
        # the drafter's state came out as a whole prefill's: the same drafts, so the same tokens accepted
        assert [r.stats.accepted_tokens for r in chunked] == [r.stats.accepted_tokens for r in whole], budget
        assert any(prefilled != joined for prefilled, joined in slots), "no prompt was moved down a slot"
        assert all(r.finish_reason == "length" for r in chunked)


def _heads_taken(proposer) -> list[int]:
    """The shared heads' lengths ``proposer.admit_head`` was handed, as it is called."""
    seen, admit_head = [], proposer.admit_head

    def recorded(slot, state, shared):
        seen.append(shared)
        return admit_head(slot, state, shared)

    proposer.admit_head = recorded
    return seen


def _slots_joined(engine: Engine) -> list[tuple[int, int]]:
    """(the slot a prompt prefilled in, the slot it joined the running requests in), as each prompt finishes."""
    seen, finish = [], engine._finish_job

    def recorded(job):
        seen.append((job.slot, len(engine.running)))
        return finish(job)

    engine._finish_job = recorded
    return seen


def test_running_streams_emit_every_step_while_a_long_prompt_prefills(pair):
    target = pair[1]
    engine = Engine(target, 2, 256, chunked_prefill=TokenBudget(8))
    running = engine.add_request(prompts_of([5])[0], SamplingParams(max_tokens=100, ignore_eos=True))
    engine.step()
    long = engine.add_request(prompts_of([120], seed=1)[0], SamplingParams(max_tokens=4, ignore_eos=True))
    steps = 0
    while not long.output_ids:
        emitted = len(running.output_ids)
        engine.step()
        steps += 1
        assert len(running.output_ids) == emitted + 1  # the running stream got its token in every step
    assert steps == -(-120 // prefill_room(8, 1))  # 7 prompt tokens a step beside one decode token
    alone = Engine(target, 1, 256).generate([long.prompt_ids], SamplingParams(max_tokens=4, ignore_eos=True))[0]
    while engine.has_work:
        engine.step()
    assert long.output_ids == alone.output_ids


def test_a_step_always_leaves_a_quarter_of_its_budget_to_prefill():
    assert prefill_room(64, 5) == 59
    assert prefill_room(64, 60) == prefill_room(64, 200) == 16
    assert prefill_room(2, 10) == 1


def test_paced_chunks_add_a_share_of_the_decode_as_measured():
    pace = PacedChunks(share=0.75, first=8, keep=0.5)
    assert pace.room(used=3, remaining=500, rows=0) == 500  # nobody to stall: the whole rest
    assert pace.room(used=3, remaining=500, rows=3) == 0  # three streams' decode not measured yet: a step without prefill
    pace.stepped(0.100, Ride(used=3, rows=3, room=0))
    assert pace.room(used=3, remaining=500, rows=3) == 8  # no prompt token priced yet
    pace.prefilled(500, 1.0)  # 2 ms a token, a prompt run alone: the first price
    assert pace.room(used=3, remaining=500, rows=3) == 37  # 0.75 x 100 ms / 2 ms
    pace.stepped(0.175, Ride(used=3, rows=3, room=37, ran=15))  # 15 riding tokens added 75 ms: 5 ms each, averaged 3.5
    assert pace.token_s == pytest.approx(0.0035)
    pace.stepped(0.300, Ride(used=3, rows=3, room=21, ran=30))  # 200 ms over 30 tokens: 6.67 ms, averaged 5.08
    pace.prefilled(500, 1.0)  # once chunks have ridden, a prompt run alone teaches nothing (its keys read once)
    pace.prefilled(0, 1.0)
    assert pace.token_s == pytest.approx((0.0035 + 0.2 / 30) / 2)
    pace.stepped(1.0, Ride(used=3, rows=3, room=30))  # a prompt started but none of it rode: not a decode
    assert pace.decode_s == {3: pytest.approx(0.1)}
    assert pace.room(used=3, remaining=500, rows=2) == 0  # two streams: their own decode first


def test_paced_chunks_measure_the_decode_alone_again_every_so_often():
    pace = PacedChunks(share=0.5, first=8, keep=0.5)
    pace.stepped(0.100, Ride(used=1, rows=1))  # no prompt waiting
    pace.prefilled(10, 0.05)
    for _ in range(REFRESH_STEPS):
        assert pace.room(used=1, remaining=500, rows=1) == 10
        pace.stepped(0.150, Ride(used=1, rows=1, room=10, ran=10))
    assert pace.room(used=1, remaining=500, rows=1) == 0  # the streams' decode measured alone again
    pace.stepped(0.200, Ride(used=1, rows=1, room=0))
    assert pace.decode_s[1] == pytest.approx(0.15) and pace.room(used=1, remaining=500, rows=1) == 15


def test_a_chunk_rides_in_the_running_requests_forward(pair):
    # one forward a step while a prompt prefills beside a running stream: the chunk is a part of the decode's forward
    target = pair[1]
    engine = Engine(target, 2, 256, chunked_prefill=TokenBudget(8))
    engine.add_request(prompts_of([5])[0], SamplingParams(max_tokens=40, ignore_eos=True))
    engine.step()
    forwards, forward_parts = [], target.forward_parts

    def recorded(parts, cache, capture_layers=()):
        forwards.append([tuple(p.tokens.shape) for p in parts])
        return forward_parts(parts, cache, capture_layers)

    target.forward_parts = recorded
    try:
        long = engine.add_request(prompts_of([30], seed=1)[0], SamplingParams(max_tokens=4, ignore_eos=True))
        while not long.output_ids:
            engine.step()
    finally:
        del target.forward_parts
    assert forwards == [[(1, 1), (1, 7)]] * 4 + [[(1, 1), (1, 2)]]  # 7 prompt tokens a step beside one decode token


def test_a_prompt_aborted_while_it_prefills_frees_its_slot(pair, proposers):
    target = pair[1]
    engine = Engine(target, 1, 128, proposer=proposers["eagle"](), chunked_prefill=TokenBudget(5))
    first, second = prompts_of([60, 11], seed=2)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    doomed = engine.add_request(first, params)
    engine.step()
    assert engine.prefilling is not None and engine.prefilling.request is doomed
    engine.abort(doomed)
    assert engine.prefilling is None and doomed.finish_reason == "abort" and not doomed.output_ids
    after = engine.generate([second], params)[0]
    assert after.output_ids == Engine(target, 1, 128, proposer=proposers["eagle"]()).generate([second], params)[0].output_ids


@pytest.mark.parametrize("method", ["eagle", "draft"])
def test_prompt_cache_hits_under_a_budget_give_the_outputs_of_cold_prefills(pair, proposers, method):
    # a prompt twice (a whole hit), and one that shares its head (the drafter catches up over the head a chunk a step)
    target = pair[1]
    head = prompts_of([50], seed=4)[0]
    prompts = [head + [5, 6, 7], head + [5, 6, 7], head + [9, 8]]
    params = [SamplingParams(max_tokens=8, ignore_eos=True)] * 3
    cold = [Engine(target, 1, 128, proposer=proposers[method]()).generate([p], params[0])[0] for p in prompts]
    cache = PromptCache()
    engine = Engine(target, 2, 128, proposer=proposers[method](), prompt_cache=cache, chunked_prefill=TokenBudget(6))
    heads = _heads_taken(engine.proposer)
    requests = arrivals(engine, prompts, params, every=3)
    assert [r.output_ids for r in requests] == [r.output_ids for r in cold]
    # the drafter took the shared head's share of the first prompt's state, and drafted as after a cold prefill
    assert heads == [50] and [r.stats.accepted_tokens for r in requests] == [r.stats.accepted_tokens for r in cold]
    assert (cache.hits, cache.prefix_hits, cache.reused_tokens) == (1, 1, 50)
    assert [r.cached_tokens for r in requests] == [0, 53, 50]  # none, the whole prompt, the shared head
    assert all(e.drafter_states for e in cache.entries.values())


def test_a_budget_below_one_token_is_refused():
    with pytest.raises(ValueError, match="at least 1 token"):
        TokenBudget(0)
