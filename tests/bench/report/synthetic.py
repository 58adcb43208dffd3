"""Synthetic results.jsonl records for the report's tests, and reading the report's typed blocks back as data."""

import json

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.results import load_results
from speculab.bench.report.sections import document
from speculab.models.config import CONFIGS
from speculab.models.memory import estimate

BASE = "baseline"
DRAFT = "draft(num_speculative_tokens=4,draft_vocab=auto)"
EAGLE = "eagle(num_steps=5,topk=8,num_draft_tokens=32,batch_budget=4)"
BATCHES = [1, 2, 4, 8, 16]
TOK_S = {  # label -> tok/s per batch size (the study's table, as test data)
    BASE: [18.2, 34.6, 62.4, 98.4, 154.2],
    DRAFT: [32.8, 58.2, 89.1, 114.2, 148.6],
    EAGLE: [44.6, 78.4, 121.8, 158.6, 172.4],
}
ACCEPT = {
    DRAFT: (0.584, {"python": 0.612, "typescript": 0.567, "sql": 0.581}, 2.71),
    EAGLE: (0.812, {"python": 0.834, "typescript": 0.798, "sql": 0.825}, 3.93),
}


def method_of(label: str) -> str:
    return label.split("(")[0].split(":")[-1]


def run_record(run_id="r1", cpu="Test CPU", **config):
    target, drafter = CONFIGS["llama-3.3-70b"], CONFIGS["llama-3.2-1b"]
    device = (2, 24_564 * 2**20, 4)  # dtype bytes, one device's memory, tensor parallel
    common = {"target_weight_format": "awq", "memory_utilization": 0.9, "overhead_bytes": 2 * 2**30}
    return {
        "kind": "run",
        "run_id": run_id,
        "started": "2026-01-01T00:00:00Z",
        "config": {
            "methods": [BASE, DRAFT, EAGLE],
            "batch_sizes": BATCHES,
            "num_prompts": 8,
            "max_tokens": 64,
            "temperature": 0.0,
            "profile": "quick",
            "workload": "code-v1",
            "dtype": "bfloat16",
            "method_params": {DRAFT: {"name": "draft", "num_speculative_tokens": 4}},
            **config,
        },
        "testbed": {
            "os": "Linux",
            "kernel": "6.8.0",
            "cpu": cpu,
            "ram_bytes": 8 * 2**30,
            "gpu": None,
            "python": "3.11.9",
            "torch": "2.13.0",
            "speculab": "0.1.0",
        },
        "models": {
            "target": {"id": "tgt-model", "path": "/m/t", "sha256": "ab" * 32},
            "drafters": {DRAFT: {"id": "small-model", "path": "/m/d", "sha256": {"model.safetensors": "cd" * 32}}},
        },
        "memory": {
            BASE: estimate(target, None, None, *device, **common),
            DRAFT: estimate(target, "draft", drafter, *device, **common),
            EAGLE: estimate(target, "eagle", None, *device, **common),
        },
    }


def cell(label, batch, tok_s, run_id="r1", **extra):
    acc, by_domain, tau = ACCEPT.get(label, (None, {}, 1.0))
    record = {
        "kind": "cell",
        "run_id": run_id,
        "method": method_of(label),
        "label": label,
        "params": {},
        "batch_size": batch,
        "num_prompts": 8,
        "repeats": 3,
        "output_tokens": 512,
        "wall_s": 512 / tok_s,
        "tok_s": tok_s,
        "tok_s_per_request": tok_s / batch,
        "ttft_p50_s": 0.1,
        "ttft_p99_s": 0.2,
        "tpot_p50_s": 0.05,
        "tpot_p99_s": 0.08,
        "itl_p50_s": 0.04,
        "itl_p99_s": 0.09,
        "tau": tau,
        "acceptance_rate": acc,
        "acceptance_by_domain": by_domain,
        "tau_by_domain": {d: tau for d in by_domain},
        "accepted_per_position": [5, 3, 1],
        "reached_per_position": [8, 5, 3],
        "steps": 100,
        "peak_rss_bytes": 2**30,
        "greedy_identical": None if label == BASE else True,
        "agreement": None,
        "some_future_field": 1,
    }
    record.update(extra)
    return record


def acceptance_record(label, by_domain, run_id="r1"):
    """An acceptance-pass record: ``by_domain`` {domain: (prompts, acceptance_rate, tau)}."""
    figures = {d: {"prompts": n, "acceptance_rate": a, "tau": t} for d, (n, a, t) in by_domain.items()}
    prompts = sum(n for n, _, _ in by_domain.values())
    rate = sum(n * a for n, a, _ in by_domain.values()) / prompts
    return {
        "kind": "acceptance",
        "run_id": run_id,
        "method": method_of(label),
        "label": label,
        "drafted_as": method_of(label),
        "batch_size": 16,
        "max_tokens": 64,
        "by_domain": figures,
        "all": {"prompts": prompts, "acceptance_rate": rate, "tau": 2.0},
    }


def matrix(values=None, **extra):
    """A cell for every (label, batch size) of ``values`` (label -> tok/s per batch size)."""
    return [cell(label, b, t, **extra) for label, tok in (values or TOK_S).items() for b, t in zip(BATCHES, tok)]


def write_results(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def standard_records():
    records = [run_record(cpu="stale CPU"), {"kind": "progress", "note": "unknown kinds are ignored"}]
    records.append(cell(EAGLE, 1, 1.0))  # superseded by the later record for the same (label, batch)
    records.append(cell(EAGLE, 1, 999.0, run_id="older-run"))  # another run's cell: ignored
    records += matrix()
    records.append(run_record(cpu="Resumed CPU"))  # a resumed run: the last run record counts
    return records


# ---------------------------------------------------------------- the report's blocks, as data


def report_blocks(path) -> list[Block]:
    return document(load_results(path))


def section(blocks: list[Block], title: str) -> list[Block]:
    """The blocks under the heading ``title``, up to the next heading of its level or above."""
    start = next(i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.text == title)
    level = blocks[start].level
    end = next((i for i in range(start + 1, len(blocks)) if isinstance(blocks[i], Heading) and blocks[i].level <= level), len(blocks))
    return blocks[start + 1 : end]


def has_section(blocks: list[Block], title: str) -> bool:
    return any(isinstance(b, Heading) and b.text == title for b in blocks)


def tables(blocks: list[Block]) -> list[Table]:
    return [b for b in blocks if isinstance(b, Table)]


def paragraphs(blocks: list[Block]) -> list[str]:
    return [b.text for b in blocks if isinstance(b, Paragraph)]


def rows(table: Table) -> dict[str, dict[str, str]]:
    """{first column: {header: cell}}: one row by its first cell."""
    return {row[0]: dict(zip(table.headers, row)) for row in table.rows}


# ---------------------------------------------------------------- a run of two context lengths

LONG = 4096  # the second context asked for, in target tokens
TOK_S_LONG = {  # label -> tok/s per batch size at LONG; None: skipped for memory
    BASE: [9.0, 17.0, 30.0, 50.0, 80.0],
    DRAFT: [8.0, 15.0, 27.0, 45.0, 70.0],  # slower than plain decoding at every batch size
    EAGLE: [18.0, 25.0, 27.0, 40.0, None],  # pays up to batch 2
}
PROMPT_TOKENS = {None: [1230, 1234, 1238, 1234, 1234], LONG: [4100, 4102, 4104, 4102, 4102]}  # cell.context_tokens


def context_records() -> list[dict]:
    """A run of the workload's prompts as they are (``TOK_S``, about 1.2k tokens) and at ``LONG`` (``TOK_S_LONG``, about
    4.1k tokens), EAGLE's batch 16 at ``LONG`` skipped for memory."""
    records = [run_record(contexts=[None, LONG])]
    for context, values in ((None, TOK_S), (LONG, TOK_S_LONG)):
        for label, tok in values.items():
            for b, t, tokens in zip(BATCHES, tok, PROMPT_TOKENS[context]):
                if t is not None:
                    records.append(cell(label, b, t, context=context, context_tokens=tokens))
    records.append(
        {
            "kind": "skipped",
            "run_id": "r1",
            "label": EAGLE,
            "batch_size": 16,
            "context": LONG,
            "engine_bytes": 9 * 2**30,
            "available_bytes": 6 * 2**30,
            "reason": "its engine alone needs more than is free",
        }
    )
    return records
