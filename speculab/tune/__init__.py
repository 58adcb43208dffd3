"""``speculab tune``: a cost model of speculation measured on the running machine, and the policy it chooses.

``sweep.py`` runs the engine with a method at each batch size while the draft cap takes turns step by step;
``cost_model.py`` turns those steps into each (batch size, cap)'s step time, drafting time and tokens a step, and
picks the cap with the most predicted tok/s; ``speculab/tuned_policies.py`` keeps the result per machine, model and method, where
``--policy auto`` finds it; ``engines.py`` says the same choice in vLLM's and SGLang's settings; ``cli.py`` is the
command. Does not know: how proposers draft (only ``ProposeState.max_draft_nodes``, the policy's cap).
"""
