"""``speculab bench --engine vllm``: the same cells on a real engine, one server launch per method.

Knows: the order (the engine's baseline first: it is the reference for greedy agreement), one
launch per method through ``speculab.launch`` (drafters exported into ``OUT/servers``, each
server's log beside them, stopped after its cells or on Ctrl-C), a short warm-up request before
timing (every prompt, when the run shares prefills: the engine's prefix cache then holds them) and one short untimed
pass at each batch size, the cells themselves (``endpoint.measure_pass``, ``write_cell``), and, at temperature 0, each
divergence from the engine's own baseline checked for a near-tie with the target
(``divergence.py``).

Does not know: how an engine's flags are chosen (``speculab.launch``) or the report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

from speculab.bench.agreement import prefix_agreement
from speculab.bench.divergence import divergence_fields, divergences
from speculab.bench.method_memory import memory_estimate
from speculab.bench.over_http.endpoint import Endpoint, EndpointInfo, Pass, endpoint_cell, measure_pass, probe_all, run_requests
from speculab.bench.over_http.engine_room import EngineRoom, engine_room
from speculab.bench.over_http.server_stats import reported_kv_tokens
from speculab.bench.settings import RunContext
from speculab.free_memory import available_bytes
from speculab.launch.command import DEFAULT_ROOM, LaunchCommand, ServingRoom
from speculab.launch.prepare import prepare
from speculab.launch.server import EngineServer
from speculab.methods import MethodSpec
from speculab.models.config import ModelConfig
from speculab.models.embedded import ensure_embedded_model
from speculab.models.memory import machine_memory_bytes
from speculab.models.tokenizer import Tokenizer
from speculab.runtime import DTYPES, default_dtype, load


def engine_label(engine: str, spec: MethodSpec) -> str:
    return f"{engine}:{spec.label}"


def peer_dtype(cfg, target: Path) -> str:
    """The dtype a launched engine runs in: the one speculab's own cells run in (``--dtype``, else speculab's pick
    for the target), so that both sides' greedy outputs and acceptance are comparable token for token."""
    return cfg.dtype or default_dtype(model_path=target)


def check_commands(engines: list[str], cfg, target: Path, out: Path) -> None:
    """Every method's command for every launched engine, written before anything runs: a method the installed
    engine version cannot run is an error now, not after the in-process cells."""
    dtype = peer_dtype(cfg, target)
    for engine in engines:
        for spec in cfg.methods:
            if spec.method.remembers and spec.params.get(spec.method.remembers):
                key = spec.method.remembers
                raise ValueError(
                    f"{spec.label} on {engine}: a launched server keeps earlier requests' outputs ({key}) across the run's "
                    "passes, which send the same prompts again, so it would draft the answers it gave before (vLLM's "
                    f"suffix accepted 93% so, against 34% fresh); give {spec.name}:{key}=0 to compare it with speculab's"
                )
            prepare(
                engine,
                spec,
                target,
                out / "servers",
                port=cfg.engine_port,
                tp=cfg.tp,
                python=cfg.engine_python,
                dtype=dtype,
                print_only=True,
            )


class ReferenceModel:
    """The target in speculab's code, loaded on first use: launched engines' divergences are checked on it."""

    def __init__(self, model: str | None, dtype: str | None, loaded=None):
        """``loaded``: the target the in-process cells loaded already (runtime.LoadedModel), if any."""
        self.model, self.dtype, self.loaded = model, dtype, loaded

    @property
    def path(self) -> Path:
        if self.loaded is not None:
            return Path(self.loaded.path)
        return Path(self.model) if self.model else ensure_embedded_model()

    def __call__(self):
        if self.loaded is None:
            self.loaded = load(self.model, self.dtype)
        return self.loaded

    def prompt_tokens(self, items) -> list[int]:
        """Each of ``items``' prompt tokens, by the target's tokenizer (the model itself is not loaded for it)."""
        tokenizer = self.loaded.tokenizer if self.loaded is not None else Tokenizer(self.path)
        return [len(tokenizer.encode_chat(item.message_dicts())) for item in items]


@dataclass(frozen=True)
class Served:
    """A launched engine serving one method, probed and warmed up: what its cells need."""

    spec: MethodSpec
    endpoint: Endpoint
    info: EndpointInfo
    command: LaunchCommand
    kv_tokens: int | None  # the KV capacity the engine reports (vLLM's cache_config_info), None when it reports none
    process: EngineServer  # the running server: paused and resumed when servers take turns (server_turns.py)

    @property
    def label(self) -> str:
        return self.endpoint.label

    def fields(self) -> dict:
        """What every cell of this server carries besides its figures."""
        return {"params": self.spec.params, "launch": self.command.record(), "engine_kv_tokens": self.kv_tokens}


@contextmanager
def served(
    engine: str, spec: MethodSpec, run: RunContext, reference: ReferenceModel, items, port: int, room: ServingRoom = DEFAULT_ROOM
) -> Iterator[Served]:
    """``spec`` on ``engine`` at ``port`` with ``room`` (its positions and KV cache): launched (its log in
    ``OUT/servers``), probed, every prompt sent once (``_warm_up``); stopped on leaving, Ctrl-C included."""
    cfg, servers, label = run.cfg, run.out / "servers", engine_label(engine, spec)
    dtype = peer_dtype(cfg, reference.path)
    command = prepare(engine, spec, reference.path, servers, port=port, tp=cfg.tp, python=cfg.engine_python, dtype=dtype, room=room)
    run.show(f"starting {label}")
    with EngineServer(command, servers / f"{engine}-{_slug(spec.label)}.log", progress=run.progress) as process:
        endpoint = Endpoint(command.url, label, served_model=command.served_name, baseline=spec.name == "baseline")
        info = dataclasses.replace(
            probe_all([endpoint])[endpoint], method=spec.name, engine=engine, engine_version=str(command.version), command=command.shell()
        )
        _warm_up(endpoint, info, items, cfg)
        yield Served(spec, endpoint, info, command, reported_kv_tokens(httpx.get(f"{command.url}/metrics", timeout=30).text), process)


def measure_engine(
    engine: str,
    run: RunContext,
    items,
    reference: ReferenceModel,
    speculab_texts: dict[int, list[str]],
    *,
    batch_sizes: tuple[int, ...] | None = None,
    prompt_tokens: list[int] | None = None,
    baseline_texts: dict[int, list[str]] | None = None,
    cell_fields: dict | None = None,
) -> None:
    """Every method of the run on ``engine``, each of ``batch_sizes`` (None: the run's) it has left, one server launch
    per method, given the room its requests need (``engine_room``; a batch size the memory free cannot hold is recorded
    as skipped). ``speculab_texts``: speculab's own baseline outputs per batch size, which the engine's baseline is
    compared with; ``prompt_tokens``: each of ``items``' prompt tokens where the run counted them (None: counted here);
    ``baseline_texts``: the engine's baseline outputs this run measured already (a resumed run, a later call);
    ``cell_fields``: what every cell records besides (its context's prompt tokens)."""
    cfg = run.cfg
    texts: dict[int, list[str]] = dict(baseline_texts or {})  # batch size -> the engine's baseline outputs
    prompt_tokens = prompt_tokens or reference.prompt_tokens(items)
    for spec in sorted(cfg.methods, key=lambda s: s.name != "baseline"):
        label = engine_label(engine, spec)
        pending = [b for b in batch_sizes or cfg.batch_sizes if run.pending(label, b)]
        if not pending:
            continue
        fit = launch_room(spec, cfg, reference, prompt_tokens, pending)
        for record in fit.skipped_cells(label, spec.name):
            run.write(record)
        if not fit.batch_sizes:
            continue
        with served(engine, spec, run, reference, items, cfg.engine_port, fit.room) as server:
            for batch_size in fit.batch_sizes:
                run.show(f"{server.label} b{batch_size}")
                warm_batch(server, items, batch_size, cfg)
                passes = [measure_pass(server.endpoint, server.info, items, batch_size, cfg, run.bar) for _ in range(cfg.repeats)]
                write_cell(
                    run,
                    server,
                    items=items,
                    batch_size=batch_size,
                    passes=passes,
                    texts=texts,
                    reference=reference,
                    speculab_texts=speculab_texts,
                    extra=cell_fields,
                )


def launch_room(spec: MethodSpec, cfg, reference: ReferenceModel, prompt_tokens: list[int], batch_sizes: list[int]) -> EngineRoom:
    """The room a launch of ``spec`` needs for ``batch_sizes`` of these prompts, against the memory free now."""
    target = ModelConfig.from_file(reference.path / "config.json")
    dtype_bytes = torch.finfo(DTYPES[peer_dtype(cfg, reference.path)]).bits // 8
    figures = memory_estimate(spec, target, dtype_bytes, machine_memory_bytes())
    return engine_room(figures, prompt_tokens, batch_sizes, cfg.max_tokens, available_bytes(), tp=cfg.tp)


def write_cell(
    run: RunContext,
    server: Served,
    *,
    items,
    batch_size: int,
    passes: list[Pass],
    texts: dict[int, list[str]],
    reference: ReferenceModel,
    speculab_texts: dict[int, list[str]],
    extra: dict | None = None,
) -> dict:
    """A launched server's cell from its passes and ``extra`` fields, written to the run: a baseline's outputs become
    ``texts[batch_size]`` (its engine's reference, compared with speculab's own), any other's divergences from them
    are checked."""
    cell = endpoint_cell(server.endpoint, server.info, items, batch_size, run.cfg, texts.get(batch_size), passes)
    cell |= server.fields() | (extra or {})
    if server.spec.name == "baseline":
        texts[batch_size] = cell["output_texts"]
        cell |= _against_speculab(cell, speculab_texts.get(batch_size), reference, items, run.cfg)
    else:
        cell |= divergences_from(cell, texts.get(batch_size), reference, items)
    run.write(cell)
    return cell


def divergences_from(cell: dict, reference_texts: list[str] | None, reference: ReferenceModel, items) -> dict:
    """Where a greedy cell's output parts from its engine's baseline, each divergence checked for a near-tie on the
    target (``divergence.py``); nothing when they agree or there is nothing to compare."""
    if cell.get("greedy_identical") is not False or reference_texts is None:
        return {}
    return divergence_fields(divergences(reference(), _prompt_ids(reference(), items), cell["output_texts"], reference_texts))


def _against_speculab(cell: dict, ours: list[str] | None, reference_model, items, cfg) -> dict:
    """The engine's plain greedy output against speculab's on the same prompts: the two engines agree, or part at
    near-ties only."""
    if ours is None or cfg.temperature != 0:
        return {}
    theirs = cell["output_texts"]
    found = divergences(reference_model(), _prompt_ids(reference_model(), items), theirs, ours)
    fields = divergence_fields(found)
    return {
        "identical_to_speculab": theirs == ours,
        "agreement_with_speculab": prefix_agreement(theirs, ours),
        "speculab_divergences": fields["divergences"],
        "speculab_divergences_near_ties": fields["all_near_ties"],
    }


def _warm_up(endpoint: Endpoint, info, items, cfg) -> None:
    """Each prompt once, one token, untimed: the first request's one-off costs stay out of the cells and, with
    ``prompt_cache``, the engine's prefix cache holds every prompt, as speculab's prompt cache does in-process."""
    body = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 1, "temperature": 0.0}
    warm = items if cfg.prompt_cache else items[:1]
    asyncio.run(run_requests(endpoint, info, warm, 1, [body] * len(warm), cfg.request_timeout, None))


WARM_TOKENS = 16  # the untimed pass at each batch size: enough steps to meet every batch shape the cell will


def warm_batch(server: Served, items, batch_size: int, cfg) -> None:
    """One short untimed pass at ``batch_size``: an engine's first steps at a new batch shape are slower (vLLM-CPU's
    first passes at batch 2 ran at half the speed of its later ones), a cost of starting, not of decoding."""
    tokens = min(WARM_TOKENS, cfg.max_tokens)
    body = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": tokens, "temperature": cfg.temperature}
    asyncio.run(run_requests(server.endpoint, server.info, items, batch_size, [body] * len(items), cfg.request_timeout, None))


def _slug(label: str) -> str:
    """A file name from a method label: ``ngram(num_speculative_tokens=2,…)`` -> ``ngram-num_speculative_tokens-2-…``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", label).strip("-")[:120]


def _prompt_ids(loaded, items) -> list[list[int]]:
    return [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
