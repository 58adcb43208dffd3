"""BENCHMARKS.md's first screen, written from the raw `make bench` results: one table per CPU kind.

Usage: ``python benchmarks/reference.py`` rewrites the text between ``<!-- reference:begin -->`` and
``<!-- reference:end -->`` in BENCHMARKS.md; ``--check`` writes nothing, prints a unified diff and exits 1 where the
file differs from what the results give (``tests/benchmarks/test_reference.py`` runs the check). ``--root`` reads and
writes another tree laid out like this repository (the tests' synthetic ones).

Knows: where the results are: ``benchmarks/results/bench-matrix/<cpu-kind>-<YYYY-MM-DD>/results.jsonl``, a folder
named exactly so; a kind's table comes from its latest such folder by date. A folder with anything after the date
holds a superseded run and is not tabled, except that the latest ``<kind>-<date>-reruns/`` (or ``-rerun-pair/``; of
one day's, the one whose runs started last), two runs or more of one commit each in a subfolder, gives the run-to-run spread (at each batch size, the largest ratio of a
method's speedup between two of them, less 1; where no kind has one, the figure documented before is stated). The CPU kinds' names and descriptions (``KINDS``; an unknown
kind is shown by its folder name). A column is a method's name (``config.method_params[label]["name"]``, else the
label's) plus ``-auto`` for ``policy=auto`` or ``-<file stem>`` for a policy file, whatever else the label spells
(``batch_budget=4`` or ``policy=shared:4``); two labels of one name in a run fall back to the report's short labels.
Speedups, their spread and the short labels are ``speculab bench``'s report's own (``speculab.bench.report``); a run of
several context lengths gets a context column, named as the report names them, each speedup over the baseline at the
same batch size and context (a run of one context, older runs all, keeps the table without it). A
run's drafters (``run.models.drafters``: sha256 of the weight files, as ``speculab.testbed.model_record`` records
them) are compared with the same record of ``speculab/assets/<id>/`` now (its ``manifest.json`` where the folder has
no weight files).

Does not know: which commit a run measured (results.jsonl does not record it), whether its machine was busy, the
results of any other folder, or today's date: the block depends only on the files it reads, and names them by paths
relative to the repository.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from speculab.bench.report.contexts_section import contexts_about
from speculab.bench.report.labels import is_policy_file, parse_label
from speculab.bench.report.numbers import context_name, num, size, speedup_text, times
from speculab.bench.report.results import Results, load_results
from speculab.bench.report.speed_section import run_timing
from speculab.policy.table import SpeculationPolicy
from speculab.testbed import model_record

ROOT = Path(__file__).resolve().parents[1]
MATRIX = PurePosixPath("benchmarks/results/bench-matrix")
ASSETS = PurePosixPath("speculab/assets")
DOCUMENT = PurePosixPath("BENCHMARKS.md")
BEGIN, END = "<!-- reference:begin -->", "<!-- reference:end -->"
DATE = r"(?P<date>\d{4}-\d{2}-\d{2})"
LEAF = re.compile(rf"^(?P<kind>[a-z0-9]+(?:-[a-z0-9]+)*?)-{DATE}$")
RERUNS = re.compile(rf"^(?P<kind>[a-z0-9]+(?:-[a-z0-9]+)*?)-{DATE}-(?:rerun-pair|reruns)$")
KINDS = {  # folder kind -> (name in the tables, the CPU), as benchmarks/results/README.md lists them
    "xeon-amx": ("Xeon AMX", "Intel Xeon, family 6 model 167: AVX512F/BW/VL/VNNI, AVX512-BF16, AVX512-FP16, AMX"),
    "epyc-zen5": ("EPYC Zen 5", "AMD EPYC, family 26 model 2: AVX512F/DQ/BW/VL/VNNI/IFMA/VBMI, AVX512-BF16, no AMX"),
    "epyc-zen4": ("EPYC Zen 4", "AMD EPYC, family 25 model 17: AVX512F/DQ/BW/VL/VNNI/IFMA/VBMI/VBMI2, AVX512-BF16, no AMX"),
    "epyc-avx2": ("EPYC AVX2", "AMD EPYC (Zen 3): AVX2 + FMA only"),
    "epyc-zen1": ("EPYC Zen 1", "AMD EPYC, family 23 model 1: AVX2 + FMA only, no AVX512"),
}
DOCUMENTED_SPREAD = (
    "two fresh `make bench` runs of one commit on the EPYC Zen 5 (2026-12-05) agreed within 9% at batch 1 and 16 and within 11% at batch 2"
)


@dataclass(frozen=True)
class Run:
    kind: str
    date: str
    folder: PurePosixPath  # relative to the repository
    results: Results


# ---------------------------------------------------------------- reading


def latest_runs(root: Path) -> list[Run]:
    """Each kind's latest ``<kind>-<date>/results.jsonl``, the latest date first (then by kind)."""
    found: dict[str, tuple[str, str]] = {}
    matrix = root / MATRIX
    for folder in sorted(matrix.iterdir()) if matrix.is_dir() else []:
        match = LEAF.match(folder.name)
        if match and (folder / "results.jsonl").is_file() and match["date"] > found.get(match["kind"], ("", ""))[0]:
            found[match["kind"]] = (match["date"], folder.name)
    runs = [Run(k, d, MATRIX / name, load_results(root / MATRIX / name / "results.jsonl")) for k, (d, name) in found.items()]
    return sorted(runs, key=lambda r: (tuple(-int(p) for p in r.date.split("-")), r.kind))


def column_names(results: Results) -> dict[str, str]:
    """{label: column} for the run's speculative labels, in report order: the method's name, ``-auto`` for
    ``policy=auto``, ``-<stem>`` for a policy file; labels that would share a column keep the report's short label."""
    params = (results.run or {}).get("config", {}).get("method_params") or {}
    names = {}
    for label in results.labels:
        if results.is_baseline(label):
            continue
        mine = params.get(label) or {}
        parsed = parse_label(label)
        policy = mine.get("policy", (parsed[1] if parsed else {}).get("policy"))
        name = str(mine.get("name") or results.method(label))
        if policy == "auto":
            name += "-auto"
        elif isinstance(policy, str) and is_policy_file(policy):
            name += "-" + PurePosixPath(policy).stem
        names[label] = name
    taken = list(names.values())
    return {lab: name if taken.count(name) == 1 else results.short(lab) for lab, name in names.items()}


def shipped_weights(root: Path, drafter_id: str) -> str | dict | None:
    """What ``model_record`` would record for the shipped drafter ``drafter_id`` now; None where none ships."""
    folder = root / ASSETS / drafter_id
    if not folder.is_dir():
        return None
    if any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")):
        return model_record(folder)["sha256"]
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    files = json.loads(manifest.read_text()).get("files") or {}
    weights = {n: d for n, d in files.items() if n.endswith(".safetensors")} or {n: d for n, d in files.items() if n.endswith(".bin")}
    return next(iter(weights.values())) if len(weights) == 1 else weights


def digests(sha: str | dict | None) -> tuple[str, ...]:
    """A weights record's sha256 digests, sorted: one file's string or a folder's {file: digest} alike."""
    return (sha,) if isinstance(sha, str) else tuple(sorted((sha or {}).values()))


def drafters_line(root: Path, results: Results) -> str:
    """Whether the run's drafters are the ones shipped now."""
    drafters = ((results.run or {}).get("models") or {}).get("drafters") or {}
    retrained, unknown = set(), set()
    for record in drafters.values():
        now = shipped_weights(root, str(record.get("id")))
        if now is None:
            unknown.add(str(record.get("id")))
        elif digests(now) != digests(record.get("sha256")):
            retrained.add(str(record.get("id")))
    if not drafters:
        return "**Drafters:** none recorded (`run.models.drafters`)."
    if retrained:
        names = ", ".join(f"`{d}`" for d in sorted(retrained))
        return (
            f"**Drafters since retrained: rerun `make bench`.** {names}: the weights this run recorded are not the ones in `{ASSETS}/` now."
        )
    if unknown:
        return f"**Drafters:** not shipped in `{ASSETS}/` ({', '.join(f'`{d}`' for d in sorted(unknown))})."
    return f"**Drafters:** the ones shipped now (each drafter's weights' sha256 in `run.models.drafters` matches `{ASSETS}/`)."


# ---------------------------------------------------------------- one kind's table


def _row(results: Results, columns: dict[str, str], batch: int) -> list[str]:
    """One batch size at ``results``' context: the baseline's tok/s, then each column's speedup [lowest–highest]; bold:
    the fastest, where it is above 1.00× (two decimals, as shown)."""
    base = results.baseline_label
    found = {lab: results.measured_speedup(lab, batch) for lab in columns}
    best = max((round(s.value, 2) for s in found.values() if s is not None), default=0.0)
    cells = []
    for lab in columns:
        text = speedup_text(results, lab, batch)
        if found[lab] is not None and round(found[lab].value, 2) == best > 1.0:
            text = text.replace(times(found[lab].value), f"**{times(found[lab].value)}**", 1)
        cells.append(text)
    return [num(results.tok_s(base, batch) if base else None), *cells]


def table_lines(results: Results, columns: dict[str, str]) -> list[str]:
    """Rows: batch sizes, and with several contexts (context, batch size) pairs, each against the baseline at its own
    context; columns: the baseline's tok/s, then each method's speedup (``_row``)."""
    lead = ["context"] * results.several_contexts + ["batch", "baseline tok/s"]
    lines = ["| " + " | ".join([*lead, *columns.values()]) + " |", "|---" * (len(columns) + len(lead)) + "|"]
    for view in results.views:
        where = [context_name(results, view.context)] * results.several_contexts
        lines += ["| " + " | ".join([*where, str(b), *_row(view, columns, b)]) + " |" for b in view.batch_sizes]
    return lines


def timing_text(results: Results, columns: dict[str, str]) -> str:
    """How the table's speedups were measured, in a line (the report's ``run_timing``: every speculative cell's)."""
    how = run_timing(results)
    repeats = (results.run or {}).get("config", {}).get("repeats")
    if how.paired and not how.separate:
        rounds = "–".join(str(r) for r in sorted({how.rounds[0], how.rounds[-1]}))
        turns = f"; the later rounds in turns of {how.turn_s:g} s" if how.turn_s else ""
        if how.in_groups:
            turns += f" ({how.in_groups} of them in groups beside the baseline, for memory, each paired with its group's)"
        return f"**Speedups:** median of {rounds} per-round ratios to the baseline of the same round [lowest–highest]{turns}."
    if how.separate and not how.paired:
        each = f" of {repeats} repeats" if repeats else ""
        return f"**Speedups:** ratio of median tok/s{each} [the method's slowest and fastest repeat over the baseline's median]."
    return "**Speedups:** " + how.text.removeprefix("How speedups were measured: ")


def greedy_text(results: Results, columns: dict[str, str]) -> str:
    flags = [c.get("greedy_identical") for (lab, _, _), c in results.all_cells.items() if lab in columns]
    same, differ = flags.count(True), flags.count(False)
    if flags and same == len(flags):
        return f"**Greedy:** every cell's output identical to the baseline's ({same} of {len(flags)})."
    return f"**Greedy:** {same} of {len(flags)} cells identical to the baseline's output, {differ} not, {len(flags) - same - differ} not recorded."


def acceptance_text(results: Results, columns: dict[str, str]) -> str | None:
    """Each column's untimed acceptance pass over all its prompts; a pass shared with another label is named so."""
    parts, prompts = [], set()
    for lab, name in columns.items():
        record = results.acceptance.get(lab)
        if not record:
            continue
        if record.get("same_pass_as") in columns:
            parts.append(f"{name}: {columns[record['same_pass_as']]}'s pass")
            continue
        everything = record.get("all") or {}
        prompts.add(everything.get("prompts"))
        rate = everything.get("acceptance_rate")
        parts.append(f"{name} {num(None if rate is None else 100 * rate)}% (τ {num(everything.get('tau'), 2)})")
    if not parts:
        return None
    over = f", {prompts.pop()} prompts" if len(prompts) == 1 else ""
    return f"**Acceptance** (untimed pass{over}): " + ", ".join(parts) + "."


def rss_text(results: Results) -> str | None:
    """Peak RSS over every cell at the smallest and the largest batch size."""
    parts = []
    batches = results.all_batch_sizes
    for batch in sorted({batches[0], batches[-1]}) if batches else []:
        peaks = [c["peak_rss_bytes"] for (_, b, _), c in results.all_cells.items() if b == batch and c.get("peak_rss_bytes")]
        if peaks:
            low, high = size(min(peaks)), size(max(peaks))
            if low != high and low.split()[-1] == high.split()[-1]:
                low = low.split()[0] + "–" + high
            parts.append(f"{high if low == high else low} at batch {batch}")
    every = "every method's cells" + (", every context" if results.several_contexts else "")
    return f"**Peak RSS** (the process, {every}): " + ", ".join(parts) + "." if parts else None


def policy_text(results: Results, columns: dict[str, str]) -> str | None:
    """The draft budgets each column's speculation policy gave (``cell.policy``, as ``SpeculationPolicy`` reads it, the
    format of earlier versions included): draft nodes a request from each batch size (and context length)."""
    parts = []
    for lab, name in columns.items():
        # a label runs one policy at every context: the first context's cells say it
        cells = [c for (other, _), c in sorted(results.cells.items()) if other == lab]
        policy = next((c["policy"] for c in cells if isinstance(c.get("policy"), dict)), None)
        rules = SpeculationPolicy.from_dict(policy).rules if policy else ()
        if rules:
            steps = ", ".join(
                f"{r.draft_nodes} from batch {r.batch_size}" + (f" and {r.context_len} tokens" if r.context_len else "") for r in rules
            )
            parts.append(f"`{name}` {steps}")
    return "**Policies** (draft nodes a request; 0: plain decoding): " + "; ".join(parts) + "." if parts else None


def run_lines(root: Path, run: Run, columns: dict[str, str]) -> list[str]:
    """The notes under a kind's table: the run, the machine, the workload, how it was measured, its drafters."""
    record = run.results.run or {}
    cfg, tb = record.get("config") or {}, record.get("testbed") or {}
    base = run.results.baseline_label
    prompts = [str((run.results.cells.get((base, b)) or {}).get("num_prompts", "?")) for b in run.results.batch_sizes]
    batches = " / ".join(str(b) for b in run.results.batch_sizes)
    flags = ", ".join(tb.get("cpu_flags") or []) or "none recorded"
    several = run.results.several_contexts
    where = " and context" * several
    cores = f"{tb['cpu_count']} cores, " if tb.get("cpu_count") else ""
    ram = f"{size(tb['ram_bytes'])}, " if tb.get("ram_bytes") else ""
    notes = [
        drafters_line(root, run.results),
        f"**Run:** `make bench` (`run_id` {record.get('run_id')}, started {record.get('started')}); raw "
        f"`{run.folder}/` (`results.jsonl`, `report.md`).",
        f"**Machine:** `{tb.get('cpu', '?')}`, {cores}{ram}flags recorded: {flags}; Python {tb.get('python', '?')}, "
        f"torch {tb.get('torch', '?')}; linear kernels `{cfg.get('linear_kernels') or 'not recorded'}`; "
        f"{cfg.get('dtype', '?')} weights, {cfg.get('kv_dtype') or cfg.get('dtype', '?')} KV cache.",
        f"**Workload:** {' / '.join(prompts)} prompts at batch {batches}, {cfg.get('max_tokens', '?')} output tokens each.",
        f"**Contexts** (`run.config.contexts`, each named by its median prompt tokens): {contexts_about(run.results)}."
        if several
        else None,
        timing_text(run.results, columns) + f" Bold: the fastest method at that batch size{where} where it beats plain decoding.",
        greedy_text(run.results, columns),
        acceptance_text(run.results, columns),
        policy_text(run.results, columns),
        rss_text(run.results),
    ]
    return [f"- {n}" for n in notes if n]


def kind_section(root: Path, run: Run) -> list[str]:
    name, cpu = KINDS.get(run.kind, (run.kind, None))
    columns = column_names(run.results)
    head = f"### {name} (`make bench`, {run.date})"
    about = f"`{run.kind}`: {cpu}." if cpu else f"`{run.kind}`."
    return [head, "", about, "", *table_lines(run.results, columns), "", *run_lines(root, run, columns), ""]


# ---------------------------------------------------------------- across kinds


def legend_lines(runs: list[Run]) -> list[str]:
    """Each column's full label as results.jsonl records it, and which tables ran it so."""
    seen: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        for label, column in column_names(run.results).items():
            seen.setdefault((column, label), []).append(KINDS.get(run.kind, (run.kind,))[0])
    rows = [f"| `{column}` | `{label}` | {', '.join(kinds)} |" for (column, label), kinds in sorted(seen.items())]
    return ["| column | label in `results.jsonl` (`config.methods`) | tables |", "|---|---|---|", *rows, ""] if rows else []


def rerun_spread(root: Path) -> str:
    """Each batch size's largest spread of a method's speedup over the runs of the latest reruns folder: the largest
    ratio between two of its runs, less 1."""
    matrix = root / MATRIX
    sets = []  # (date, the last of its runs' starts, kind, folder): two sets of one day ordered by when they ran
    for p in matrix.iterdir() if matrix.is_dir() else []:
        if m := RERUNS.match(p.name):
            runs = [load_results(f) for f in sorted(p.glob("*/results.jsonl"))]
            sets.append((m["date"], max((str((r.run or {}).get("started", "")) for r in runs), default=""), m["kind"], p.name, runs))
    for date, _, kind, name, runs in sorted(sets, reverse=True):
        worst = _spread(runs) if len(runs) >= 2 else {}
        if worst:
            parts = ", ".join(f"{100 * w:.1f}% at batch {batch}" for batch, w in sorted(worst.items()))
            cpu = KINDS.get(kind, (kind,))[0]
            return (
                f"**Run-to-run spread:** {len(runs)} `make bench` runs of one commit, one after another, on the {cpu} ({date}; "
                f"`{MATRIX / name}/`) parted by at most {parts} (each method's speedup: the largest ratio between two of "
                "the runs, less 1). Differences within these are noise."
            )
    return f"**Run-to-run spread:** {DOCUMENTED_SPREAD}. Differences within these are noise."


def _spread(runs: list[Results]) -> dict[int, float]:
    """{batch size: the largest max/min - 1 of one column's speedup over the runs}."""
    speedups: dict[tuple[str, int, int | None], list[float]] = {}  # (column, batch, context): a context's runs against each other
    for results in runs:
        for label, column in column_names(results).items():
            for view in results.views:
                for batch in view.batches_of(label):
                    measured = view.measured_speedup(label, batch)
                    if measured is not None:
                        speedups.setdefault((column, batch, view.context), []).append(measured.value)
    worst: dict[int, float] = {}
    for (_, batch, _), values in speedups.items():
        if len(values) >= 2:
            worst[batch] = max(worst.get(batch, 0.0), max(values) / min(values) - 1)
    return worst


def render(root: Path) -> str:
    """The block between the markers, markers excluded, ending in a newline."""
    runs = latest_runs(root)
    lines = [
        "",
        "<!-- Written by `python benchmarks/reference.py` from each CPU kind's latest "
        f"`{MATRIX}/<cpu-kind>-<YYYY-MM-DD>/results.jsonl`; edit the script or the results, not this block "
        "(`python benchmarks/reference.py --check` and tests/benchmarks/test_reference.py fail when they differ). -->",
        "",
        "## Speedup by method and batch size (`make bench`, each CPU's latest run)",
        "",
    ]
    if not runs:
        lines += [f"No `make bench` results under `{MATRIX}/`.", ""]
    for run in runs:
        lines += kind_section(root, run)
    lines += ["### Columns", "", *legend_lines(runs), rerun_spread(root), "", ""]
    return "\n".join(lines)


def splice(document: str, block: str) -> str:
    """``document`` with the text between the markers replaced by ``block``."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOCUMENT} lacks the markers {BEGIN} … {END}")
    return document[: start + len(BEGIN)] + "\n" + block + document[end:]


def check(root: Path) -> str:
    """A unified diff from BENCHMARKS.md as it is to what the results give; empty when they agree."""
    path = root / DOCUMENT
    now = path.read_text()
    wanted = splice(now, render(root))
    diff = difflib.unified_diff(
        now.splitlines(keepends=True), wanted.splitlines(keepends=True), str(DOCUMENT), f"{DOCUMENT} (from the results)"
    )
    return "".join(diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; print a diff and exit 1 where BENCHMARKS.md differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this script's)")
    args = parser.parse_args(argv)
    if args.check:
        diff = check(args.root)
        if diff:
            print(diff, end="")
            print(f"{DOCUMENT} differs from the results: run `python benchmarks/reference.py`", file=sys.stderr)
            return 1
        return 0
    path = args.root / DOCUMENT
    path.write_text(splice(path.read_text(), render(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
