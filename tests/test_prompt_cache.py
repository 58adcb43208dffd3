"""The prompt cache's lookup of the longest shared head."""

import torch

from speculab.prompt_cache import CachedPrompt, PromptCache


def test_the_longest_head_is_the_cached_prompt_sharing_most_leading_tokens_less_the_last():
    cache = PromptCache()
    empty = torch.empty(0)
    for ids in ([1, 2, 3, 9], [1, 2, 3, 4, 5, 7], [8, 2, 3]):
        cache.entries[cache.key(ids, (3,))] = CachedPrompt(empty, empty, empty)
    first, second = cache.entries[cache.key([1, 2, 3, 9], (3,))], cache.entries[cache.key([1, 2, 3, 4, 5, 7], (3,))]
    assert cache.longest_head(cache.key([1, 2, 3, 4, 5, 6], (3,))) == (second, 5)
    assert cache.longest_head(cache.key([1, 2, 3, 9, 1], (3,))) == (first, 4)
    assert cache.longest_head(cache.key([1, 2, 3, 4, 5], (3,))) == (second, 4)  # all but the last: its logits are needed
    assert cache.longest_head(cache.key([5, 6], (3,))) == (None, 0)
    assert cache.longest_head(cache.key([1, 2, 3, 4, 5, 6], ())) == (None, 0)  # other feature layers: another cache


def _entry(n_bytes: int) -> CachedPrompt:
    return CachedPrompt(torch.zeros(n_bytes // 4), torch.empty(0), torch.empty(0))


def test_past_its_cap_the_least_recently_used_prompts_leave():
    cache = PromptCache(max_bytes=3000)
    a, b, c = (cache.key(ids, ()) for ids in ([1, 2], [3, 4], [5, 6]))
    cache.put(a, _entry(1000))
    cache.put(b, _entry(1000))
    cache.put(c, _entry(1000))
    assert cache.get(a) is not None  # a is now the most recently used
    cache.longest_head(cache.key([3, 4, 9], ()))  # and b, taken as a head, after it
    cache.put(cache.key([7], ()), _entry(1000))
    assert list(cache.entries) == [a, b, cache.key([7], ())] and cache.evicted == 1 and cache.nbytes == 3000
    cache.entries[b].drafter_states["draft"] = torch.zeros(125)  # an entry grows by its drafter's state (500 bytes)
    cache.evict()
    assert list(cache.entries) == [b, cache.key([7], ())] and cache.nbytes <= 3000


def test_an_entry_larger_than_the_cap_is_not_kept_and_none_leave_without_a_cap():
    capped, unbounded = PromptCache(max_bytes=100), PromptCache()
    kept = capped.put(capped.key([1], ()), _entry(400))
    assert kept.kv.numel() == 100 and not capped.entries and capped.evicted == 1  # handed back, not cached
    for i in range(50):
        unbounded.put(unbounded.key([i], ()), _entry(4000))
    assert len(unbounded.entries) == 50 and unbounded.evicted == 0


def test_the_servers_gauge_and_counter_follow_the_caches_bytes_and_evictions():
    from prometheus_client import generate_latest

    from speculab.serve.metrics import ServerMetrics

    metrics, cache = ServerMetrics("tiny"), PromptCache(max_bytes=2000)
    for ids in ([1], [2], [3]):
        cache.put(cache.key(ids, ()), _entry(1000))
        metrics.prompt_cache(cache)
    text = generate_latest(metrics.registry).decode()
    assert 'speculab:prefix_cache_bytes{engine="0",model_name="tiny"} 2000.0' in text
    assert 'speculab:prefix_cache_evicted_prompts_total{engine="0",model_name="tiny"} 1.0' in text


def test_under_a_cap_a_prompt_replaces_the_prompts_it_extends_and_still_serves_them():
    capped, unbounded = PromptCache(max_bytes=10_000), PromptCache()
    for cache in (capped, unbounded):
        for ids in ([1, 2, 3], [1, 2, 9], [1, 2, 3, 4, 5], [7, 8]):  # an agent's turn, a sibling, the next turn, another
            cache.put(cache.key(ids, ()), _entry(1000))
        cache.put(cache.key([1, 2, 3, 4, 5, 6], (0,)), _entry(1000))  # other feature layers: another cache's prompt
    kept = [ids for ids, _ in capped.entries]
    assert kept == [(1, 2, 9), (1, 2, 3, 4, 5), (7, 8), (1, 2, 3, 4, 5, 6)] and capped.superseded == 1
    assert len(unbounded.entries) == 5 and unbounded.superseded == 0
    assert capped.longest_head(capped.key([1, 2, 3], ()))[1] == 2  # the first turn sent again: all but its last token
