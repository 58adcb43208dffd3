"""``speculab bench``: the study's matrix (methods × batch sizes on a coding workload) and its report.

``cli.py`` (the command), ``runner.py`` (the run: cells in-process, over HTTP, on launched engines, appended to
``results.jsonl``), ``workload.py`` and ``workload_files/`` (the prompts), ``budget.py`` (cells sized to a time
budget), ``latency.py``, ``agreement.py``, ``divergence.py`` (what a cell measures besides speed), ``memory.py``
(what each method costs in memory), ``testbed.py`` (the machine), ``report/`` (the report, from results alone),
``over_http/`` (servers measured over HTTP). ``speculab compare`` (speculab beside its peers) is ``speculab/compare/``.
"""
