"""``/metrics``: the server's Prometheus metrics, under vLLM V1's names and meanings.

Knows: the metric families a dashboard or scraper built for vLLM reads
(requests running and waiting, prompt and generation tokens, finished
requests by reason, TTFT / inter-token / end-to-end / queue-time
histograms, and the speculative-decoding counters), each labelled with
``model_name`` and ``engine`` as vLLM does, and how a request's
:class:`SpecStats` feed them. Counters grow as tokens are produced, not
only when a request ends, so a scrape mid-run is current.

The speculative counters, in vLLM's terms:
- ``vllm:spec_decode_num_drafts_total``: verify steps that carried a draft;
- ``vllm:spec_decode_num_draft_tokens_total``: draft tokens that could be
  accepted: the chain length, or a tree's verified depth (the most it can
  give), so accepted / draft tokens is the acceptance rate for chains and trees
  alike; a tree's total node count is ``speculab:spec_decode_num_draft_nodes_total``;
- ``vllm:spec_decode_num_accepted_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}`` (position 0
  is the first draft token).

Does not know: HTTP (``prometheus_client`` writes the exposition) or the engine.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from speculab.speculative.stats import SpecStats

disable_created_metrics()  # as vLLM does: no *_created series beside each counter

# vLLM's buckets (seconds), so histograms line up with a vLLM dashboard's panels
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name, "engine": "0"}
        names = list(labels)

        def make(kind, name, doc, extra=(), **kw):
            metric = kind(name, doc, [*names, *extra], registry=self.registry, **kw)
            return metric if extra else metric.labels(**labels)

        self._labels = labels
        self._evicted_seen = 0
        self.running = make(Gauge, "vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = make(Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.prompt_tokens = make(Counter, "vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = make(Counter, "vllm:generation_tokens", "Number of generation tokens processed.")
        self.prefix_queries = make(Counter, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = make(Counter, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.prefix_bytes = make(Gauge, "speculab:prefix_cache_bytes", "Bytes the prompt cache holds (capped by --prefix-cache-gib).")
        self.prefix_evicted = make(Counter, "speculab:prefix_cache_evicted_prompts", "Cached prompts evicted, least recently used first.")
        self.success = make(Counter, "vllm:request_success", "Count of successfully processed requests.", ["finished_reason"])
        self.ttft = make(
            Histogram, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", buckets=TTFT_BUCKETS
        )
        self.itl = make(Histogram, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", buckets=ITL_BUCKETS)
        self.e2e = make(
            Histogram, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", buckets=REQUEST_BUCKETS
        )
        self.queue = make(
            Histogram, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", buckets=REQUEST_BUCKETS
        )
        self.drafts = make(Counter, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.draft_tokens = make(Counter, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.accepted = make(Counter, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        self.accepted_per_pos = make(
            Counter, "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", ["position"]
        )
        self.draft_nodes = make(
            Counter, "speculab:spec_decode_num_draft_nodes", "Draft tree nodes proposed (a chain counts its tokens; a tree all its nodes)."
        )

    def add_spec(self, delta: SpecStats) -> None:
        """Count what a request's verify steps since the last call drafted and accepted."""
        self.drafts.inc(delta.drafts)
        self.draft_tokens.inc(delta.drafted_depth)
        self.accepted.inc(delta.accepted_tokens)
        self.draft_nodes.inc(delta.draft_nodes)
        for position, count in enumerate(delta.accepted_per_position):
            if count:
                self.accepted_per_pos.labels(**self._labels, position=str(position)).inc(count)

    def prompt_cache(self, cache) -> None:
        """The prompt cache's bytes now, and the prompts it evicted since the last call."""
        self.prefix_bytes.set(cache.nbytes)
        self.prefix_evicted.inc(cache.evicted - self._evicted_seen)
        self._evicted_seen = cache.evicted

    def finished(self, reason: str) -> None:
        self.success.labels(**self._labels, finished_reason=reason).inc()
