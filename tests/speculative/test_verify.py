"""The verifier: greedy paths, and lossless sampling checked statistically (as vLLM's rejection-sampler tests do)."""

import pytest
import torch

from speculab.speculative.tree import Draft, VerifyTree
from speculab.speculative.verify import verify_by_rejection, verify_coupled, verify_greedy

V = 6


def one_hot_logits(tokens):
    logits = torch.full((len(tokens), V), -5.0)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return logits


def test_greedy_takes_the_longest_matching_path():
    # root -> a(1) -> b(3); root -> c(1) -> d(4) -> e(2). Both a and c match the root's argmax (1).
    tree = VerifyTree.from_draft(0, Draft(torch.tensor([1, 3, 1, 4, 2]), torch.tensor([-1, 0, -1, 2, 3])))
    # argmax after each node: root->1, a->3, b->0, c->4, d->2, e->5
    verdict = verify_greedy(tree, one_hot_logits([1, 3, 0, 4, 2, 5]))
    assert verdict.accepted == [0, 3, 4, 5] and verdict.next_token == 5 and verdict.num_accepted == 3
    assert not verdict.recovered  # e is a leaf: every draft on the path accepted, 5 is the bonus token


def test_greedy_rejects_at_first_mismatch():
    tree = VerifyTree.from_draft(0, Draft.chain([2, 3, 4]))
    verdict = verify_greedy(tree, one_hot_logits([2, 5, 4, 1]))
    assert verdict.accepted == [0, 1] and verdict.next_token == 5
    assert verdict.recovered  # the draft 3 after node 1 was rejected: 5 is the recovered token


def test_draft_rejects_children_before_parents():
    with pytest.raises(ValueError, match="parent"):
        Draft(torch.tensor([1, 2]), torch.tensor([1, -1]))


def random_dist(gen, n):
    x = torch.rand(n, V, generator=gen) ** 3 + 1e-3  # peaked, but every token possible
    return x / x.sum(-1, keepdim=True)


def first_two_tokens(make_tree, p, trials, seed):
    """Emitted tokens over many trials; stochastic drafts are redrawn from q on every trial."""
    gen = torch.Generator().manual_seed(seed)
    firsts, seconds = [], []
    for _ in range(trials):
        tree = make_tree(gen)
        verdict = verify_by_rejection(tree, p, gen)
        emitted = tree.tokens[verdict.accepted[1:]].tolist() + [verdict.next_token]
        firsts.append(emitted[0])
        seconds.append((verdict.accepted[1] if len(verdict.accepted) > 1 else None, emitted[1] if len(emitted) > 1 else None))
    return firsts, seconds


def tv(samples, target):
    freq = torch.bincount(torch.tensor(samples), minlength=V).float() / len(samples)
    return 0.5 * float((freq - target).abs().sum())


@pytest.mark.parametrize("shape", ["chain_with_q", "tree_deterministic", "tree_with_q"])
def test_sampled_output_follows_the_target(shape):
    gen = torch.Generator().manual_seed(1)
    if shape == "chain_with_q":  # a draft model's chain: token i drawn from q[i]
        q = random_dist(gen, 3)

        def make_tree(g):
            tokens = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(3)]
            return VerifyTree.from_draft(0, Draft.chain(tokens, q))
    elif shape == "tree_deterministic":  # EAGLE style: three root children (top-k), a grandchild
        fixed = VerifyTree.from_draft(0, Draft(torch.tensor([1, 4, 2, 0]), torch.tensor([-1, -1, -1, 0])))

        def make_tree(g):
            return fixed
    else:  # two siblings drawn i.i.d. from one q, and a grandchild drawn from another
        q = random_dist(gen, 2)

        def make_tree(g):
            a, b = (int(torch.multinomial(q[0], 1, generator=g)) for _ in range(2))
            c = int(torch.multinomial(q[1], 1, generator=g))
            return VerifyTree.from_draft(0, Draft(torch.tensor([a, b, c]), torch.tensor([-1, -1, 0]), torch.stack([q[0], q[0], q[1]])))

    p = random_dist(gen, len(make_tree(gen)))
    errors = []
    for trials in (300, 3000, 30000):
        firsts, _ = first_two_tokens(make_tree, p, trials, seed=trials)
        errors.append(tv(firsts, p[0]))
    assert errors[-1] < 0.015, errors  # at N=30000 the sampling error of a 6-way histogram is ~0.005
    assert errors[-1] < errors[0], errors  # converges as N grows


def test_second_token_follows_the_target_after_an_accepted_child():
    gen = torch.Generator().manual_seed(2)
    draft = Draft(torch.tensor([1, 4, 2]), torch.tensor([-1, -1, 0]))  # children 1 and 4 of the root; 2 under 1
    tree = VerifyTree.from_draft(0, draft)
    p = random_dist(gen, len(tree))
    p[0] = torch.tensor([0.05, 0.5, 0.05, 0.05, 0.3, 0.05])  # both children are likely
    _, seconds = first_two_tokens(lambda g: tree, p, 30000, seed=3)
    for node in (1, 2):  # node 1 = token 1 (has a child), node 2 = token 4 (a leaf)
        after = [tok for accepted, tok in seconds if accepted == node]
        assert len(after) > 5000
        assert tv(after, p[node]) < 0.03


def test_sampled_verdict_tells_the_recovered_token_from_the_bonus():
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # after the root: token 1 surely; after node 1: token 2
    gen = torch.Generator().manual_seed(0)
    rejected = verify_by_rejection(VerifyTree.from_draft(0, Draft.chain([0])), probs, gen)  # p(0) = 0: always rejected
    assert rejected.accepted == [0] and rejected.next_token == 1 and rejected.recovered
    accepted = verify_by_rejection(VerifyTree.from_draft(0, Draft.chain([1])), probs, gen)  # p(1) = 1: always accepted
    assert accepted.accepted == [0, 1] and accepted.next_token == 2 and not accepted.recovered
    plain = verify_by_rejection(VerifyTree.from_draft(0, Draft.empty()), probs[:1], gen)  # no draft: plain decoding
    assert plain.accepted == [0] and plain.next_token == 1 and not plain.recovered


def test_coupled_follows_the_race_at_each_nodes_position():
    """Root children 1 and 4 (2 under 1): the race picks 4 at the root, so the path is [0, 2] and the next token is
    the race's at node 2, whichever token the draft has there."""
    draft = Draft(torch.tensor([1, 4, 2]), torch.tensor([-1, -1, 0]))
    tree = VerifyTree.from_draft(0, draft)
    probs = torch.full((4, 5), 0.2)
    noise = torch.ones(4, 5)
    noise[0, 4] = 0.1  # at the root's position token 4 wins (0.2 / 0.1)
    noise[2, 3] = 0.5  # after node 2 (token 4), at the next position: token 3
    noise[[1, 3], 3] = 0.5  # rows at that position share its noise
    verdict = verify_coupled(tree, probs, noise)
    assert verdict.accepted == [0, 2] and verdict.next_token == 3 and not verdict.recovered
    noise[0, 4], noise[0, 1] = 1.0, 0.1  # now token 1 wins at the root, then the race after node 1 (token 3, not 2)
    verdict = verify_coupled(tree, probs, noise)
    assert verdict.accepted == [0, 1] and verdict.next_token == 3 and verdict.recovered
