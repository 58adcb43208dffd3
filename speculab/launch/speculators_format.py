"""EAGLE-3 heads in the ``speculators`` format (the vLLM project's PyPI ``speculators``): ``vllm serve FOLDER``.

Knows (read in speculators 0.9.0's ``Eagle3SpeculatorConfig`` and vLLM 0.32.0's ``transformers_utils/configs/
speculators/`` and ``maybe_override_with_speculators``):
- ``config.json`` has ``speculators_model_type: "eagle3"``, a ``speculators_config`` (the ``greedy`` proposal with
  ``speculative_tokens``: the chain vLLM drafts; the verifier by ``name_or_path``, which vLLM serves as the target:
  written absolute, as vLLM takes it verbatim and offline an id resolves nowhere), the draft layer as a
  ``transformer_layer_config`` (a Llama config of one layer), ``draft_vocab_size``, ``target_hidden_size``, the
  target layers whose states the head reads (``eagle_aux_hidden_state_layer_ids``, speculab's
  ``eagle3_feature_layers``) and the norm flags. ``norm_before_residual`` is written false: speculab's head adds the
  un-normed state to the residual, and vLLM's default for a missing flag is true. No top-level ``model_type``:
  vLLM parses the folder as a speculators config only without one.
- Tensors: speculab's ``midlayer.*`` become ``layers.0.*``; ``fc``, ``norm``, ``lm_head``, ``d2t`` and ``t2d`` keep
  their names (vLLM shares the target's embedding, as speculab does).
- EAGLE-1/2 heads and draft models have no speculators type that vLLM 0.32.0 loads (speculators dropped ``eagle``
  after 0.3.0; vLLM's table has eagle3, peagle, dflash, dflash2, dspark): refused, naming the layout that works.

Does not know: the older layouts (``export.py``), or how vLLM is started (``vllm.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from speculab.models.eagle3_head import eagle3_feature_layers
from speculab.models.loading import CheckpointError

SPECULATORS_VERSION = "0.9.0"  # the format's version written (and the package the tests check it with)
LAYER_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "rms_norm_eps",
    "rope_parameters",
    "max_position_embeddings",
    "hidden_act",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)


def refuse(kind: str) -> None:
    """EAGLE-1/2 heads and draft models: no speculators type vLLM loads."""
    raise ValueError(
        f"--format speculators: a {'draft model' if kind == 'draft' else 'EAGLE-1/2 head'} has no speculators type that vLLM "
        f"loads (speculators {SPECULATORS_VERSION} and vLLM 0.32.0 know eagle3, not eagle); export it without "
        "--format (vLLM's own layout, launched with --speculative-config)"
    )


def speculators_config(head: dict, verifier: Path, tokens: int) -> dict:
    """The speculators ``config.json`` of an EAGLE-3 head (its own config ``head``) for ``verifier``."""
    target = json.loads((verifier / "config.json").read_text())
    layer = {"model_type": "llama", **{k: head[k] for k in LAYER_KEYS if k in head}}
    layer |= {"num_hidden_layers": 1, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False}
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": tokens, "verifier_accept_k": 1, "accept_tolerance": 0.0}
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": str(verifier.resolve()), "architectures": target.get("architectures", ["LlamaForCausalLM"])},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": head["draft_vocab_size"],
        "target_hidden_size": head.get("target_hidden_size", head["hidden_size"]),
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "eagle_aux_hidden_state_layer_ids": list(eagle3_feature_layers(target["num_hidden_layers"])),
        "tie_word_embeddings": False,
        "dtype": head.get("torch_dtype", "bfloat16"),
    }


def write_speculators(source: Path, weights: Path, out: Path, verifier: Path, tokens: int) -> list[str]:
    """Write the head in ``source`` (its tensors in ``weights``) into ``out``; the changes made, in words."""
    if not (verifier / "config.json").exists():
        raise CheckpointError(f"--verifier {verifier}: no config.json there (the target the head drafts for)")
    if tokens < 1:
        raise ValueError(f"--num-speculative-tokens {tokens}: at least 1")
    head = json.loads((source / "config.json").read_text())
    tensors = {k.replace("midlayer.", "layers.0.", 1): v.contiguous() for k, v in load_file(weights).items()}
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(speculators_config(head, verifier, tokens), indent=2) + "\n")
    return [
        "tensors: midlayer.* renamed layers.0.* (the speculators names)",
        f"config: speculators eagle3, {tokens} speculative tokens, verifier {verifier.resolve()}",
    ]
