"""Model cards and manifests for trained drafters.

Knows: how to plot a loss history (matplotlib, PNG), measure a drafter's
acceptance on held-out prompts with the real engine (greedy), and write
``README.md`` (the card) and ``manifest.json`` (sha256 of every file, the exact
command, data versions, training time) next to the checkpoint.

Does not know: how the drafter was trained.
"""

from __future__ import annotations

import json
import platform
import shlex
from pathlib import Path

import torch

from speculab.engine import Engine, sequence_length
from speculab.files import sha256_of
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats, per_depth_summary


def plot_losses(history: list[dict], keys: tuple[str, ...], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.2), squeeze=False)
    steps = [h["step"] for h in history]
    for ax, key in zip(axes[0], keys):
        values = [h.get(key) for h in history]
        ax.plot(steps, values, lw=0.8)
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def measure_acceptance(loaded, proposer, prompts: list[list[int]], max_tokens: int, batch_size: int = 8) -> dict:
    """Greedy τ and acceptance of ``proposer`` with the target on held-out prompts, plus identity with plain decoding."""

    max_len = sequence_length(max(map(len, prompts)), max_tokens, proposer)
    params = SamplingParams(max_tokens=max_tokens)
    spec = Engine(loaded.model, batch_size, max_len, loaded.tokenizer.stop_ids, proposer).generate(prompts, params)
    plain = Engine(loaded.model, batch_size, max_len, loaded.tokenizer.stop_ids).generate(prompts, params)
    total = SpecStats()
    for r in spec:
        total.merge(r.stats)
    return {
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        **total.as_dict(),
        "identical_to_baseline": all(a.output_ids == b.output_ids for a, b in zip(spec, plain)),
    }


def write_manifest(out: Path, *, command: list[str], data: dict, train_seconds: float, extra: dict) -> Path:
    files = {
        p.name: sha256_of(p)
        for p in sorted(out.iterdir())
        if p.is_file() and p.suffix in (".safetensors", ".json") and p.name != "manifest.json"
    }
    manifest = {
        "files": files,
        "command": " ".join(shlex.quote(a) for a in command),
        "train_seconds": round(train_seconds, 1),
        "data": data,
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
        },
        **extra,
    }
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def _data_lines(data: dict) -> list[str]:
    """The card's "Data" section: what was answered, read and drawn from where."""
    return [
        f"- {data['num_sequences']} sequences, {data['num_tokens']:,} tokens ({data['response_tokens']:,} of them "
        f"the target's own responses; {data['sampled_responses']} responses sampled at T=0.8, the rest greedy).",
        *(
            [f"- Prompts drawn with seeds {', '.join(map(str, data['prompt_seeds']))}, {data['spec']['num_prompts']} per seed."]
            if data.get("prompt_seeds")
            else []
        ),
        *(
            [
                f"- Plus {data['agentic_prompts']} agentic edits (rename, lint-fix, apply-review, second turn) on "
                "training-share Python and TypeScript files, answered by the target."
            ]
            if data.get("agentic_prompts")
            else []
        ),
        *(
            [
                f"- {data['long_prompts']} of the sequences agent-length prompts: task prompts after whole training-share "
                f"files of their language, {data['long_spec']['context_tokens'][0]:,}-{data['long_spec']['context_tokens'][1]:,} "
                "tokens in all, answered by the target."
            ]
            if data.get("long_prompts")
            else []
        ),
        *(
            [
                f"- Plus {data['code_windows']} code windows, {data['code_window_tokens']:,} tokens: other training-share "
                "files framed as the assistant's answer to a request for the file, read by the target (prefill only)."
            ]
            if data.get("code_windows")
            else []
        ),
        "- Sources (training share only; the benchmark's files are excluded by `speculab.corpora.sources.is_benchmark_file`):",
        *[f"  - {s['name']} {s['version']} ({s['registry']}), {s['license']}" for s in data["sources"]],
    ]


def write_card(
    out: Path,
    *,
    title: str,
    summary: list[str],
    data: dict,
    loop: dict,
    acceptance: dict,
    plot: str,
    command: list[str],
    earlier_commands: list[str] = (),
    init_from: Path | None = None,
    notes: str = "",
) -> Path:
    """The drafter's README.md: what it is, its data, its training, its held-out acceptance, then ``notes`` (Markdown
    the trainer cannot know, e.g. why this shape), as given."""
    acc = acceptance
    rate = acc.get("acceptance_rate")
    lines = [
        f"# {title}",
        "",
        *summary,
        "",
        "## Data",
        "",
        *_data_lines(data),
        "",
        "## Training",
        "",
        f"- {loop['steps_done']} steps in {loop['seconds'] / 60:.1f} min ({'finished' if loop['finished'] else 'stopped by the time limit'}).",
        f"- Final loss {loop['final'].get('loss', float('nan')):.4f}; "
        + ", ".join(f"{k} {v:.4f}" for k, v in loop["final"].items() if k not in ("step", "seconds", "lr", "loss"))
        + ".",
        *([f"- Started from the weights of `{init_from}` (fresh optimiser and schedule)."] if init_from else []),
        *(f"- Earlier run, continued by the next: `{c}`" for c in earlier_commands),
        f"- Command: `{' '.join(command)}`",
        "",
        f"![loss curve]({plot})",
        "",
        "## Acceptance (held-out prompts from the training share, greedy)",
        "",
        *(
            ["- not measured (`--eval-prompts 0`)."]
            if not acc["prompts"]
            else [
                f"- τ (mean acceptance length, bonus token included): {acc['mean_acceptance_length']:.3f}",
                f"- acceptance rate: {'n/a' if rate is None else f'{rate:.3f}'}; accepted per position: {acc['accepted_per_position']}",
                f"- acceptance at each depth given the depth before was accepted (accepted / tested): {per_depth_summary(acc)}",
                f"- {acc['prompts']} prompts × {acc['max_tokens']} tokens; output identical to plain decoding: {acc['identical_to_baseline']}",
            ]
        ),
        "",
        *([notes.strip(), ""] if notes.strip() else []),
        "Benchmark figures on the benchmark workload are in the repository's BENCHMARKS.md.",
        "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def command_line(argv: list[str]) -> list[str]:
    return ["speculab", *argv]
