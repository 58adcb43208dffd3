"""Run in vLLM's environment: apply a list of suffix-cache calls to ArcticInference's SuffixDecodingCache.

Reads {"max_tree_depth", "max_cached_requests", "ops": [[op, key, ...], ...]} as JSON on stdin; writes one JSON list
with each "speculate" call's draft (token_ids, probs, score, match_len). Ops: start KEY PROMPT, add KEY TOKENS,
speculate KEY CONTEXT MOST FACTOR FLOOR, stop KEY. Kept to the calls vLLM's SuffixDecodingProposer makes.
"""

import json
import sys

from arctic_inference.suffix_decoding import SuffixDecodingCache

spec = json.load(sys.stdin)
cache = SuffixDecodingCache(max_tree_depth=spec["max_tree_depth"], max_cached_requests=spec["max_cached_requests"])
drafts = []
for op, key, *args in spec["ops"]:
    if op == "start":
        cache.start_request(key, args[0])
    elif op == "add":
        cache.add_active_response(key, args[0])
    elif op == "speculate":
        context, most, factor, floor = args
        d = cache.speculate(key, context, max_spec_tokens=most, max_spec_factor=factor, min_token_prob=floor)
        drafts.append({"token_ids": list(d.token_ids), "probs": list(d.probs), "score": d.score, "match_len": d.match_len})
    elif op == "stop":
        cache.stop_request(key)
print(json.dumps(drafts))
