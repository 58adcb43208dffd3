"""Suffix decoding's tree and cache: hand-checked cases, and the same drafts as ArcticInference's own library."""

import json
import random
import subprocess
from pathlib import Path

import pytest

from speculab.launch.environments import vllm_env_dir, vllm_python
from speculab.native import kernels
from speculab.speculative.suffix import SuffixCache
from speculab.speculative.suffix_tree import NativeSuffixTree, SuffixTree, _f32
from tests.helpers import require_peer_env

OPS_SCRIPT = Path(__file__).with_name("arctic_suffix_ops.py")


def native_tree(depth: int) -> NativeSuffixTree:
    if kernels() is None:
        pytest.skip("no native build here (SPECULAB_NATIVE=0 or no AVX2): the Python tree is the one that runs")
    return NativeSuffixTree(depth, kernels())


TREES = {"python": SuffixTree, "native": native_tree}


def speculate(tree, context, most=8, factor=1.0, floor=0.1):
    return tree.speculate(context, max_spec_tokens=most, max_spec_factor=factor, max_spec_offset=0.0, min_token_prob=floor)


@pytest.fixture(params=["python", "native"])
def make_tree(request):
    return TREES[request.param]


def test_a_repeated_cycle_is_drafted_with_its_frequency(make_tree):
    """ArcticInference 0.3.0's own answer for this sequence (run in vLLM's environment when written): six tokens of
    the cycle and two more, each with probability 2/3 (the match's three occurrences, one at the very end)."""
    tree = make_tree(24)
    sequence = [1, 2, 3, 4, 5, 6, 7, 8] * 3 + [1, 2, 3] + [4, 5]
    tree.extend(0, sequence)
    draft = speculate(tree, sequence)
    assert draft.token_ids == [6, 7, 8, 1, 2, 3, 4, 5]
    assert draft.probs == [_f32(2 / 3)] * 8 and draft.match_len == 13
    assert draft.score == pytest.approx(5.333333, abs=1e-6)


def test_the_floor_and_the_factor_bound_a_draft(make_tree):
    tree = make_tree(8)
    tree.extend(0, [1, 2, 3, 1, 2, 4, 1, 2, 3, 9])  # after "1 2": 3 twice, 4 once
    assert speculate(tree, [7, 1, 2], floor=0.7).token_ids == []  # 2/3 < 0.7
    assert speculate(tree, [7, 1, 2], floor=0.5).token_ids[0] == 3
    assert len(speculate(tree, [7, 1, 2], factor=0.5, floor=0.0).token_ids) == 1  # 2 matched tokens x 0.5


def test_removing_a_sequence_forgets_it_and_keeps_the_rest():
    tree = SuffixTree(6)
    tree.extend(0, [5, 6, 7, 8])
    tree.extend(1, [1, 2, 3, 4])
    tree.remove(0)
    assert speculate(tree, [9, 5, 6]).token_ids == []
    assert speculate(tree, [9, 1, 2]).token_ids == [3, 4]
    tree.remove(1)
    assert tree._root.count == 0 and not tree._root.children


def test_the_cache_forgets_the_oldest_output_first():
    cache = SuffixCache(max_tree_depth=8, max_cached_requests=1)
    cache.start("a", [1])
    cache.add("a", [5, 6, 7, 8])
    cache.stop("a")
    cache.start("b", [2])
    assert cache.speculate("b", [5, 6], most=4, factor=2.0, floor=0.1).token_ids == []  # a's output evicted by b


def random_ops(seed: int, depth: int, vocab: int, adds: int = 6) -> list[list]:
    """Requests over a small vocabulary (ties are common), overlapping in time, speculated after every addition."""
    rng = random.Random(seed)
    motifs = [[rng.randrange(vocab) for _ in range(rng.randint(2, 6))] for _ in range(4)]
    sequence = lambda n: [t for _ in range(n) for t in (rng.choice(motifs) if rng.random() < 0.7 else [rng.randrange(vocab)])]  # noqa: E731
    ops, running, histories = [], [], {}
    for key in range(10):
        prompt = sequence(rng.randint(3, 12))
        ops.append(["start", key, prompt])
        running.append(key)
        histories[key] = list(prompt)
        for _ in range(rng.randint(2, adds)):
            who = rng.choice(running)
            tokens = sequence(rng.randint(1, 3))[: rng.randint(1, 5)]
            ops.append(["add", who, tokens])
            histories[who] += tokens
            most, factor, floor = rng.randint(1, 12), rng.choice([0.5, 1.0, 2.5]), rng.choice([0.0, 0.1, 0.3, 0.5])
            ops.append(["speculate", who, histories[who][-depth:], most, factor, floor])
        if len(running) > 2:
            ops.append(["stop", running.pop(rng.randrange(len(running))), None][:2])
    return ops


def ours(depth: int, cached: int, ops: list[list], tree=SuffixTree) -> list[dict]:
    cache, drafts = SuffixCache(depth, cached, tree), []
    for op, key, *args in ops:
        if op == "start":
            cache.start(key, args[0])
        elif op == "add":
            cache.add(key, args[0])
        elif op == "speculate":
            context, most, factor, floor = args
            d = cache.speculate(key, context, most=most, factor=factor, floor=floor)
            drafts.append({"token_ids": d.token_ids, "probs": d.probs, "score": d.score, "match_len": d.match_len})
        else:
            cache.stop(key)
    return drafts


@pytest.mark.parametrize("depth,cached,vocab,adds", [(24, 10000, 5, 6), (8, 3, 4, 6), (6, 2, 2, 30), (4, 3, 2, 30)])
def test_the_native_tree_drafts_as_the_python_one(depth, cached, vocab, adds):
    ops = [op for seed in range(6) for op in _keyed(random_ops(seed, depth, vocab, adds), seed)]
    assert ours(depth, cached, ops, native_tree) == ours(depth, cached, ops, SuffixTree)


@pytest.mark.slow
@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize(
    "depth,cached,vocab,adds", [(24, 10000, 5, 6), (8, 3, 4, 6), (4, 2, 6, 6), (24, 0, 3, 6), (6, 2, 2, 30), (4, 3, 2, 30)]
)
def test_drafts_equal_arctic_inference_s(depth, cached, vocab, adds, tree):
    """The library vLLM's method "suffix" calls, installed in vLLM's environment by `make vllm`: the same calls give
    the same drafts, ties, probabilities (float32), scores and evictions included."""
    require_peer_env(vllm_env_dir(), "vllm")
    ops = [op for seed in range(6) for op in _keyed(random_ops(seed, depth, vocab, adds), seed)]
    spec = json.dumps({"max_tree_depth": depth, "max_cached_requests": cached, "ops": ops})
    done = subprocess.run([str(vllm_python(create=False)), str(OPS_SCRIPT)], input=spec, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    mine = ours(depth, cached, ops, TREES[tree])
    assert len(mine) == len(theirs) > 100
    assert sum(bool(d["token_ids"]) for d in theirs) > len(theirs) // 3  # most calls draft something
    for i, (a, b) in enumerate(zip(mine, theirs)):
        assert a == b, (i, a, b)


def _keyed(ops: list[list], seed: int) -> list[list]:
    return [[op[0], seed * 100 + op[1], *op[2:]] for op in ops]
