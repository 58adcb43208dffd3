#!/usr/bin/env python3
"""Run the EAGLE-1 reference implementation (PyPI ``eagle-llm==1.2.1``) on CPU.

Standalone: this file runs under the *reference* venv's python
(``/root/.cache/speculab/eagle-ref-venv``) and must not import speculab.
Its last stdout line is one JSON object::

    {"tok_s": median decode tok/s, "runs_tok_s": [...], "tau": ...,
     "new_tokens": N, "tokens": [...last run's N ids...], "timing": "decode-only",
     "transformers": "...", "eagle_llm": "1.2.1", ...extra fields}

Reference venv (what worked, torch CPU wheel comes from local disk)::

    python3 -m venv /root/.cache/speculab/eagle-ref-venv
    V=/root/.cache/speculab/eagle-ref-venv/bin/pip
    $V install torch==2.13.0
    $V install --no-deps eagle-llm==1.2.1
    $V install transformers==4.57.6     # brings tokenizers, safetensors, hf-hub, numpy

What the reference does (read from site-packages/eagle/model/*.py):

* ``EaModel.from_pretrained(base_model_path=, ea_model_path=, **kw)``; ``kw`` go
  to its own copy of the transformers-4.31 Llama (``modeling_llama_kv.py``,
  preallocated KV cache of ``max_position_embeddings`` slots).  No ``.cuda()``
  on this path: everything stays on CPU when no ``device_map`` is given.
* Generation: ``EaModel.ea_generate`` (a generator yielding ``input_ids`` after
  every verify step) / ``eagenerate``.  ``temperature=0.0`` -> greedy.  The tree
  is ``tree_choices`` (default ``mc_sim_7b_63``, 25 nodes + root, depth 5,
  draft top-k 10).  The *draft side* of the tree is hard-wired in
  ``ea_layer.init_tree()`` to ``mc_sim_7b_63``; for another tree this script
  also rebuilds ``ea_layer.tree_buffer``.
* The head loader uses ``load_state_dict(strict=True)`` and the head module owns
  an ``embed_tokens`` table, so the head checkpoint MUST contain
  ``embed_tokens.weight`` (published EAGLE-1 heads carry the frozen base
  embedding there).
* Draft features are the base model's final hidden states *after* the final
  RMSNorm; the draft sees ``input_ids[:, 1:]`` (token shifted by one) and its
  own positions start at 0.  The first draft layer has no input_layernorm.
* It reports no acceptance statistics.  This script counts target forward
  passes by wrapping ``tree_decoding`` (one tree-verify pass per step) and
  times prefill by wrapping ``initialize_tree`` (both looked up as globals of
  ``eagle.model.ea_model``), so no file in site-packages is edited.
  tau = tokens committed during decode / verify passes (= mean accept_length+1,
  i.e. accepted drafts plus the bonus/root token).
* ``model.eval()`` is required: the head module is created in training mode
  with ``gradient_checkpointing=True`` and then crashes in ``topK_genrate``.
* transformers: works with 4.57.6 (newest 4.x); 5.x fails in ``_init_rope``
  (``config.rope_scaling`` is now a dict without ``"type"``).

Monkeypatches applied here (none edit files):

1. RoPE base.  Both the target copy of Llama and the draft layer build
   ``LlamaRotaryEmbedding(head_dim, max_position_embeddings=...)`` without a
   base, i.e. theta is hard-coded to 10000 (fine for Vicuna/LLaMA-2, wrong for
   SmolLM2's 1e5).  After loading, every rotary module's ``inv_freq`` and
   cos/sin cache is rebuilt with the base config's ``rope_theta`` (also read
   from transformers-5 style ``rope_parameters``).  ``--no-rope-fix`` keeps the
   reference's behaviour (then outputs differ from true greedy).
2. Tokenizer.  ``EaModel.__init__`` calls ``AutoTokenizer.from_pretrained`` only
   to get ``eos_token_id`` for stopping; it is replaced by a stub whose
   ``eos_token_id`` is None so EOS never stops generation (and so a tokenizer
   config written by transformers 5 need not be parseable by 4.x).

Timing: ``timing = "decode-only"``: clock from the end of ``initialize_tree``
(prefill + first draft tree) to the end of the verify step that brought the
committed new tokens to >= N.  tok/s = tokens committed in that window / time
(the last step may overshoot N by a few tokens; ``tokens`` is cut to N).
Committed tokens exclude the pending bonus token that the reference keeps
outside ``input_ids``; the first new token comes from prefill and is counted
in decode (it enters ``input_ids`` in the first verify step).
"""

import argparse
import json
import os
import statistics
import sys
import time


def _rope_theta(config_path, default=None):
    with open(config_path) as f:
        cfg = json.load(f)
    theta = cfg.get("rope_theta")
    if theta is None:
        theta = (cfg.get("rope_parameters") or {}).get("rope_theta")
    return float(theta) if theta is not None else default


def _fix_rotary(module, theta, torch):
    """Rebuild inv_freq + cos/sin caches of every EAGLE rotary module with base=theta."""
    n = 0
    for m in module.modules():
        if hasattr(m, "inv_freq") and hasattr(m, "_set_cos_sin_cache"):
            m.base = theta
            inv = 1.0 / (theta ** (torch.arange(0, m.dim, 2, dtype=torch.float32) / m.dim))
            m.inv_freq = inv.to(m.inv_freq.device)
            m._set_cos_sin_cache(seq_len=m.max_position_embeddings, device=m.inv_freq.device, dtype=torch.float32)
            n += 1
    return n


class _StubTokenizer:
    eos_token_id = None  # never matches -> EOS does not stop generation


class _StubAutoTokenizer:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        return _StubTokenizer()


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", required=True)
    ap.add_argument("--prompt-ids-file", required=True, help="JSON list of token ids")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tree", default="mc_sim_7b_63", help="name in eagle.model.choices, or a JSON list of paths")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--no-rope-fix", action="store_true")
    ap.add_argument(
        "--reference-path", default=None, help="a local clone of the reference code (its `eagle` package is imported from there)"
    )
    return ap.parse_args()


def _count_verifies(eam, stats: dict) -> None:
    """Wrap the reference's tree functions: the end of the prefill (initialize_tree) and each verify pass."""
    orig_init, orig_dec = eam.initialize_tree, eam.tree_decoding

    def initialize_tree(*a, **k):
        out = orig_init(*a, **k)
        stats["t_prefill_end"] = time.perf_counter()
        return out

    def tree_decoding(*a, **k):
        stats["verify"] += 1
        return orig_dec(*a, **k)

    eam.initialize_tree, eam.tree_decoding = initialize_tree, tree_decoding


def _load(args, tree, torch):
    """The reference's EaModel with its RoPE base patched (unless --no-rope-fix) and our tree; (model, lm_head tied)."""
    import eagle.model.choices as eachoices
    import eagle.model.cnets as cnets
    import eagle.model.ea_model as eam

    t0 = time.perf_counter()
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model = eam.EaModel.from_pretrained(base_model_path=args.base, ea_model_path=args.head, torch_dtype=dtype)
    model.eval()
    notes = []
    if not args.no_rope_fix:
        tb = _rope_theta(os.path.join(args.base, "config.json"), 10000.0)
        th = _rope_theta(os.path.join(args.head, "config.json"), tb)
        nb = _fix_rotary(model.base_model, tb, torch)
        nd = _fix_rotary(model.ea_layer, th, torch)
        notes.append(f"rope base patched: target {tb} ({nb} modules), draft {th} ({nd})")
    if tree != eachoices.mc_sim_7b_63:
        model.ea_layer.tree = tree
        model.ea_layer.tree_buffer = cnets.generate_tree_buffers(tree, torch.device("cpu"))
    emb, lm = model.base_model.model.embed_tokens.weight, model.base_model.lm_head.weight
    tied = emb.data_ptr() == lm.data_ptr() or bool(torch.equal(emb, lm))
    print(f"loaded in {time.perf_counter() - t0:.1f}s; lm_head tied to embed: {tied}; " + "; ".join(notes), file=sys.stderr)
    return model, tied


def _run_once(model, input_ids, max_new_tokens: int, tree, stats: dict) -> dict:
    """One greedy generation of max_new_tokens: its ids, committed tokens, verify passes, decode and prefill time."""
    stats["verify"], stats["t_prefill_end"] = 0, None
    length = input_ids.shape[1]
    t_start = time.perf_counter()
    out = input_ids
    for out in model.ea_generate(input_ids, temperature=0.0, max_steps=10 * max_new_tokens + 10, tree_choices=tree):
        if out.shape[1] - length >= max_new_tokens:
            break
    t_end = time.perf_counter()
    return {
        "ids": out[0, length : length + max_new_tokens].tolist(),
        "committed": out.shape[1] - length,
        "verify": stats["verify"],
        "decode_s": t_end - stats["t_prefill_end"],
        "prefill_s": stats["t_prefill_end"] - t_start,
    }


def _summary(args, runs: list[dict], tied: bool, prompt_len: int, torch, transformers) -> dict:
    tok_s = [r["committed"] / r["decode_s"] for r in runs]
    last = runs[-1]
    return {
        "tok_s": statistics.median(tok_s),
        "runs_tok_s": tok_s,
        "tau": sum(r["committed"] for r in runs) / sum(r["verify"] for r in runs),
        "new_tokens": len(last["ids"]),
        "tokens": last["ids"],
        "timing": "decode-only",
        "transformers": transformers.__version__,
        "eagle_llm": "1.2.1",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "tree": args.tree,
        "prompt_len": prompt_len,
        "verify_passes": [r["verify"] for r in runs],
        "committed_tokens": [r["committed"] for r in runs],
        "prefill_s": [r["prefill_s"] for r in runs],
        "rope_fix": not args.no_rope_fix,
        "lm_head_tied": tied,
    }


def main():
    args = _parse_args()
    if args.reference_path:
        sys.path.insert(0, args.reference_path)

    import torch
    import transformers

    if args.threads > 0:
        torch.set_num_threads(args.threads)

    import eagle.model.choices as eachoices
    import eagle.model.ea_model as eam

    eam.AutoTokenizer = _StubAutoTokenizer
    tree = getattr(eachoices, args.tree) if hasattr(eachoices, args.tree) else json.loads(args.tree)
    stats = {"verify": 0, "t_prefill_end": None}
    _count_verifies(eam, stats)
    model, tied = _load(args, tree, torch)
    with open(args.prompt_ids_file) as f:
        input_ids = torch.tensor([json.load(f)], dtype=torch.long)
    with torch.inference_mode():
        _run_once(model, input_ids, args.max_new_tokens, tree, stats)  # warm-up
        runs = [_run_once(model, input_ids, args.max_new_tokens, tree, stats) for _ in range(args.repeats)]
    for i, r in enumerate(runs):
        print(
            f"run {i}: prefill {r['prefill_s'] * 1e3:.0f} ms, decode {r['decode_s']:.3f}s, "
            f"{r['committed']} tokens / {r['verify']} verify passes",
            file=sys.stderr,
        )
    print(json.dumps(_summary(args, runs, tied, input_ids.shape[1], torch, transformers)))


if __name__ == "__main__":
    main()
