"""SGLang's own parser and ``ServerArgs`` checks (the pinned version, from `make sglang`) take every command
`speculab launch sglang` writes, and refuse a wrong flag.

Each method SGLang runs (EAGLE with and without the reduced draft vocabulary's token map, EAGLE3, STANDALONE for a
draft model, NGRAM) and the plain target, for the embedded model and drafters exported into the test's folder, as
``speculab launch sglang --print --engine-version <pinned>`` writes them. ``sglang_parse.py`` says which of SGLang's
checks run; nothing is loaded and no server starts: SGLang has no CPU build for this machine. speculab's policies
are not here: SGLang's adaptive settings, which a policy becomes, came after the pinned version.

`make test` sets SPECULAB_REQUIRE_PEERS=1 and makes the environment first, so in CI these tests run, never skip.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from speculab.launch.environments import SGLANG_VERSION, installed_distribution, sglang_env_dir, sglang_python
from speculab.launch.prepare import prepare
from speculab.methods import parse_method
from speculab.models.embedded import ensure_embedded_model
from tests.helpers import require_peer_env

pytestmark = pytest.mark.slow
PARSE = Path(__file__).parent / "sglang_parse.py"
PROGRAM = ("python", "-m", "sglang.launch_server")
# (method, prepare's keywords): every algorithm, the token map with and without, a split target in bfloat16
LAUNCHES = [
    ("baseline", {}),
    ("eagle", {}),
    ("eagle:draft_vocab=none", {}),
    ("eagle3", {}),
    ("draft", {}),
    ("draft", {"tp": 3, "dtype": "bfloat16"}),  # 3 ranks: what the embedded model's 9 and 3 heads allow
    ("ngram", {}),
]
SPECULATIVE = {
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-draft-model-path": "speculative_draft_model_path",
    "--speculative-num-steps": "speculative_num_steps",
    "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
    "--speculative-token-map": "speculative_token_map",
    "--speculative-ngram-min-match-window-size": "speculative_ngram_min_match_window_size",
    "--speculative-ngram-max-match-window-size": "speculative_ngram_max_match_window_size",
}
SGLANG_DEFAULTS = {"speculative_ngram_min_match_window_size": 1, "speculative_ngram_max_match_window_size": 12}  # 0.5.3's


@pytest.fixture(scope="module")
def sglang_env() -> Path:
    require_peer_env(sglang_env_dir(), "sglang")
    python = sglang_python(create=False)
    assert installed_distribution(python, "sglang") == ("sglang", SGLANG_VERSION)
    return python


def parse(python: Path, argvs: list[list[str]]) -> list[dict]:
    done = subprocess.run([str(python), str(PARSE)], capture_output=True, text=True, input=json.dumps(argvs), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def as_given(value: str):
    return int(value) if value.isdigit() else value


def test_sglangs_serverargs_takes_every_launch_command(sglang_env, tmp_path):
    target = ensure_embedded_model()
    commands = [
        prepare("sglang", parse_method(method), target, tmp_path / f"run{i}", port=8123, version=SGLANG_VERSION, print_only=True, **kw)
        for i, (method, kw) in enumerate(LAUNCHES)
    ]
    assert [c.argv[: len(PROGRAM)] for c in commands] == [list(PROGRAM)] * len(commands)
    assert any(f.name == "--speculative-token-map" for f in commands[1].flags)  # eagle: the reduced vocabulary
    assert not any(f.name == "--speculative-token-map" for f in commands[2].flags)
    results = parse(sglang_env, [c.argv[len(PROGRAM) :] for c in commands])
    for command, result in zip(commands, results):
        assert result["ok"], (command.shell(), result)
        given = {f.name: f.value for f in command.flags}
        parsed, validated = result["parsed"], result["validated"]  # as parsed; after SGLang's checks and defaults
        for seen in (parsed, validated):
            assert (seen["model_path"], seen["host"], seen["port"]) == (str(target), "127.0.0.1", 8123)
            assert seen["served_model_name"] == target.name and seen["enable_metrics"]
        for flag, field in SPECULATIVE.items():
            assert parsed[field] == (as_given(given[flag]) if flag in given else SGLANG_DEFAULTS.get(field)), (command.shell(), field)
            if flag in given:  # SGLang's checks kept speculab's setting (they fill in only what was not given)
                assert validated[field] == parsed[field], (command.shell(), field, validated)


def test_sglang_refuses_a_wrong_flag(sglang_env):
    target = str(ensure_embedded_model())
    base = ["--model-path", target, "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", target]
    tree = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "4"]
    wrong = [
        [*base, "--speculative-num-stepz", "3"],  # a misspelling: no such flag
        [*base, "--speculative-num-step", "3"],  # a prefix: SGLang's launcher would take it; speculab writes full names
        ["--model-path", target, "--speculative-algorithm", "EAGLE4"],  # not one of its algorithms
        ["--model-path", target, "--speculative-num-draft-tokens", "four"],  # not an int
        [*base, *tree, "--page-size", "16", "--attention-backend", "triton"],  # parses; its checks refuse a paged tree
    ]
    results = parse(sglang_env, wrong)
    assert [(r["ok"], r["stage"]) for r in results] == [(False, "parse")] * 4 + [(False, "validate")], results
    assert "unrecognized arguments: --speculative-num-stepz" in results[0]["error"]
    assert "unrecognized arguments: --speculative-num-step 3" in results[1]["error"]
    assert "invalid choice: 'EAGLE4'" in results[2]["error"]
    assert "invalid int value: 'four'" in results[3]["error"]
    assert "speculative_eagle_topk > 1 with page_size > 1" in results[4]["error"]
