"""The report's opening sections: the testbed (machine, models, engines, the run's settings) and the Methods legend.

Knows: ``run.testbed``, ``run.models``, ``run.config``, each cell's engine fields, and each label's short form
(``labels.py``), printed beside its full settings once, in the Methods table, so that every other table, plot and
sentence can use the short one. Does not know: the measurements.
"""

from __future__ import annotations

import json

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import DASH, size
from speculab.bench.report.results import Results, acceptance_cell

METHOD_PARAMS = "method_params"  # run.config's every parameter of every method, by label


def testbed_blocks(results: Results) -> list[Block]:
    run = results.run or {}
    tb, cfg, models = run.get("testbed") or {}, run.get("config") or {}, run.get("models") or {}
    ram = tb.get("ram_bytes")
    rows = [
        [k, DASH if v is None else str(v)]
        for k, v in (
            ("OS", tb.get("os")),
            ("Kernel", tb.get("kernel")),
            ("CPU", tb.get("cpu")),
            ("RAM", f"{size(ram)} ({ram:,} bytes)" if isinstance(ram, int) else ram),
            ("GPU", tb.get("gpu") or "none"),
            ("Python", tb.get("python")),
            ("torch", tb.get("torch")),
            ("speculab", tb.get("speculab")),
        )
    ]
    model_rows = []
    if models.get("target"):
        model_rows.append(["target", *_model_fields(models["target"])])
    for method, m in (models.get("drafters") or {}).items():
        model_rows.append([f"drafter ({results.short(method)})", *_model_fields(m)])
    blocks: list[Block] = [Heading(2, "Testbed"), Table(["Field", "Value"], rows, "`run.testbed`")]
    if model_rows:
        blocks.append(Table(["Role", "Model id", "Path", "sha256"], model_rows, "`run.models`"))
    engines = [
        [
            results.short(label),
            results.engine_of(label),
            str(c.get("engine_version") or tb.get("speculab") or DASH),
            str(c.get("endpoint") or DASH),
            f"`{c['server_command']}`" if c.get("server_command") else DASH,
        ]
        for label in results.labels
        for c in [acceptance_cell(results, label)]
    ]
    if any(e[1] != "speculab (in-process)" for e in engines):
        blocks.append(
            Table(
                ["Label", "Engine", "Version", "Endpoint", "Server command"],
                engines,
                "`cell.engine`, `cell.transport`, `cell.engine_version`, `cell.endpoint`, `cell.server_command`; "
                "each label's speedup is over its own engine's baseline",
            )
        )
    if cfg:
        blocks.append(_config_table(results, run))
    return blocks


def _model_fields(model: dict) -> list[str]:
    """id, path and sha256; a folder's several files' hashes one after another, each named."""
    sha = model.get("sha256", DASH)
    sha = "; ".join(f"{name}: `{digest}`" for name, digest in sha.items()) if isinstance(sha, dict) else f"`{sha}`"
    return [str(model.get("id", DASH)), f"`{model.get('path', DASH)}`", sha]


def _config_table(results: Results, run: dict) -> Table:
    """``run.config``, each setting a row; the methods by short label, their settings being in the Methods table."""
    rows = [["run_id", str(run.get("run_id"))], ["started", str(run.get("started"))]]
    for key, value in run["config"].items():
        if key == METHOD_PARAMS:
            continue
        if key == "methods" and isinstance(value, list):
            rows.append([key, ", ".join(results.short(str(m)) for m in value) + " (their settings: Methods)"])
        else:
            rows.append([key, json.dumps(value) if isinstance(value, (list, dict)) else str(value)])
    source = f"`run.config`, but for `{METHOD_PARAMS}` (each method's every parameter, defaults included: in results.jsonl)"
    return Table(["Setting", "Value"], rows, source)


def methods_blocks(results: Results) -> list[Block]:
    """The legend of short labels: each label's method and its full settings, as results.jsonl names them."""
    labels = results.all_labels
    if not labels:
        return []
    rows = [[results.short(lab), results.method(lab), f"`{lab}`"] for lab in labels]
    source = (
        "`cell.label` and `cell.method` (`acceptance.label` for a label only the acceptance pass measured); the short label "
        "is the method's name, plus the settings that differ where one method ran with several"
    )
    return [
        Heading(2, "Methods"),
        Paragraph("The tables, plots and findings below name each method by its short label; its full settings are here."),
        Table(["Label", "Method", "Full settings"], rows, source),
    ]
