"""``speculab serve``: the engine behind an OpenAI-compatible server that looks like vLLM from outside.

``protocol.py`` (request bodies), ``text.py`` (detokenization, stop strings), ``worker.py`` (the
engine's thread, continuous batching), ``metrics.py`` (Prometheus, vLLM's names), ``app.py`` (the
routes), ``cli.py`` (the command).
"""
