"""The benchmark over HTTP: OpenAI-compatible servers measured with the study's workload.

``endpoint.py`` (the streaming client and one endpoint cell), ``server_stats.py`` (what vLLM and SGLang report of
their speculation, in speculab's terms), ``launched_engines.py`` (the cells of engines that ``speculab launch``
starts for ``speculab bench --engine vllm|sglang``).
"""
