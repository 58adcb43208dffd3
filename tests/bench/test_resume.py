"""Resuming a run: its recorded settings rebuilt, and a run an earlier speculab wrote with parameters since renamed
refused, naming them, instead of running something else under their labels."""

import json
from pathlib import Path

import pytest

from speculab.bench.resume import recorded_config

EARLIER = Path(__file__).resolve().parents[2] / "benchmarks/results/bench-matrix/epyc-zen5-2026-12-05/results.jsonl"


def test_a_run_of_an_earlier_version_with_renamed_parameters_is_refused(tmp_path):
    run = json.loads(EARLIER.read_text().splitlines()[0])  # its run record: eagle(batch_budget=4), ngram(disable_by_...)
    (tmp_path / "results.jsonl").write_text(json.dumps(run) + "\n")
    with pytest.raises(ValueError, match=r"disable_by_batch_size is now policy=plain_above:N\); start a new --out"):
        recorded_config(tmp_path)


def test_todays_record_resumes_with_its_methods_and_time_limit(tmp_path):
    run = json.loads(EARLIER.read_text().splitlines()[0])
    config = run["config"]
    for params in config["method_params"].values():
        params.pop("disable_by_batch_size", None)
        if params.pop("batch_budget", None) is not None and params.get("policy") is None:
            params["policy"] = "shared:4"
    config["time_budget_s"] = config.pop("time_budget_s", 360.0)  # the field's earlier name still reads
    (tmp_path / "results.jsonl").write_text(json.dumps(run) + "\n")
    resumed = recorded_config(tmp_path)
    assert resumed.time_limit_s == 360.0
    assert [m.name for m in resumed.methods] == ["baseline", "draft", "eagle", "ngram", "suffix", "eagle"]
    assert resumed.methods[2].params["policy"] == "shared:4"
