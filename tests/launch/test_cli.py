"""`speculab launch --print` and `speculab export` from the command line: the JSON last line, and clear refusals."""

from __future__ import annotations

import json

from speculab.cli import main
from tests.helpers import save_tiny_checkpoint, tiny_hf_model, write_eagle_head


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_print_for_an_old_vllm_exports_the_head_where_v0_looks_for_it(capsys, tmp_path):
    assert main(["launch", "vllm", "--method", "eagle", "--engine-version", "0.8.2", "--print", "--out", str(tmp_path)]) == 0
    record = last_json(capsys)
    argv = record["argv"]
    assert argv[:2] == ["vllm", "serve"] and record["version"] == "0.8.2"
    head = argv[argv.index("--speculative-model") + 1]
    assert "eagle-" in head and (tmp_path / "drafters").exists()  # V0 takes a drafter as EAGLE only when its path says so
    assert json.loads((tmp_path / "drafters" / "vllm-eagle-drafter" / "config.json").read_text())["attention_bias"] is True


def test_print_for_sglang_writes_the_token_map(capsys, tmp_path):
    assert main(["launch", "sglang", "--method", "eagle", "--print", "--out", str(tmp_path)]) == 0
    argv = last_json(capsys)["argv"]
    token_map = argv[argv.index("--speculative-token-map") + 1]
    assert token_map.endswith("token_map.pt") and (tmp_path / "drafters" / "sglang-eagle-drafter" / "token_map.pt").exists()


def test_refusals_are_clear(capsys, tmp_path):
    cases = [
        (["launch", "sglang", "--method", "draft", "--engine-version", "0.4.3", "--print"], "arrived in 0.5.2"),
        (["launch", "vllm", "--method", "draft", "--engine-version", "0.12.0", "--print"], "0.14"),
        (["launch", "vllm", "--engine-version", "latest", "--print"], "not a version"),
        (["launch", "sglang", "--method", "baseline"], "--python"),
        (["launch", "vllm", "--method", "ngram", "--draft", str(tmp_path), "--print"], "does not apply"),
        (["launch", "vllm", "--target", str(tmp_path), "--print"], "no config.json"),
        (["export", "--for", "vllm", str(tmp_path), str(tmp_path / "out")], "no config.json"),
        (["launch", "vllm", "--max-model-len", "0", "--print"], "--max-model-len 0: give a positive number"),
        (["launch", "vllm", "--kv-cache-gib", "4", "--engine-version", "0.8.5", "--print"], "only vLLM's CPU build"),
    ]
    for argv, message in cases:
        assert main(argv + ["--out", str(tmp_path / "run")] if argv[0] == "launch" else argv) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_a_user_target_needs_its_own_drafter(capsys, tmp_path):
    target = save_tiny_checkpoint(tmp_path / "target")
    assert main(["launch", "vllm", "--method", "eagle", "--target", str(target), "--print", "--out", str(tmp_path / "r")]) == 2
    assert "needs --draft PATH" in capsys.readouterr().err
    head = write_eagle_head(tmp_path / "head", tiny_hf_model().config)
    assert (
        main(
            [
                "launch",
                "vllm",
                "--method",
                "eagle",
                "--target",
                str(target),
                "--draft",
                str(head),
                "--engine-version",
                "0.32.0",
                "--print",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    assert '"method":"eagle"' in last_json(capsys)["command"]


def test_export_prints_what_it_wrote(capsys, tmp_path):
    head = write_eagle_head(tmp_path / "head", tiny_hf_model().config)
    assert main(["export", "--for", "vllm", str(head), str(tmp_path / "out")]) == 0
    assert last_json(capsys) == {"out": str(tmp_path / "out"), "kind": "eagle", "engine": "vllm", "format": "engine", "token_map": None}
    assert main(["export", "--for", "sglang", str(head), str(tmp_path / "o2"), "--draft-vocab", "lots"]) == 2
    assert "--draft-vocab lots" in capsys.readouterr().err


def test_bench_refuses_a_method_the_engine_cannot_run_before_measuring_anything(capsys, tmp_path):
    argv = [
        "bench",
        "--engine",
        "speculab",
        "sglang",
        "--methods",
        "baseline",
        "ngram:policy=plain_above:4",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    assert main(argv) == 2
    assert "policy=plain_above:4: SGLang 0.5.23 cannot express" in capsys.readouterr().err
    assert not (tmp_path / "run" / "results.jsonl").exists() or "cell" not in (tmp_path / "run" / "results.jsonl").read_text()


def test_a_tp_the_heads_cannot_share_is_refused_before_a_launch(capsys):
    """The embedded model's 9 query and 3 KV heads split over 1, 3 or 9 ranks; 2 is refused with what fits."""
    assert main(["launch", "vllm", "--method", "baseline", "--tp", "2", "--print"]) == 2
    err = capsys.readouterr().err
    assert "9 attention heads and 3 KV heads" in err and "--tp 1 or 3 or 9" in err and "padded_heads" in err
    assert main(["launch", "vllm", "--method", "baseline", "--tp", "3", "--print"]) == 0
    assert "--tensor-parallel-size 3" in capsys.readouterr().out


def test_an_agents_context_gets_its_positions(capsys, tmp_path):
    assert main(["launch", "vllm", "--max-model-len", "8192", "--engine-version", "0.8.5", "--print", "--out", str(tmp_path)]) == 0
    argv = last_json(capsys)["argv"]
    assert argv[argv.index("--max-model-len") + 1] == "8192"


def test_bench_refuses_a_launched_suffix_that_would_draft_its_own_earlier_answers(capsys, tmp_path):
    """A server keeps earlier requests' outputs across a run's passes, which resend the same prompts: suffix decoding
    there would draft the answers it gave before. With no outputs kept it runs."""
    argv = ["bench", "--engine", "speculab", "vllm", "--methods", "baseline", "suffix", "--out", str(tmp_path / "run"), "--no-progress"]
    assert main(argv) == 2
    assert "give suffix:max_cached_requests=0" in capsys.readouterr().err
    assert not (tmp_path / "run" / "results.jsonl").exists() or "cell" not in (tmp_path / "run" / "results.jsonl").read_text()
