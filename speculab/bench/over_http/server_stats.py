"""Speculation figures as OpenAI-compatible servers report them: ``/metrics`` counters and per-response stats.

Knows: the counter names of vLLM V1 (``vllm:spec_decode_num_drafts``, ``…_num_draft_tokens``,
``…_num_accepted_tokens``, ``…_num_accepted_tokens_per_pos{position}``), of vLLM V0 (the same
``vllm:spec_decode_*`` prefix without the drafts counter; its ``…_num_emitted_tokens``), and
speculab's own (``speculab:spec_decode_num_draft_nodes``); Prometheus text is parsed by
``prometheus_client``'s parser, and a cell's figures are the difference of two scrapes.
SGLang's counters (``sglang:spec_verify_calls_total``, ``sglang:generation_tokens_total``) give τ
only, approximately (a request's first token, made by its prefill, is counted as generated too);
its ``spec_accept_length`` and ``spec_accept_rate`` are gauges of the latest batch, useless for a
cell's total. Per response: speculab's (and vLLM's per-request) ``metrics.speculative_decoding``;
SGLang's ``sglext.spec_tokens_details`` on OpenAI responses (0.5.2x, when the request sets
``return_spec_tokens_details``) and ``meta_info`` on ``/generate`` (``spec_verify_ct``, and in
newer versions ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts``), with
``completion_tokens`` where only the verify count is given. Formats: tests/launch/fixtures.

Figures, in speculab's terms (``speculab.speculative.stats``): τ = tokens emitted per verify
step, bonus token included; acceptance rate = accepted draft tokens / draft tokens (for a tree,
draft tokens along the verified depth).

Does not know: HTTP (the caller fetches the text) or how the server decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PREFIXES = ("vllm:spec_decode_", "speculab:spec_decode_")
SGLANG = {"sglang:spec_verify_calls_total": "sglang_verify_calls", "sglang:generation_tokens_total": "sglang_generation_tokens"}
COUNTERS = {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_emitted_tokens", "num_draft_nodes"}


@dataclass
class SpecCounters:
    """Speculative-decoding counters summed over every label set but ``position``."""

    values: dict[str, float] = field(default_factory=dict)  # num_drafts, num_draft_tokens, ... -> total
    per_position: dict[int, float] = field(default_factory=dict)  # position -> accepted tokens

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        return SpecCounters(
            {k: v - before.values.get(k, 0.0) for k, v in self.values.items()},
            {p: v - before.per_position.get(p, 0.0) for p, v in self.per_position.items()},
        )

    @property
    def present(self) -> bool:
        return "num_accepted_tokens" in self.values and "num_draft_tokens" in self.values

    @property
    def sglang_steps(self) -> float:
        return self.values.get("sglang_verify_calls", 0.0)

    def figures(self) -> dict:
        """tau, acceptance_rate and accepted_per_position from counter deltas; None where the server gives no counter."""
        if not self.present and self.sglang_steps > 0:
            steps, emitted = self.sglang_steps, self.values.get("sglang_generation_tokens", 0.0)
            return {
                "tau": emitted / steps,
                "acceptance_rate": None,
                "accepted_per_position": [],
                "draft_tokens": None,
                "accepted_tokens": int(emitted - steps),
                "steps": int(steps),
            }
        if not self.present:
            return {"tau": None, "acceptance_rate": None, "accepted_per_position": [], "draft_tokens": None, "accepted_tokens": None}
        accepted, drafted = self.values["num_accepted_tokens"], self.values["num_draft_tokens"]
        drafts = self.values.get("num_drafts")
        positions = [int(self.per_position.get(p, 0)) for p in range(max(self.per_position, default=-1) + 1)]
        # vLLM drafts fixed-length chains: depth d is tested exactly on the steps that accepted depth d-1
        reached = [int(drafts), *positions[:-1]] if drafts and positions else []
        return {
            "tau": 1 + accepted / drafts if drafts else None,
            "acceptance_rate": accepted / drafted if drafted else None,
            "accepted_per_position": positions,
            "reached_per_position": reached,
            "conditional_acceptance": [a / r if r else 0.0 for a, r in zip(positions, reached)],
            "draft_tokens": int(drafted),
            "accepted_tokens": int(accepted),
            "steps": int(drafts) if drafts is not None else None,
        }


def parse_spec_counters(text: str) -> SpecCounters:
    counters = SpecCounters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name in SGLANG:
                counters.values[SGLANG[name]] = counters.values.get(SGLANG[name], 0.0) + sample.value
                continue
            prefix = next((p for p in PREFIXES if name.startswith(p)), None)
            if prefix is None or not name.endswith("_total"):
                continue
            key = name[len(prefix) : -len("_total")]
            if key == "num_accepted_tokens_per_pos":
                position = int(sample.labels.get("position", 0))
                counters.per_position[position] = counters.per_position.get(position, 0.0) + sample.value
            elif key in COUNTERS:
                counters.values[key] = counters.values.get(key, 0.0) + sample.value
    return counters


@dataclass(frozen=True)
class ResponseSpec:
    """One response's speculation: verify steps, draft tokens and accepted draft tokens (None when unknown)."""

    steps: int
    accepted: int
    drafted: int | None = None


def response_spec(body: dict, completion_tokens: int | None = None) -> ResponseSpec | None:
    """The per-response stats in a response or its last stream chunk, from speculab/vLLM or SGLang; None if absent."""
    spec = (body.get("metrics") or {}).get("speculative_decoding")
    if spec:
        return ResponseSpec(
            int(spec.get("num_verify_steps") or spec.get("num_drafts") or 0),
            int(spec["num_accepted_draft_tokens"]),
            spec.get("num_draft_tokens"),
        )
    meta = (body.get("sglext") or {}).get("spec_tokens_details") or body.get("meta_info") or {}
    if meta.get("spec_verify_ct"):
        steps = int(meta["spec_verify_ct"])
        if meta.get("spec_num_proposed_drafts") is not None:
            return ResponseSpec(steps, int(meta["spec_num_correct_drafts"]), int(meta["spec_num_proposed_drafts"]))
        emitted = int(meta.get("completion_tokens") or completion_tokens or 0)
        return ResponseSpec(steps, max(emitted - steps, 0))
    return None


def reported_kv_tokens(text: str) -> int | None:
    """The KV cache's capacity in tokens as vLLM reports it in ``vllm:cache_config_info`` (blocks × block size, on
    each rank); None when the server reports none."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:cache_config_info"):
                labels = sample.labels
                if labels.get("num_gpu_blocks", "None") != "None" and labels.get("block_size", "None") != "None":
                    return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    return None
