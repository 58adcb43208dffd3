"""EAGLE-2: published checkpoint layout, dynamic tree, greedy identity with the baseline."""

import pytest
import torch

from speculab.engine import Engine, sequence_length
from speculab.methods import make_proposer
from speculab.models.eagle_head import load_eagle_head
from speculab.models.loading import CheckpointError
from speculab.policy.table import Load, SpeculationPolicy
from speculab.sampling import SamplingParams
from speculab.speculative.eagle import StaticTreeEagleProposer
from speculab.speculative.policy_proposer import PolicyProposer
from tests.helpers import bf16_kv_target, speculab_from_hf, tiny_hf_model, write_eagle3_head, write_eagle_head

PARAMS = SamplingParams(max_tokens=16, ignore_eos=True)


def prompts_of(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize("fmt,bias,own_embedding", [("safetensors", True, False), ("bin", None, True), ("safetensors", False, False)])
def test_published_layout_loads(tmp_path, hf_target, target, fmt, bias, own_embedding):
    write_eagle_head(tmp_path, hf_target.config, fmt=fmt, bias=bias, own_embedding=own_embedding)
    head = load_eagle_head(tmp_path, target)
    assert (head.fc.bias is not None) == (bias is not False)  # an absent 'bias' key means bias, as in the reference
    assert (head.embed_tokens is not None) == own_embedding


def test_wrong_shape_is_named(tmp_path, hf_target, target):
    from safetensors.torch import load_file, save_file

    write_eagle_head(tmp_path, hf_target.config)
    state = load_file(tmp_path / "model.safetensors")
    state["fc.weight"] = state["fc.weight"][:, :10].contiguous()
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="'fc.weight' has shape"):
        load_eagle_head(tmp_path, target)


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("topk,num_steps,num_draft_tokens", [(1, 4, 5), (3, 3, 8), (4, 5, 16)])
def test_greedy_identical_to_baseline(tmp_path, hf_target, target, batch, topk, num_steps, num_draft_tokens):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    prompts = prompts_of([4 + (5 * i) % 13 for i in range(batch)], seed=batch)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    proposer = make_proposer("eagle", head=head, target=target, num_steps=num_steps, topk=topk, num_draft_tokens=num_draft_tokens)
    spec = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    for r in spec:
        assert r.stats.draft_nodes > 0
        assert r.stats.drafted_depth <= r.stats.steps * num_steps


def test_greedy_identical_to_baseline_on_a_bf16_cache(tmp_path):
    """A tree verify over a bf16 KV cache (the tiles' attention where the CPU has AMX) gives the baseline's tokens."""
    hf, target = bf16_kv_target(seed=6)
    head = load_eagle_head(write_eagle_head(tmp_path, hf.config), target)
    prompts = prompts_of([5, 9, 14], seed=8)
    base = Engine(target, max_batch=3, max_seq_len=256).generate(prompts, PARAMS)
    proposer = make_proposer("eagle", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8)
    spec = Engine(target, max_batch=3, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert all(r.stats.draft_nodes > 0 for r in spec)


def test_an_engine_sized_by_sequence_length_fits_an_eagle_tree_exactly(tmp_path, hf_target, target):
    """The head's tree writes no more than the proposer's headroom: an engine of exactly sequence_length runs to the end."""
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    prompts = prompts_of([5, 11, 17], seed=4)
    base = Engine(target, max_batch=3, max_seq_len=256).generate(prompts, PARAMS)
    proposer = make_proposer("eagle", head=head, target=target, num_steps=5, topk=4, num_draft_tokens=16)
    exact = sequence_length(max(map(len, prompts)), PARAMS.max_tokens, proposer)
    spec = Engine(target, max_batch=3, max_seq_len=exact, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]


@pytest.mark.parametrize("batch", [1, 3])
def test_a_bf16_head_runs_its_layer_in_cpp_and_stays_lossless(tmp_path, hf_target, target, batch):
    """A head whose weights are bf16 numbers gets native linears and the C++ layer loop, whatever the target runs on."""
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config, seed=4, bf16_weights=True), target)
    assert head.native_layers is not None, "native kernels not built: run `make setup`"
    prompts = prompts_of([5 + (7 * i) % 11 for i in range(batch)], seed=5)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    proposer = make_proposer("eagle", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8)
    spec = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert all(r.stats.draft_nodes > 0 for r in spec)


def test_tree_parents_precede_children_and_respect_budget(tmp_path, hf_target, target):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    proposer = make_proposer("eagle", head=head, target=target, num_steps=4, topk=3, num_draft_tokens=10)
    engine = Engine(target, max_batch=2, max_seq_len=128, proposer=proposer)
    for p in prompts_of([6, 9], seed=1):
        engine.add_request(p, PARAMS)
    engine.step()  # prefill both
    from speculab.speculative.proposer import ProposeState

    drafts = proposer.propose(ProposeState(engine.running))
    for d in drafts:
        assert len(d) == 9
        assert bool((d.parents < torch.arange(len(d))).all())


def test_eagle3_layout_loads_and_maps_vocabulary(tmp_path, hf_target, target):
    from speculab.models.eagle3_head import load_eagle3_head

    head = load_eagle3_head(write_eagle3_head(tmp_path, hf_target.config), target)
    assert head.map_tokens(torch.tensor([0, 1, 5])).tolist() == [0, 2, 10]
    assert head.feature_layers(target) == (2, 1, 0)  # 3 layers: 2, 3 // 2, 3 - 3


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_eagle3_greedy_identical_to_baseline(tmp_path, batch):
    from speculab.models.eagle3_head import load_eagle3_head

    hf = tiny_hf_model("llama", seed=4, num_hidden_layers=6)
    target = speculab_from_hf(hf)
    head = load_eagle3_head(write_eagle3_head(tmp_path, hf.config), target)
    prompts = prompts_of([3 + (7 * i) % 11 for i in range(batch)], seed=batch)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    proposer = make_proposer("eagle3", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8)
    spec = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert all(r.stats.draft_nodes > 0 for r in spec)


@pytest.mark.parametrize("batch", [1, 3])
def test_eagle3_reduced_vocabulary_stays_lossless_and_drafts_only_kept_tokens(tmp_path, batch):
    from speculab.models.eagle3_head import load_eagle3_head

    hf = tiny_hf_model("llama", seed=4, num_hidden_layers=6)
    target = speculab_from_hf(hf)
    folder = write_eagle3_head(tmp_path, hf.config, draft_vocab_size=64)  # target ids 0, 2, ..., 126
    full = load_eagle3_head(folder, target, prepack=False)
    kept = torch.tensor([126, 4, 2, 200, 3, 60, 10, 90, 0])  # 200 and 3 are not the head's: 7 rows stay
    head = load_eagle3_head(folder, target, kept_token_ids=kept)
    assert sorted(head.map_tokens(torch.arange(len(head.d2t))).tolist()) == [0, 2, 4, 10, 60, 90, 126]
    hidden = torch.randn(2, 3, target.config.hidden_size)
    torch.testing.assert_close(head.logits(target, hidden), full.logits(target, hidden)[..., [0, 1, 2, 5, 30, 45, 63]])
    prompts = prompts_of([3 + (7 * i) % 11 for i in range(batch)], seed=batch)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    proposer = make_proposer("eagle3", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8)
    drafted: list[int] = []
    propose = proposer.propose
    proposer.propose = lambda state: [drafted.extend(d.tokens.tolist()) or d for d in propose(state)]
    spec = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert drafted and set(drafted) <= set(kept.tolist())
    with pytest.raises(ValueError, match="keeps none of the head's 64 tokens"):
        load_eagle3_head(folder, target, kept_token_ids=torch.tensor([1, 3, 5]))


@pytest.mark.parametrize("batch", [1, 3])
def test_static_tree_greedy_identical_and_shaped(tmp_path, hf_target, target, batch):
    from speculab.speculative.eagle import STATIC_TREES

    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    prompts = prompts_of([5 + 4 * i for i in range(batch)], seed=7)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    proposer = StaticTreeEagleProposer(head, target, tree="mc_sim_7b_63")
    engine = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer)
    spec = engine.generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    tree = STATIC_TREES["mc_sim_7b_63"]
    assert proposer.max_draft_tokens == len(tree) == 25
    assert all(r.stats.draft_nodes == 25 * r.stats.steps for r in spec)


def test_static_tree_follows_the_ranks(tmp_path, hf_target, target):
    """Node [a] is the head's rank-a token at the root; node [0, b] its rank-b token after node [0]."""
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    paths = [[0], [1], [0, 0], [0, 2]]
    static = StaticTreeEagleProposer(head, target, tree=paths)
    dynamic = make_proposer("eagle", head=head, target=target, num_steps=2, topk=3, num_draft_tokens=13)
    from speculab.speculative.proposer import ProposeState

    drafts = []
    for proposer in (static, dynamic):
        engine = Engine(target, max_batch=1, max_seq_len=128, proposer=proposer)
        engine.add_request(prompts_of([7], seed=2)[0], PARAMS)
        engine.step()
        drafts.append(proposer.propose(ProposeState(engine.running))[0])
    s, d = drafts
    assert s.parents.tolist() == [-1, -1, 0, 0]
    # The dynamic tree with topk=3 holds the root's top-3 and node [0]'s top-3 (its frontier keeps all 3 of depth 1).
    root_children = [t for t, p in zip(d.tokens.tolist(), d.parents.tolist()) if p == -1]
    assert s.tokens[0] == root_children[0] and s.tokens[1] == root_children[1]


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_a_shared_budget_narrows_the_tree_and_stays_lossless(tmp_path, hf_target, target, batch):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    tree = make_proposer("eagle", head=head, target=target, num_steps=4, topk=4, num_draft_tokens=12)
    shared = SpeculationPolicy.shared(12)
    shape = {b: tree.tree_shape(shared.draft_budget(Load(b))) for b in (1, 3, 8)}
    assert shape == {1: (4, 4, 11), 3: (4, 4, 4), 8: (1, 1, 1)} and tree.tree_shape(None) == (4, 4, 11)
    proposer = PolicyProposer(tree, shared)
    prompts = prompts_of([4 + (5 * i) % 13 for i in range(batch)], seed=batch)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    spec = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    most = shape[batch][2]
    assert all(r.stats.draft_nodes <= most * r.stats.steps for r in spec)


def test_a_long_prompt_joining_a_running_request_stays_in_cache_bounds(tmp_path, hf_target, target):
    """Regression: the newcomer's whole-prompt catch-up must not pad the running row past its cache room."""
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    first, second = prompts_of([100, 120], seed=5)
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    max_len = 120 + 16 + 12
    base = Engine(target, max_batch=2, max_seq_len=max_len).generate([first, second], params)
    proposer = make_proposer("eagle", head=head, target=target, num_steps=3, topk=2, num_draft_tokens=6)
    engine = Engine(target, max_batch=2, max_seq_len=max_len, proposer=proposer)
    a = engine.add_request(first, params)
    for _ in range(3):
        engine.step()
    b = engine.add_request(second, params)
    while engine.has_work:
        engine.step()
    assert [a.output_ids, b.output_ids] == [r.output_ids for r in base]


@pytest.mark.parametrize("batch", [1, 4])
def test_reduced_draft_vocabulary_stays_lossless_and_drafts_only_kept_tokens(tmp_path, hf_target, target, batch):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    kept = torch.randperm(target.config.vocab_size, generator=torch.Generator().manual_seed(0))[:40]
    proposer = make_proposer("eagle", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8, kept_token_ids=kept)
    prompts = prompts_of([5 + 3 * i for i in range(batch)], seed=7)
    base = Engine(target, max_batch=batch, max_seq_len=256).generate(prompts, PARAMS)
    drafted: list[int] = []
    propose = proposer.propose
    proposer.propose = lambda state: [drafted.extend(d.tokens.tolist()) or d for d in propose(state)]
    spec = Engine(target, max_batch=batch, max_seq_len=256, proposer=proposer).generate(prompts, PARAMS)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert drafted and set(drafted) <= set(kept.tolist())


def test_reduced_vocabulary_logits_are_the_kept_rows_of_the_full_ones(tmp_path, hf_target, target):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    kept = torch.tensor([7, 3, 200, 11])
    proposer = make_proposer("eagle", head=head, target=target, num_steps=2, topk=2, num_draft_tokens=4, kept_token_ids=kept)
    hidden = torch.randn(2, 3, target.config.hidden_size)
    full = head.logits(target, hidden)
    torch.testing.assert_close(proposer._logits(hidden), full[..., kept], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="fewer than topk"):
        make_proposer("eagle", head=head, target=target, num_steps=5, topk=5, num_draft_tokens=16, kept_token_ids=kept)


def test_an_engines_bytes_count_the_heads_cache_as_it_is_allocated(tmp_path, hf_target, target):
    from speculab.engine import engine_bytes
    from speculab.models.eagle3_head import load_eagle3_head

    heads = {
        "eagle": load_eagle_head(write_eagle_head(tmp_path / "e", hf_target.config), target),
        "eagle3": load_eagle3_head(write_eagle3_head(tmp_path / "e3", hf_target.config), target),
    }
    for name, head in heads.items():
        proposer = make_proposer(name, head=head, target=target, num_steps=3, topk=2, num_draft_tokens=6)
        engine = Engine(target, max_batch=2, max_seq_len=80, proposer=proposer)
        assert engine_bytes(target, 2, 80, proposer) == engine.cache.kv.nbytes + proposer.cache.kv.nbytes, name


def test_a_prompt_sharing_a_cached_head_prefills_only_the_rest_and_stays_identical(tmp_path, hf_target, target, monkeypatch):
    """Prompts that share 45 leading tokens (the same files before other requests, as agents send them): each after
    the first takes the cached head's KV and features and runs only its own tokens, in chunks whose boundaries
    differ from a whole prefill's; the outputs are those of no cache at all, with the EAGLE head reading the features."""
    from speculab.prompt_cache import PromptCache

    monkeypatch.setattr("speculab.chunked_prefill.PREFILL_CHUNK", 16)
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    shared = prompts_of([45], seed=7)[0]
    prompts = [shared + tail for tail in prompts_of([9, 23, 2], seed=8)]

    def outputs(cache, proposer=True):
        eagle = make_proposer("eagle", head=head, target=target, num_steps=3, topk=2, num_draft_tokens=4) if proposer else None
        return [r.output_ids for r in Engine(target, 3, 256, proposer=eagle, prompt_cache=cache).generate(prompts, PARAMS)]

    cache = PromptCache()
    assert outputs(cache) == outputs(None) == outputs(None, proposer=False)
    assert cache.prefix_hits == 2 and cache.misses == 3 and cache.reused_tokens >= 2 * 45
    assert outputs(cache) == outputs(None) and cache.hits == 3  # whole prompts now: each a hit
