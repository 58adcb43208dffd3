"""``speculab tune``: a method's speculation policy (its draft budget per batch size, and per context length with
``--contexts``), chosen from measurements on the running machine.

On speculab's own engine: ``sweep.py`` runs the engine with a method at each batch size while the draft budget takes
turns step by step; ``measure.py`` orders the runs (warm-up, sweep, check); ``cost_model.py`` turns the steps into
each (batch size, budget)'s step time, drafting time and tokens a step, and picks per batch size the budget the one
choosing rule picks (``policy/choice.py``); ``contexts.py`` builds each context's prompts as the benchmark does
and makes one policy of the contexts' choices; ``run.py`` is the order (a batch size the check measures below plain
decoding goes to plain decoding), and ``policy/store.py`` keeps the result per machine, model and method, where
``policy=auto`` finds it; ``engine_settings.py`` says that policy as ``speculab launch`` would run it on vLLM and
SGLang, derived from speculab's costs, not measured on them.

On vLLM (``--engine vllm``): ``on_vllm.py`` launches the real engine once per k (vLLM's draft length) and measures it
at every batch size, ``engine_choice.py`` chooses and checks, and the policy is relaunched in vLLM's own setting.

``cli.py`` is the command and ``report.py`` its tables. Does not know: how proposers draft (only
``ProposeState.draft_budgets``).
"""
