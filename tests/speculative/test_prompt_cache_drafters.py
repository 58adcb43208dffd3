"""A cached prompt restores the drafter's prompt state: same tokens, same drafts, no drafter prefill."""

import pytest
import torch

from speculab.engine import Engine
from speculab.methods import make_proposer
from speculab.models.eagle_head import load_eagle_head
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams
from tests.helpers import tiny_model, write_eagle_head


def _proposers(target, hf_target, folder):
    head = load_eagle_head(write_eagle_head(folder, hf_target.config), target)
    draft = tiny_model(seed=3, num_hidden_layers=1)
    return {
        "eagle": lambda: make_proposer("eagle", head=head, target=target, num_steps=3, topk=2, num_draft_tokens=6),
        "draft": lambda: make_proposer("draft", model=draft, num_speculative_tokens=3),
    }


@pytest.mark.parametrize("method", ["eagle", "draft"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_cached_drafter_state_reproduces_a_fresh_admit(tmp_path, hf_target, target, method, temperature):
    make = _proposers(target, hf_target, tmp_path)[method]
    g = torch.Generator().manual_seed(5)
    distinct = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (9, 23, 1)]
    prompts = distinct + distinct[:2]  # the last two repeat: hits within the first engine's run
    params = [SamplingParams(max_tokens=12, temperature=temperature, seed=i % 3, ignore_eos=True) for i in range(len(prompts))]

    def run(cache):
        proposer = make()
        calls = {"admit": 0, "admit_cached": 0}
        for name in calls:
            original = getattr(proposer, name)

            def counted(*args, _name=name, _original=original):
                calls[_name] += 1
                return _original(*args)

            setattr(proposer, name, counted)
        requests = Engine(target, 2, 128, proposer=proposer, prompt_cache=cache).generate(prompts, params)
        return [r.output_ids for r in requests], [r.stats.accepted_tokens for r in requests], calls

    fresh, fresh_accepted, fresh_calls = run(None)
    cache = PromptCache()
    first, first_accepted, first_calls = run(cache)
    second, second_accepted, second_calls = run(cache)
    assert first == second == fresh
    assert first_accepted == second_accepted == fresh_accepted  # the same drafts were proposed
    assert fresh_calls == {"admit": 5, "admit_cached": 0}
    assert first_calls == {"admit": 3, "admit_cached": 2}
    assert second_calls == {"admit": 0, "admit_cached": 5}
    assert all(e.drafter_states for e in cache.entries.values())  # each cached prompt holds its drafter's state
