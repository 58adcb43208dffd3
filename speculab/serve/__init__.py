"""``speculab serve``: the engine behind an OpenAI-compatible server that looks like vLLM from outside.

``protocol.py`` (request bodies), ``text.py`` (detokenization, stop strings), ``worker.py`` (the
engine's thread, continuous batching), ``metrics.py`` (Prometheus, vLLM's names), ``state.py`` (what
routes read, as dependencies), ``admission.py`` (a body to a queued request, or a 4xx), ``responses.py`` (JSON
and Server-Sent Events), ``routes.py`` (each route a named function), ``app.py`` (the application put
together), ``cli.py`` (the command).
"""
