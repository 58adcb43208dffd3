"""Rounds that do not fit in memory adapt instead of being killed: every engine in turns, else in groups beside the
baseline, else each alone, else the prompt cache released, else a cell skipped and reported with its bytes."""

import pytest

from speculab import free_memory
from speculab.bench.memory_fit import fit_rounds
from speculab.bench.report import load_results
from speculab.bench.report.speedups import speedup
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cli import main
from speculab.engine import engine_bytes, sequence_length
from speculab.free_memory import usable_bytes
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.runtime import load
from tests.bench.test_runner import setup  # noqa: F401  the tiny target, draft and workload

GIB = 1 << 30


def test_the_first_way_that_fits():
    both = {"baseline": 2 * GIB, "draft": 3 * GIB}
    assert fit_rounds(both, 10 * GIB, 0).in_turns  # 5 of 9 usable
    alone = fit_rounds(both, 4 * GIB, 0)  # 3.6 usable: each fits, not both
    assert not alone.in_turns and not alone.release_cache and not alone.skipped
    released = fit_rounds(both, 3 * GIB, 1 * GIB)  # the draft model's engine fits once the cache's gigabyte is back
    assert released.release_cache and not released.skipped and released.available_bytes == 4 * GIB
    skipped = fit_rounds(both, 3 * GIB, 0)
    assert list(skipped.skipped) == ["draft"] and "needs 3.00 GiB and 3.00 GiB is free" in skipped.skipped["draft"]
    assert skipped.cell_fields("baseline")["memory"]["rounds"].startswith("alone")


def needed_bytes(setup_, specs: list[str], batch: int, max_tokens: int, num_prompts: int) -> dict[str, int]:
    """What each method's engine needs at ``batch``, counted as the bench counts it (over the prompts it runs)."""
    root, target, draft, workload = setup_
    loaded = load(str(target), "float32")
    items = interleave_domains(load_workload(str(workload)), num_prompts)
    longest = max(len(loaded.tokenizer.encode_chat(item.message_dicts())) for item in items)
    out = {}
    for text in specs:
        spec = parse_method(text)
        proposer = new_proposer(spec, proposer_options(spec, loaded))
        out[spec.label] = engine_bytes(loaded.model, batch, sequence_length(longest, max_tokens, proposer), proposer)
    return out


def test_a_run_whose_rounds_outgrow_memory_runs_them_alone_and_reports_a_skipped_cell(setup, tmp_path, monkeypatch):  # noqa: F811
    root, target, draft, workload = setup
    specs = ["baseline", f"draft:draft={draft}"]
    at2, at4 = needed_bytes(setup, specs, 2, 8, 4), needed_bytes(setup, specs, 4, 8, 4)
    # free: both engines of batch 2 but one at a time; batch 4's baseline but not its draft model
    free = max(max(at2.values()), at4["baseline"]) + 1
    assert sum(at2.values()) > free and at4[f"draft(num_speculative_tokens=3,draft_vocab=auto)@{draft.name}"] > free
    monkeypatch.setattr(free_memory, "available_bytes", lambda device="cpu": int(free / 0.9) + 1)
    assert usable_bytes(int(free / 0.9) + 1) >= free
    argv = ["bench", "--model", str(target), "--dtype", "float32", "--workload", str(workload), "--methods", *specs]
    argv += ["--batch-sizes", "2", "4", "--num-prompts", "4", "--max-tokens", "8", "--no-prompt-cache", "--out", str(tmp_path / "run")]
    assert main([*argv, "--no-progress"]) == 0
    results = load_results(tmp_path / "run" / "results.jsonl")
    assert {(label, b) for label, b in results.cells} == {("baseline", 2), (specs_label := list(at2)[1], 2), ("baseline", 4)}
    assert all(c["memory"]["rounds"].startswith("alone") and c["turn_s"] is None for c in results.cells.values())
    (skipped,) = results.not_run
    assert (skipped["label"], skipped["batch_size"]) == (specs_label, 4) and skipped["engine_bytes"] == at4[specs_label]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Memory: cells not run, rounds run alone" in report and "its engine needs" in report


def test_groups_beside_the_baseline_where_not_all_fit_together():
    engines = {"baseline": 2 * GIB, "draft": 3 * GIB, "eagle": 2 * GIB, "ngram": 2 * GIB, "suffix": 1 * GIB}
    fit = fit_rounds(engines, 9 * GIB, 0, "baseline")  # 8.1 usable: all ten do not fit; 6.1 beside the baseline
    # first fit in the specs' order: ngram does not fit beside draft and eagle, suffix does
    assert fit.groups == (("baseline", "draft", "eagle", "suffix"), ("baseline", "ngram"))
    assert not fit.in_turns and not fit.release_cache and not fit.skipped
    assert all(sum(engines[label] for label in g) <= usable_bytes(9 * GIB) for g in fit.groups)
    memory = fit.cell_fields("ngram")["memory"]
    assert memory["rounds"] == "in groups with the baseline (memory): baseline+draft+eagle+suffix, baseline+ngram"
    assert memory["groups"] == [["baseline", "draft", "eagle", "suffix"], ["baseline", "ngram"]]
    assert fit_rounds(engines, 20 * GIB, 0, "baseline").in_turns  # all fit: no groups
    assert fit_rounds(engines, 9 * GIB, 0).groups == ()  # no baseline among them: each alone, as before
    too_big = fit_rounds(engines | {"draft": 7 * GIB}, 9 * GIB, 0, "baseline")  # fits alone (7 of 8.1), not beside the baseline
    assert (too_big.groups, too_big.in_turns, too_big.skipped) == ((), False, {})
    assert too_big.cell_fields("draft")["memory"]["rounds"] == "alone, one after another (memory)"


def test_a_run_whose_engines_fit_only_beside_the_baseline_runs_its_rounds_in_groups(setup, tmp_path, monkeypatch):  # noqa: F811
    root, target, draft, workload = setup
    specs = ["baseline", "ngram:num_speculative_tokens=3,prompt_lookup_min=1,prompt_lookup_max=3", f"draft:draft={draft}"]
    at2 = needed_bytes(setup, specs, 2, 8, 4)
    base, ngram, drafted = list(at2)
    # free: the baseline beside either method, not all three
    free = at2[base] + max(at2[ngram], at2[drafted]) + 1
    available = int(free / 0.9) + 1
    assert free <= usable_bytes(available) < sum(at2.values())
    monkeypatch.setattr(free_memory, "available_bytes", lambda device="cpu": available)
    argv = ["bench", "--model", str(target), "--dtype", "float32", "--workload", str(workload), "--methods", *specs]
    argv += ["--batch-sizes", "2", "--num-prompts", "4", "--max-tokens", "8", "--no-prompt-cache", "--out", str(tmp_path / "run")]
    assert main([*argv, "--no-progress"]) == 0
    results = load_results(tmp_path / "run" / "results.jsonl")
    cells = {label: results.cells[(label, 2)] for label in at2}
    for c in cells.values():
        assert c["memory"]["rounds"] == f"in groups with the baseline (memory): {base}+{ngram}, {base}+{drafted}"
        assert c["turn_s"] == 0.25 and c["repeats"] == 3 and len(c["tok_s_by_round"]) == 3
        assert c["greedy_identical"] is True  # lossless, fp32; the baseline cell's outputs stay the reference
    rounds = cells[base]["tok_s_by_round"]
    assert "baseline_tok_s_by_round" not in cells[base]
    # the first group's baseline run is the baseline cell's own; round 1 ran alone, every method beside the same run
    assert cells[ngram]["baseline_tok_s_by_round"] == rounds
    paired = cells[drafted]["baseline_tok_s_by_round"]
    assert len(paired) == 3 and paired[0] == rounds[0] and paired[1:] != rounds[1:]  # its own group's baseline runs
    for label in (ngram, drafted):
        ratios = sorted(m / b for m, b in zip(cells[label]["tok_s_by_round"], cells[label]["baseline_tok_s_by_round"]))
        found = results.measured_speedup(label, 2)
        assert found.value == pytest.approx(ratios[1]) and found.in_groups and found.rounds == 3
    assert speedup(cells[drafted] | {"baseline_tok_s_by_round": None}, cells[base]).value == pytest.approx(
        sorted(m / b for m, b in zip(cells[drafted]["tok_s_by_round"], rounds))[1]
    )
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Memory: cells not run, rounds run alone or in groups" in report and "the later rounds ran in groups" in report
