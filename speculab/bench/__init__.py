"""``speculab bench``: the study's matrix (methods × batch sizes on a coding workload) and its report.

``cli.py`` (the command), ``runner.py`` (the run: cells in-process, over HTTP, on launched engines, appended to
``results.jsonl``), ``workload.py`` and ``workload_files/`` (the prompts), ``sizing.py`` (cells sized to a time
budget), ``latency.py``, ``agreement.py``, ``divergence.py`` (what a cell measures besides speed), ``settings.py`` (the
settings and the cells left), ``resume.py`` (a resumed run's recorded settings), ``in_process.py`` (cells in speculab's own process), ``results_store.py``, ``report/`` (the report, from results alone),
``over_http/`` (servers measured over HTTP). ``speculab compare`` (speculab beside its peers) is ``speculab/compare/``; the memory arithmetic,
``models/memory.py``; the machine's record, ``testbed.py``.
"""
