"""``speculab bench --resume``: a resumed run is the same run.

Knows: the settings a run recorded (its last run record's ``config`` in ``results.jsonl``), rebuilt as a
``BenchConfig``; and which flag contradicts the recorded run, by name. A command line may change on resume only what
no figure depends on (``settings.OPERATIONAL``: where a launched engine listens, how long an HTTP request may take;
and the endpoints' key, never recorded).
Does not know: how the run goes on (``runner.py``), or how the command line is parsed (``cli.py``).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from speculab.bench.settings import BenchConfig
from speculab.jsonl import read_records
from speculab.methods import RENAMED, MethodSpec, method

FLAGS = {  # a BenchConfig field -> the flags that set it, for the error that names them
    "methods": "--methods/--policy",
    "batch_sizes": "--batch-sizes",
    "contexts": "--contexts",
    "context_batch_sizes": "--contexts",
    "acceptance_pass": "--acceptance-pass/--no-acceptance-pass",
    "num_prompts": "--num-prompts",
    "max_tokens": "--max-tokens",
    "repeats": "--repeats",
    "temperature": "--temperature",
    "seed": "--seed",
    "sampling_verify": "--sampling-verify",
    "workload": "--workload",
    "profile": "--quick/--full",
    "time_limit_s": "--num-prompts",
    "dtype": "--dtype",
    "kv_dtype": "--kv-dtype",
    "model": "--model",
    "prompt_cache": "--prompt-cache/--no-prompt-cache",
    "endpoints": "--endpoint/--baseline-endpoint/--label/--served-model",
    "engines": "--engine",
    "tp": "--tp",
}


def recorded_config(out: Path, api_key: str | None = None) -> BenchConfig:
    """The settings of the run in ``out`` (its last run record), with ``api_key`` for its endpoints (never recorded)."""
    from speculab.bench.over_http.endpoint import Endpoint

    results = out / "results.jsonl"
    runs = [r for r in read_records(results) if r.get("kind") == "run"]
    if not runs:
        raise ValueError(f"--resume: {results} holds no run to resume; start one without --resume")
    config = runs[-1]["config"]
    if "method_params" not in config:
        raise ValueError(f"--resume: {results} was written by an older speculab that did not record its methods' settings")
    known = {f.name for f in fields(BenchConfig)} - {"methods", "endpoints"}
    values = {k: v for k, v in config.items() if k in known}
    if "time_budget_s" in config:  # the name of earlier versions
        values.setdefault("time_limit_s", config["time_budget_s"])
    methods = tuple(_recorded_spec(p, results) for p in config["method_params"].values())
    endpoints = tuple(
        Endpoint(e["url"], e.get("label"), api_key, e.get("served_model"), e.get("baseline", False)) for e in config.get("endpoints", [])
    )
    values["batch_sizes"] = tuple(values["batch_sizes"])
    values["contexts"] = tuple(values.get("contexts", (None,)))  # a run written before contexts: the workload's own
    values["context_batch_sizes"] = {k: tuple(v) for k, v in values.get("context_batch_sizes", {}).items()}
    values["engines"] = tuple(values.get("engines", ("speculab",)))
    return BenchConfig(methods=methods, endpoints=endpoints, **values)


def _recorded_spec(recorded: dict, results: Path) -> MethodSpec:
    """A method as the run recorded it; one whose parameters this speculab no longer has (an earlier version's
    ``batch_budget``, now the policy ``shared:B``) is refused: its remaining cells would run something else under its
    label."""
    params = {k: v for k, v in recorded.items() if k != "name"}
    gone = sorted(set(params) - set(method(recorded["name"]).defaults))
    if gone:
        raise ValueError(
            f"--resume: {results} was written by an earlier speculab whose {recorded['name']} took {', '.join(gone)} "
            f"({'; '.join(f'{k} is now {RENAMED[k]}' for k in gone if k in RENAMED) or 'gone since'}); start a new --out"
        )
    return MethodSpec(recorded["name"], params)


def refuse_contradictions(given: BenchConfig, recorded: BenchConfig, out: Path, flags: dict[str, str] = FLAGS) -> None:
    """A flag whose value differs from the recorded run's (in any setting a figure depends on) is refused, naming the
    flag (``flags``: the command's names for each setting) and both values."""
    mine, theirs = given.measured(), recorded.measured()
    for field in mine:
        if mine[field] == theirs.get(field):
            continue
        flag = flags.get(field, "--" + field.replace("_", "-"))
        raise ValueError(
            f"--resume: {flag} gives {field}={_shown(mine.get(field))}, but the run in {out} was started with "
            f"{_shown(theirs.get(field))}; drop the flag to continue that run, or pass another --out"
        )


def _shown(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
