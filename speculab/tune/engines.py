"""A tuned policy in vLLM's and SGLang's settings, and what each cannot express.

Knows (read in vLLM's ``vllm/config/speculative.py`` and ``v1/spec_decode/dynamic/utils.py`` as ``make vllm``
installs them, 0.32.0, and SGLang's ``server_args.py`` and ``speculative/adaptive_spec_params.py``):
- vLLM V1 takes ``num_speculative_tokens_per_batch_size`` in ``--speculative-config``: inclusive batch-size ranges
  ``[[start, end, K], ...]`` from 1, K >= 0 and at most ``num_speculative_tokens``, the last K carried past the last
  range ("dynamic speculative decoding", vllm#32374; present in 0.32.0, its first release unverified here). vLLM drafts
  chains: a cap of c tree nodes becomes a chain of c tokens.
- SGLang adapts only EAGLE/EAGLE3 chains (topk 1): ``--speculative-adaptive`` with ``--speculative-adaptive-config``,
  a JSON of ``{"smallest batch size": {"candidate_steps": [...]}}`` (sglang#21599, #24055); a draft model (STANDALONE)
  and NGRAM take one fixed ``--speculative-num-steps``.
- Neither caps one request by its own acceptance (speculab's ``min_acceptance``).
Does not know: which version the user runs (``speculab launch`` checks that).
"""

from __future__ import annotations

import json

from speculab.speculative.policy import SpeculationPolicy

PER_REQUEST = "a floor on each request's own acceptance"
VLLM_METHOD = {"ngram": "ngram", "suffix": "suffix", "draft": "draft_model", "eagle": "eagle", "eagle3": "eagle3"}
SGLANG_ALGORITHM = {"ngram": "NGRAM", "draft": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3"}


def vllm(spec_name: str, policy: SpeculationPolicy) -> dict:
    schedule = policy.ranges()
    most = max(n for _, _, n in schedule)
    if most == 0:
        return {"settings": "no --speculative-config (plain decoding at every batch size)", "cannot": ""}
    config = {"method": VLLM_METHOD[spec_name], "num_speculative_tokens": most}
    if len({n for _, _, n in schedule}) > 1:
        config["num_speculative_tokens_per_batch_size"] = schedule
    cannot = [PER_REQUEST] + (["a tree (vLLM drafts chains)"] if spec_name.startswith("eagle") else [])
    return {"settings": f"--speculative-config '{json.dumps(config)}' (the drafter's model too)", "cannot": "; ".join(cannot)}


def sglang(spec_name: str, policy: SpeculationPolicy) -> dict:
    schedule = policy.ranges()
    most = max(n for _, _, n in schedule)
    if most == 0:
        return {"settings": "no --speculative-algorithm (plain decoding at every batch size)", "cannot": ""}
    if spec_name not in SGLANG_ALGORITHM:
        return {"settings": "none", "cannot": f"{spec_name} at all (SGLang has no such algorithm)"}
    fixed = f"--speculative-algorithm {SGLANG_ALGORITHM[spec_name]} --speculative-num-steps {most} --speculative-eagle-topk 1 --speculative-num-draft-tokens {most + 1}"
    varies = len({n for _, _, n in schedule}) > 1
    if varies and spec_name.startswith("eagle"):
        adaptive = {str(b): {"candidate_steps": [n]} for b, _, n in schedule}
        return {
            "settings": f"{fixed} --speculative-adaptive --speculative-adaptive-config FILE with {json.dumps(adaptive)}",
            "cannot": PER_REQUEST,
        }
    cannot = [PER_REQUEST] + (
        [f"a cap that changes with the batch size for {SGLANG_ALGORITHM[spec_name]} (it drafts {most} at every size)"] if varies else []
    )
    return {"settings": fixed, "cannot": "; ".join(cannot)}


def engine_settings(spec, policy: SpeculationPolicy) -> dict:
    """Each engine's settings for the policy, each saying what it rests on: speculab's costs, not the engine's."""
    measure = f"`speculab tune --engine vllm --method {spec.text}` measures vLLM's own"
    return {
        "vllm": vllm(spec.name, policy) | {"basis": f"derived from speculab's costs on this machine, not measured on vLLM; {measure}"},
        "sglang": sglang(spec.name, policy) | {"basis": "derived from speculab's costs on this machine, not measured on SGLang"},
    }
