"""The bench's untimed acceptance pass: 16 at a time, it counts what batch 1 counts, the batch budget left out."""

import pytest

from speculab.bench.acceptance_pass import measure_acceptance, pass_items
from speculab.bench.in_process import Target, run_once
from speculab.bench.workload import WorkloadItem
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.runtime import load
from speculab.sampling import SamplingParams
from tests.helpers import save_tiny_checkpoint, tiny_hf_model, write_eagle_head


def test_pass_items_take_twelve_of_each_domain_in_turn():
    items = [WorkloadItem(f"{d}-{i}", d, "t", (("user", "x"),)) for d in ("a", "b") for i in range(20)] + [
        WorkloadItem("c-0", "c", "t", (("user", "x"),))
    ]
    picked = pass_items(items)
    assert [i.domain for i in picked[:3]] == ["a", "b", "c"] and len(picked) == 25
    assert {d: sum(i.domain == d for i in picked) for d in "abc"} == {"a": 12, "b": 12, "c": 1}


@pytest.mark.long
def test_an_eagle_tree_under_its_policy_counts_as_at_batch_one(tmp_path):
    """EAGLE's default policy (shared:4, 4 nodes a step over the batch) cuts the tree from batch 2 on; the pass leaves
    it out, and 16 at a time its fp32 drafts and acceptance are batch 1's exactly."""
    target = save_tiny_checkpoint(tmp_path / "target", seed=1)
    head = write_eagle_head(tmp_path / "head", tiny_hf_model(seed=1).config, seed=2)
    loaded = load(target, "float32")
    words = [" ".join(f"w{3 + (i * 7 + j * 3) % 200}" for j in range(10 + i)) for i in range(18)]
    items = [WorkloadItem(f"p{i}", ("python", "sql")[i % 2], "t", (("user", w),)) for i, w in enumerate(words)]
    prompts = [loaded.tokenizer.encode_chat(i.message_dicts()) for i in items]
    spec = parse_method(f"eagle:eagle={head},draft_vocab=none")
    options = proposer_options(spec, loaded)
    record = measure_acceptance(Target(loaded, prompts, items, None), spec, options, 12, None)
    alone = {k: v for k, v in options.items() if k != "policy"}  # batch 1: shared:4 leaves the whole 3-node tree
    one, _ = run_once(Target(loaded, prompts, items, None), new_proposer(spec, alone), 1, [SamplingParams(max_tokens=12)] * 18, None)
    assert record["all"]["accepted_tokens"] == sum(r.stats.accepted_tokens for r in one)
    assert record["all"]["drafted_depth"] == sum(r.stats.drafted_depth for r in one) > 0
    assert {d: f["prompts"] for d, f in record["by_domain"].items()} == {"python": 9, "sql": 9}
    assert "policy" not in record["drafted_as"]
