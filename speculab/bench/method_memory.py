"""A method's memory figures on the run's target: ``models.memory.estimate`` fed from the method's spec.

Knows: which drafter a spec loads (its kind, config, reduced vocabulary). Does not know: what memory is free
(``free_memory``) or how a run adapts to it (``memory_fit``, ``over_http/engine_room``).
"""

from __future__ import annotations

from speculab.methods import MethodSpec, drafter_path, spec_draft_vocab_size
from speculab.models.config import ModelConfig
from speculab.models.eagle_head import read_head_config
from speculab.models.memory import estimate


def memory_estimate(spec: MethodSpec, target: ModelConfig, dtype_bytes: int, device_bytes: int, kv_bytes: int | None = None) -> dict:
    """``memory.estimate`` for a method: its drafter's kind (its entry's ``memory_kind``), config and reduced vocabulary;
    ``kv_bytes`` per cached value (None: ``dtype_bytes``)."""
    kind, path = spec.method.memory_kind, drafter_path(spec)
    drafter_cfg, options = None, {}
    if kind == "draft":
        drafter_cfg = ModelConfig.from_file(path / "config.json")
    elif kind in ("eagle", "eagle3"):
        raw, drafter_cfg, _ = read_head_config(path)
        options = {"draft_vocab_size": raw["draft_vocab_size"]} if kind == "eagle3" and "draft_vocab_size" in raw else {}
    size = spec_draft_vocab_size(spec)
    if kind == "eagle3" and size is not None:  # the head's own rows, cut as it loads (at most that many)
        options = {"draft_vocab_size": min(size, options.get("draft_vocab_size", size))}
    elif size is not None:
        options = {"draft_vocab_size": size}  # the proposer's own copy of that many lm_head rows
    return estimate(target, kind, drafter_cfg, dtype_bytes, device_bytes, kv_dtype_bytes=kv_bytes, **options)
