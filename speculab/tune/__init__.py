"""``speculab tune``: a cost model of speculation measured on the running machine, and the policy it chooses.

``sweep.py`` runs the engine with a method at each batch size while the draft cap takes turns step by step;
``measure.py`` orders the runs (warm-up, sweep, check); ``cost_model.py`` turns the steps into each (batch size,
cap)'s step time, drafting time and tokens a step, and picks per batch size the smallest cap within one standard
error of the best prediction; ``speculative/policy_store.py`` keeps the result per machine, model and method,
beside the policy it stores, where ``--policy auto`` finds it; ``engines.py`` says the same choice in vLLM's and SGLang's settings; ``run.py`` is the
order, ``cli.py`` the command and ``report.py`` its table. Does not know: how proposers draft (only ``ProposeState.max_draft_nodes``, the policy's cap).
"""
