"""``speculab tune``: a method's draft cap per batch size, chosen from measurements on the running machine.

On speculab's own engine: ``sweep.py`` runs the engine with a method at each batch size while the draft cap takes
turns step by step; ``measure.py`` orders the runs (warm-up, sweep, check); ``cost_model.py`` turns the steps into
each (batch size, cap)'s step time, drafting time and tokens a step, and picks per batch size the smallest cap within
one standard error of the best prediction; ``run.py`` is the order (a batch size the check measures below plain
decoding goes to plain decoding), and ``speculative/policy_store.py`` keeps the result per machine, model and
method, where ``--policy auto`` finds it; ``engines.py`` says that choice in vLLM's and SGLang's settings, as derived
from speculab's costs, not measured on them.

On vLLM (``--engine vllm``): ``on_vllm.py`` launches the real engine once per draft length and measures it at every
batch size, ``schedule.py`` chooses and checks, and the schedule is relaunched as vLLM's own setting.

``cli.py`` is the command and ``report.py`` its tables. Does not know: how proposers draft (only
``ProposeState.max_draft_nodes``, the policy's cap).
"""
