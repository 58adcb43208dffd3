"""Two clients on one server: vLLM's own ``vllm bench serve`` and ``speculab bench --endpoint``, on the same prompts.

``speculab serve --method M`` runs once; the two clients take turns (ABBA over ``--pairs``), each sending the same
``--num-prompts`` workload prompts (cut to ``--prompt-chars`` characters, as vLLM's ShareGPT reader keeps prompts
under 1,024 tokens) through ``/v1/chat/completions``, greedy, ``--max-tokens`` each, ``--concurrency`` in flight.
Reported per client: output tok/s, median TTFT, output tokens and the acceptance rate each computed (medians over
its passes, with min and max). vLLM's client runs in vLLM's environment (``make vllm``).

    .venv/bin/python benchmarks/serve_clients.py --concurrency 1 4 --pairs 2

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from speculab.bench.workload import interleave_domains, load_workload
from speculab.cpu import reported_cpu_flags
from speculab.launch.environments import vllm_python
from speculab.models.embedded import ensure_embedded_model
from tests.servers import MODEL, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]


def write_prompts(folder: Path, n: int, chars: int) -> tuple[Path, Path]:
    """The same prompts as vLLM's ShareGPT JSON and as a speculab workload."""
    items = interleave_domains(load_workload(), n)
    texts = [[c for r, c in i.messages if r == "user"][-1][:chars] for i in items]
    sharegpt, workload = folder / "prompts.json", folder / "workload.jsonl"
    sharegpt.write_text(json.dumps([{"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "-"}]} for t in texts]))
    workload.write_text("".join(json.dumps({"id": i.id, "domain": i.domain, "prompt": t}) + "\n" for i, t in zip(items, texts)))
    return sharegpt, workload


def vllm_client(url: str, sharegpt: Path, args, concurrency: int, out: Path) -> dict:
    cmd = [str(vllm_python(create=False)), str(ROOT / "tests/launch/vllm_bench_serve.py"), "--backend", "openai-chat"]
    cmd += ["--base-url", url, "--endpoint", "/v1/chat/completions", "--model", MODEL, "--tokenizer", str(ensure_embedded_model())]
    cmd += ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--sharegpt-output-len", str(args.max_tokens)]
    cmd += ["--num-prompts", str(args.num_prompts), "--max-concurrency", str(concurrency), "--temperature", "0"]
    cmd += ["--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    r = json.loads(out.read_text())
    rate = r.get("spec_decode_acceptance_rate")
    return {
        "tok_s": r["output_throughput"],
        "ttft_ms": r["median_ttft_ms"],
        "tokens": r["total_output_tokens"],
        "acceptance": rate / 100 if rate is not None else None,
    }


def speculab_client(url: str, workload: Path, args, concurrency: int, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "speculab.cli",
        "bench",
        "--endpoint",
        url,
        "--workload",
        str(workload),
        "--num-prompts",
        str(args.num_prompts),
    ]
    cmd += ["--max-tokens", str(args.max_tokens), "--batch-sizes", str(concurrency), "--repeats", "1", "--out", str(out), "--no-progress"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    (cell,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"cell"' in line]
    return {
        "tok_s": cell["tok_s"],
        "ttft_ms": cell["ttft_p50_s"] * 1e3,
        "tokens": cell["output_tokens"],
        "acceptance": cell["acceptance_rate"],
    }


def summary(runs: list[dict]) -> dict:
    return {
        k: {"median": statistics.median(r[k] for r in runs), "min": min(r[k] for r in runs), "max": max(r[k] for r in runs)}
        for k in runs[0]
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--method", default="eagle")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    p.add_argument("--num-prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-chars", type=int, default=2500)
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="serve-clients-"))
    sharegpt, workload = write_prompts(folder, args.num_prompts, args.prompt_chars)
    temp = SimpleNamespace(mktemp=lambda name: Path(tempfile.mkdtemp(prefix=name)))  # what start_server asks of pytest's factory
    server = start_server(temp, "--method", args.method, "--max-model-len", "2048")
    results = {}
    try:
        for c in args.concurrency:
            runs = {"vllm bench serve": [], "speculab bench --endpoint": []}
            for i in range(2 * args.pairs):
                first_vllm = i % 4 in (0, 3)  # ABBA
                for name in (
                    ["vllm bench serve", "speculab bench --endpoint"] if first_vllm else ["speculab bench --endpoint", "vllm bench serve"]
                ):
                    out = folder / f"{name.split()[0]}-{c}-{i}"
                    run = (
                        vllm_client(server.url, sharegpt, args, c, out.with_suffix(".json"))
                        if name.startswith("vllm")
                        else speculab_client(server.url, workload, args, c, out)
                    )
                    runs[name].append(run)
                    print(c, name, run, file=sys.stderr)
            results[str(c)] = {name: summary(r) for name, r in runs.items()}
    finally:
        stop_server(server)
    print(
        json.dumps(
            {
                "method": args.method,
                "cpu_flags": reported_cpu_flags(),
                "num_prompts": args.num_prompts,
                "max_tokens": args.max_tokens,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
