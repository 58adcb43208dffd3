"""The speculation policy: the draft budget a request may spend at a given load, and everything that follows from it.

One concept, one home. A *draft budget* is the most draft nodes a request may have in a step (a chain's nodes are its
tokens; 0: plain decoding). A *load* is what the budget is keyed on: the running batch's size and the request's context
length. A *policy* maps each load to a budget, and may shrink a request whose own drafts keep being rejected.

- ``table.py``: the type (``SpeculationPolicy``, ``Load``), its file format and the named policies (``shared:B``,
  ``plain_above:N``).
- ``choice.py``: the choosing rule, the smallest budget the measurement cannot tell from the best.
- ``engines.py``: the policy in vLLM's and SGLang's settings (and the conversion of a budget to vLLM's k), or a clear
  refusal where an engine cannot express it.
- ``store.py``: where ``speculab tune`` keeps the policy it measured, and where ``policy=auto`` finds it.

What applies a policy to drafts is a proposer (``speculative/policy_proposer.py``); what measures one is
``speculab tune``.
"""
