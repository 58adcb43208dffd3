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
