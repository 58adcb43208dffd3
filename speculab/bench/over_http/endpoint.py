"""``speculab bench --endpoint``: the workload against any OpenAI-compatible server, one cell per batch size.

Knows: an endpoint's identity (``/v1/models``: the served model; ``/version``: the engine, its
version, and for ``speculab serve`` the method and the command line), sending the workload's
chat prompts as streaming ``/v1/chat/completions`` with B requests in flight at once until the
prompts run out (concurrency = batch size, as ``vllm bench serve --max-concurrency``), and the
per-request latencies with ``vllm bench serve``'s definitions: TTFT from sending a request to its
first content; ITL between consecutive content chunks; TPOT = (E2EL − TTFT) / (output tokens − 1);
E2EL from sending to the last chunk. Acceptance comes from ``/metrics`` deltas around the cell, and
by language from per-response stats where the server gives them (``server_stats.py``).

Every request is bounded in time (``request_timeout``) and their number is the workload's;
nothing is retried.

Does not know: the report, or how in-process cells are measured (``runner.py``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx
from httpx_sse import aconnect_sse
from tqdm import tqdm

from speculab.bench.agreement import prefix_agreement
from speculab.bench.latency import percentile
from speculab.bench.over_http.server_stats import ResponseSpec, SpecCounters, parse_spec_counters, response_spec
from speculab.bench.workload import WorkloadItem
from speculab.redact import redact_command


@dataclass(frozen=True)
class Endpoint:
    url: str  # the server's root (http://127.0.0.1:8000); a trailing /v1 is accepted
    label: str | None = None
    api_key: str | None = None
    served_model: str | None = None
    baseline: bool = False  # this endpoint's cells are its engine's baseline

    @property
    def root(self) -> str:
        url = self.url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class EndpointInfo:
    model: str
    engine: str
    engine_version: str | None
    method: str
    label: str
    command: str | None


async def probe(endpoint: Endpoint, client: httpx.AsyncClient) -> EndpointInfo:
    """Who serves at ``endpoint``: clear errors for a server that is down, refuses the key, or lacks the model."""
    try:
        models = await client.get(f"{endpoint.root}/v1/models", headers=endpoint.headers)
    except httpx.HTTPError as err:
        raise ValueError(f"{endpoint.root}: no OpenAI-compatible server answers there ({type(err).__name__}: {err})") from None
    if models.status_code == 401:
        raise ValueError(f"{endpoint.root}: the server wants an API key (--api-key)")
    models.raise_for_status()
    data = models.json().get("data") or []
    ids = [m["id"] for m in data]
    model = endpoint.served_model or (ids[0] if ids else None)
    if model is None or model not in ids:
        raise ValueError(f"{endpoint.root}: serves {ids}, not {endpoint.served_model!r} (--served-model)")
    entry = next(m for m in data if m["id"] == model)
    version = await client.get(f"{endpoint.root}/version")
    about = version.json() if version.status_code == 200 else {}
    engine = about.get("engine") or entry.get("owned_by") or "unknown"
    own = entry.get("speculab") or {}
    method = "baseline" if endpoint.baseline else about.get("method") or own.get("method") or "endpoint"
    host = urlparse(endpoint.root).netloc
    label = endpoint.label or f"{engine}:{about.get('label') or own.get('label') or method}@{host}"
    return EndpointInfo(model, engine, about.get("version"), method, label, redact_command(about.get("command")))


def probe_all(endpoints) -> dict[Endpoint, EndpointInfo]:
    """Each endpoint's identity, in order; two endpoints with one label are refused."""

    async def probe_each():
        async with httpx.AsyncClient(timeout=30.0) as client:
            return [await probe(e, client) for e in endpoints]

    infos = asyncio.run(probe_each()) if endpoints else []
    labels = [i.label for i in infos]
    if len(set(labels)) != len(labels):
        raise ValueError(f"two endpoints share a label: {labels}; give each its own --label")
    return dict(zip(endpoints, infos))


async def scrape(endpoint: Endpoint, client: httpx.AsyncClient) -> SpecCounters:
    response = await client.get(f"{endpoint.root}/metrics")
    return parse_spec_counters(response.text) if response.status_code == 200 else SpecCounters()


@dataclass
class RequestResult:
    domain: str
    text: str = ""
    ok: bool = False
    error: str | None = None
    output_tokens: int = 0
    ttft: float | None = None
    e2el: float | None = None
    itl: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    spec: ResponseSpec | None = None
    start: float = 0.0
    end: float = 0.0
    queued: float = 0.0  # waiting in the client for one of the batch size's places


async def _one(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    info: EndpointInfo,
    item: WorkloadItem,
    body: dict,
    gate: asyncio.Semaphore,
    timeout: float,
    scrape_each: bool = False,
) -> RequestResult:
    """One streaming chat request; a failure is recorded in the result, never raised. With ``scrape_each`` (batch 1:
    nothing else runs meanwhile) ``/metrics`` is read around it, outside its timings, and a server that returns no
    per-response stats (vLLM) still gets per-request figures, hence acceptance by language."""
    result = RequestResult(item.domain)
    created = time.perf_counter()
    async with gate:  # TTFT counts from here: the request is sent into a free place, not queued in the client
        before = await scrape(endpoint, client) if scrape_each else None
        result.start = last = time.perf_counter()
        result.queued = result.start - created
        chunks, final = [], {}
        try:
            async with (
                asyncio.timeout(timeout),
                aconnect_sse(
                    client,
                    "POST",
                    f"{endpoint.root}/v1/chat/completions",
                    json=body | {"model": info.model, "messages": item.message_dicts()},
                    headers=endpoint.headers,
                ) as source,
            ):
                if source.response.status_code != 200:
                    await source.response.aread()
                    raise RuntimeError(f"HTTP {source.response.status_code}: {source.response.text[:300]}")
                async for event in source.aiter_sse():
                    if event.data == "[DONE]":
                        break
                    data = json.loads(event.data)
                    if "error" in data:
                        raise RuntimeError(str(data["error"]))
                    now = time.perf_counter()
                    for choice in data.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content") or ""
                        if piece:
                            if result.ttft is None:
                                result.ttft = now - result.start
                            else:
                                result.itl.append(now - last)
                            last = now
                            chunks.append(piece)
                        result.finish_reason = choice.get("finish_reason") or result.finish_reason
                    if data.get("usage"):
                        result.output_tokens = int(data["usage"].get("completion_tokens") or 0)
                    if data.get("metrics") or data.get("meta_info") or data.get("sglext"):
                        final = data
            result.ok = True
        except (httpx.HTTPError, RuntimeError, TimeoutError, json.JSONDecodeError) as err:
            result.error = f"{type(err).__name__}: {err}"
        result.end = time.perf_counter()
        result.e2el = result.end - result.start
        result.text = "".join(chunks)
        result.spec = response_spec(final, result.output_tokens) if final else None
        if before is not None and result.spec is None and result.ok:
            result.spec = _spec_from_counters(await scrape(endpoint, client) - before)
    return result


def _spec_from_counters(delta: SpecCounters) -> ResponseSpec | None:
    figures = delta.figures()
    if not delta.present or not figures.get("steps"):
        return None
    return ResponseSpec(figures["steps"], figures["accepted_tokens"], figures["draft_tokens"])


def _summary(values: list[float], name: str) -> dict:
    """vllm bench serve's mean/median/std/p99 fields in milliseconds."""
    ms = [v * 1000 for v in values]
    if not ms:
        return {f"{k}_{name}_ms": None for k in ("mean", "median", "std", "p99")}
    return {
        f"mean_{name}_ms": statistics.fmean(ms),
        f"median_{name}_ms": statistics.median(ms),
        f"std_{name}_ms": statistics.pstdev(ms),
        f"p99_{name}_ms": percentile(ms, 0.99),
    }


async def run_requests(
    endpoint: Endpoint, info: EndpointInfo, items: list[WorkloadItem], batch_size: int, bodies: list[dict], timeout: float, bar: tqdm | None
) -> tuple[list[RequestResult], float, SpecCounters]:
    """Every item once, ``batch_size`` in flight; returns the results (item order), the wall time and the counter delta."""
    limits = httpx.Limits(max_connections=batch_size + 4, max_keepalive_connections=batch_size + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0), limits=limits) as client:
        before = await scrape(endpoint, client)
        gate = asyncio.Semaphore(batch_size)
        start = time.perf_counter()

        async def tracked(item, body):
            r = await _one(client, endpoint, info, item, body, gate, timeout, scrape_each=batch_size == 1)
            if bar is not None:
                bar.update(r.output_tokens)
            return r

        results = await asyncio.gather(*(tracked(item, body) for item, body in zip(items, bodies)))
        wall = time.perf_counter() - start
        delta = await scrape(endpoint, client) - before
    return list(results), wall, delta


def cell_figures(results: list[RequestResult], wall: float, counters: SpecCounters) -> dict:
    """The cell's fields: vllm bench serve's names, the in-process cell's names, and acceptance."""
    done = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in done)
    tpot = [(r.e2el - r.ttft) / (r.output_tokens - 1) for r in done if r.ttft is not None and r.output_tokens > 1]
    ttft = [r.ttft for r in done if r.ttft is not None]
    itl = [x for r in done for x in r.itl]
    e2el = [r.e2el for r in done]
    figures = {
        "completed": len(done),
        "failed": len(results) - len(done),
        "errors": [r.error for r in results if r.error][:5],
        "duration": wall,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / wall if wall else None,
        "output_throughput": out_tokens / wall if wall else None,
        **_summary(ttft, "ttft"),
        **_summary(tpot, "tpot"),
        **_summary(itl, "itl"),
        **_summary(e2el, "e2el"),
    }
    per_request = [
        (r.output_tokens - 1) / (r.e2el - r.ttft) for r in done if r.ttft is not None and r.output_tokens > 1 and r.e2el > r.ttft
    ]
    figures |= {"tok_s_per_request": statistics.fmean(per_request) if per_request else None}
    for name, values in (("ttft", ttft), ("queue", [r.queued for r in done]), ("tpot", tpot), ("itl", itl)):
        figures[f"{name}_p50_s"] = percentile(values, 0.5)  # the same definition as the in-process cells'
        figures[f"{name}_p99_s"] = percentile(values, 0.99)
    return figures | _acceptance(done, counters)


def _acceptance(done: list[RequestResult], counters: SpecCounters) -> dict:
    """Overall from /metrics deltas (or summed per-response stats); by language from per-response stats."""
    overall = counters.figures()
    by_domain: dict[str, list[ResponseSpec]] = {}
    for r in done:
        if r.spec is not None:
            by_domain.setdefault(r.domain, []).append(r.spec)
    every = [s for specs in by_domain.values() for s in specs]
    if not counters.present and every:  # exact per-response figures beat SGLang's approximate counters
        overall |= _from_responses(every)
    source = "metrics" if counters.present else "responses" if every else "metrics (tau only)" if overall["tau"] else None
    return overall | {
        "acceptance_source": source,
        "acceptance_by_domain": {d: _from_responses(s)["acceptance_rate"] for d, s in sorted(by_domain.items())},
        "tau_by_domain": {d: _from_responses(s)["tau"] for d, s in sorted(by_domain.items())},
    }


def _from_responses(specs: list[ResponseSpec]) -> dict:
    steps, accepted = sum(s.steps for s in specs), sum(s.accepted for s in specs)
    drafted = sum(s.drafted for s in specs) if all(s.drafted is not None for s in specs) else None
    return {
        "tau": (steps + accepted) / steps if steps else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "steps": steps,
        "accepted_tokens": accepted,
        "draft_tokens": drafted,
    }


@dataclass(frozen=True)
class Pass:
    """One pass over a cell's items: its output tok/s, the cell figures it gives, each request's result."""

    tok_s: float
    figures: dict
    results: list[RequestResult]


def measure_pass(endpoint: Endpoint, info: EndpointInfo, items: list[WorkloadItem], batch_size: int, cfg, bar: tqdm | None) -> Pass:
    """Every item once, ``batch_size`` in flight, each with its fixed seed."""
    base = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": cfg.max_tokens, "temperature": cfg.temperature}
    if info.engine == "sglang":  # SGLang returns per-response speculation only when asked
        base["return_spec_tokens_details"] = True
    bodies = [base | {"seed": cfg.seed + i} for i in range(len(items))]
    results, wall, delta = asyncio.run(run_requests(endpoint, info, items, batch_size, bodies, cfg.request_timeout, bar))
    figures = cell_figures(results, wall, delta)
    return Pass(figures["output_throughput"] or 0.0, figures, results)


def measure_endpoint_cell(
    endpoint: Endpoint, info: EndpointInfo, items: list[WorkloadItem], batch_size: int, cfg, reference: list[str] | None, bar: tqdm | None
) -> dict:
    """One cell: ``cfg.repeats`` passes over the items, one after another (``endpoint_cell``)."""
    passes = [measure_pass(endpoint, info, items, batch_size, cfg, bar) for _ in range(cfg.repeats)]
    return endpoint_cell(endpoint, info, items, batch_size, cfg, reference, passes)


def endpoint_cell(
    endpoint: Endpoint, info: EndpointInfo, items: list[WorkloadItem], batch_size: int, cfg, reference: list[str] | None, passes: list[Pass]
) -> dict:
    """A cell's record from its passes: the median pass's figures, every pass's tok/s, greedy agreement with
    ``reference`` (its engine's baseline texts at this batch size) at temperature 0."""
    median = sorted(passes, key=lambda p: p.tok_s)[len(passes) // 2]
    tok_s, figures, results = median.tok_s, median.figures, median.results
    texts = [r.text for r in results]
    greedy = cfg.temperature == 0 and reference is not None
    return {
        "kind": "cell",
        "transport": "http",
        "method": info.method,
        "label": info.label,
        "engine": info.engine,
        "engine_version": info.engine_version,
        "endpoint": endpoint.root,
        "served_model": info.model,
        "server_command": info.command,
        "params": {},
        "batch_size": batch_size,
        "num_prompts": len(items),
        "repeats": len(passes),
        "output_tokens": figures["total_output_tokens"],
        "wall_s": figures["duration"],
        "tok_s": tok_s,
        "tok_s_repeats": sorted(p.tok_s for p in passes),
        **figures,
        "greedy_identical": (texts == reference) if greedy else None,
        "agreement": prefix_agreement(texts, reference) if greedy else None,
        "prompt_cache": False,
        "stopped": sum(r.finish_reason == "stop" for r in results),
        "output_texts": texts,
    }
