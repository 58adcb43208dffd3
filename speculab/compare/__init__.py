"""``speculab compare``: speculab beside its peers on the same prompt, each in its own environment.

``peers.py`` (the command: transformers' ``generate``, llama.cpp, the EAGLE reference code), ``llamacpp.py``
(llama.cpp through llama-cpp-python, one sequence or a batch), ``eagle_reference_runner.py`` (run inside the
EAGLE reference's environment).
"""
