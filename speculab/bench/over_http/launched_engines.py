"""``speculab bench --engine vllm``: the same cells on a real engine, one server launch per method.

Knows: the order (the engine's baseline first: it is the reference for greedy agreement), one
launch per method through ``speculab.launch`` (drafters exported into ``OUT/servers``, each
server's log beside them, stopped after its cells or on Ctrl-C), a short warm-up request before
timing (every prompt, when the run shares prefills: the engine's prefix cache then holds them), the cells themselves (``endpoint.measure_endpoint_cell``), and, at temperature 0, each
divergence from the engine's own baseline checked for a near-tie with the target
(``divergence.py``).

Does not know: how an engine's flags are chosen (``speculab.launch``) or the report.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from speculab.bench.agreement import prefix_agreement
from speculab.bench.divergence import divergence_fields, divergences
from speculab.bench.over_http.endpoint import Endpoint, measure_endpoint_cell, probe_all, run_requests
from speculab.bench.settings import RunContext
from speculab.launch.prepare import prepare
from speculab.launch.server import EngineServer
from speculab.methods import MethodSpec
from speculab.models.embedded import ensure_embedded_model
from speculab.runtime import default_dtype, load


def engine_label(engine: str, spec: MethodSpec) -> str:
    return f"{engine}:{spec.label}"


def peer_dtype(cfg, target: Path) -> str:
    """The dtype a launched engine runs in: the one speculab's own cells run in (``--dtype``, else speculab's pick
    for the target), so that both sides' greedy outputs and acceptance are comparable token for token."""
    return cfg.dtype or default_dtype(model_path=target)


def check_plans(engines: list[str], cfg, target: Path, out: Path) -> None:
    """Every method's command for every launched engine, written before anything runs: a method the installed
    engine version cannot run is an error now, not after the in-process cells."""
    dtype = peer_dtype(cfg, target)
    for engine in engines:
        for spec in cfg.methods:
            prepare(engine, spec, target, out / "servers", port=cfg.engine_port, python=cfg.engine_python, dtype=dtype, print_only=True)


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


def measure_engine(engine: str, run: RunContext, items, reference: ReferenceModel, speculab_texts: dict[int, list[str]]) -> None:
    """Every method of the run on ``engine``, each batch size the plan has left, one server launch per method.
    ``speculab_texts``: speculab's own baseline outputs per batch size, which the engine's baseline is compared with."""
    cfg = run.cfg
    texts: dict[int, list[str]] = {}  # batch size -> the engine's baseline outputs
    for spec in sorted(cfg.methods, key=lambda s: s.name != "baseline"):
        label = engine_label(engine, spec)
        sizes = [b for b in cfg.batch_sizes if run.state.pending(label, b)]
        if not sizes:
            continue
        servers = run.out / "servers"
        plan = prepare(
            engine, spec, reference.path, servers, port=cfg.engine_port, python=cfg.engine_python, dtype=peer_dtype(cfg, reference.path)
        )
        run.show(f"starting {label}")
        with EngineServer(plan, servers / f"{engine}-{spec.name}.log", progress=run.progress):
            endpoint = Endpoint(plan.url, label, served_model=plan.served_name, baseline=spec.name == "baseline")
            info = dataclasses.replace(
                probe_all([endpoint])[endpoint], method=spec.name, engine=engine, engine_version=str(plan.version), command=plan.shell()
            )
            _warm_up(endpoint, info, items, cfg)
            for batch_size in sizes:
                run.show(f"{label} b{batch_size}")
                cell = measure_endpoint_cell(endpoint, info, items, batch_size, cfg, texts.get(batch_size), run.bar)
                cell |= {"params": spec.params, "launch": plan.record()}
                if spec.name == "baseline":
                    texts[batch_size] = cell["output_texts"]
                    cell |= _against_speculab(cell, speculab_texts.get(batch_size), reference, items, cfg)
                elif cell["greedy_identical"] is False:
                    cell |= divergence_fields(
                        divergences(reference(), _prompt_ids(reference(), items), cell["output_texts"], texts[batch_size])
                    )
                run.write(cell)


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


def _prompt_ids(loaded, items) -> list[list[int]]:
    return [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
