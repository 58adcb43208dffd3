"""Real engines: vLLM and SGLang launched with speculab's methods, and drafters exported for them.

``command.py`` (a command with a reason per flag), ``vllm.py`` / ``sglang.py`` (each engine's flags
by version), ``export.py`` (drafters in the engines' layouts), ``prepare.py`` (engine + method -> command), ``server.py`` (the process),
``environments.py`` (the peers' own virtual environments, made on first use: vLLM's here, llama.cpp's for
``speculab compare``), ``cli.py``.
"""
