"""llama.cpp baseline for ``speculab compare llama.cpp``.

Measures plain (non-speculative) greedy decoding through ``llama-cpp-python``
so speculab's numbers can be put next to llama.cpp's on the same machine.

What this module knows:

* How to make a BF16 or F32 GGUF from a quantized one (e.g. the Q4_1
  SmolLM2-135M-Instruct file) with llama.cpp's own quantizer
  (``llama_model_quantize`` with ``LLAMA_FTYPE_MOSTLY_BF16`` or
  ``LLAMA_FTYPE_ALL_F32`` and ``allow_requantize``).  The result is a
  *dequantized* Q4_1 model stored as BF16 (1-d tensors such as norms stay
  F32) or F32, not the original BF16 release:
  its weights are the Q4_1 weights rounded to BF16, so its greedy tokens can
  differ slightly from the Q4_1 file's.
* How to time greedy decoding: one warm-up run, then ``repeats`` runs, each
  resetting the context, evaluating the prompt (``Llama.eval``, batches of
  ``n_batch``), then generating exactly ``max_new_tokens`` tokens by argmax
  over the last logits.  EOS is never checked, so it cannot stop a run early.
  Prefill time covers prompt evaluation plus picking the first token; decode
  tok/s is ``(max_new_tokens - 1) / (time from first generated token to the
  last)``, i.e. it counts the ``max_new_tokens - 1`` single-token forward
  passes (the last token is picked but never fed back).

What it does not know / does not do:

* Batched decoding (``measure_llamacpp_batched``): several sequences in one
  context, one ``llama_batch`` per step with one token per sequence id, as
  llama.cpp's ``batched`` example and its server do; each sequence's prompt
  is evaluated on its own first.
* No sampling (temperature, top-k/p) or GPU offload, and no speculative decoding (llama-server's is in
  ``speculation.py``, beside speculab's).
* It does not control the build: the numbers depend on how llama-cpp-python
  was compiled (``GGML_NATIVE`` => ``-march=native`` by default, OpenMP) and
  on the machine's load; the thread counts passed in are the only knobs.
* Weight repacking ("extra buffer types"): ``use_extra_bufts=False`` is
  passed only when the installed ``Llama`` constructor has such a keyword
  (llama-cpp-python 0.3.36 does not: it swallows unknown kwargs, so the
  llama.cpp default applies).  The result dict says which it was.

It runs in llama.cpp's own environment (``make llamacpp``: llama-cpp-python built from source
with the machine's compiler, never installed into speculab's): ``run_llamacpp`` starts this file
as a script with that environment's Python, which needs only the standard library and
``llama_cpp``, and reads the one JSON line it prints.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_INSTALL_HINT = "llama-cpp-python is not installed in this Python: run `make llamacpp`, whose environment has it"


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(_INSTALL_HINT) from exc
    return llama_cpp


FTYPES = {"bf16": "LLAMA_FTYPE_MOSTLY_BF16", "f32": "LLAMA_FTYPE_ALL_F32"}


def ensure_gguf_copy(src_gguf: Path, dst_gguf: Path, ftype: str = "bf16") -> Path:
    """Write a ``ftype`` (bf16 or f32) copy of ``src_gguf`` to ``dst_gguf`` unless it exists.

    Uses llama.cpp's quantizer (``llama_model_quantize``, ftype
    ``FTYPES[ftype]``, ``allow_requantize=True``), writing to a
    temporary file first so an interrupted run leaves no half-written
    ``dst_gguf``.  Returns ``dst_gguf``.
    """
    src_gguf, dst_gguf = Path(src_gguf), Path(dst_gguf)
    if dst_gguf.exists():
        return dst_gguf
    llama_cpp = _import_llama_cpp()
    if not src_gguf.is_file():
        raise FileNotFoundError(f"source GGUF not found: {src_gguf}")
    dst_gguf.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst_gguf.with_name(f"{dst_gguf.name}.tmp{os.getpid()}")

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FTYPES[ftype])
    params.allow_requantize = True

    # llama-cpp-python prints every llama.cpp log line (one per tensor here)
    # unless its logger is at ERROR; quiet it for the duration.
    logger = logging.getLogger("llama-cpp-python")
    old_level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        llama_cpp.llama_backend_init()
        rc = llama_cpp.llama_model_quantize(str(src_gguf).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize({src_gguf} -> {ftype}) failed with code {rc}")
        os.replace(tmp, dst_gguf)
    finally:
        logger.setLevel(old_level)
        tmp.unlink(missing_ok=True)
    return dst_gguf


def _timed_runs(one_run, repeats: int) -> dict:
    """One warm-up (page in weights, spin up the thread pool), then ``repeats`` timed runs of ``one_run``,
    which returns (prefill seconds, decode tok/s, generated tokens)."""
    one_run()
    prefill, runs, first_tokens = [], [], None
    for _ in range(repeats):
        p, tok_s, tokens = one_run()
        prefill.append(p)
        runs.append(tok_s)
        first_tokens = first_tokens if first_tokens is not None else tokens
    return {
        "tok_s": statistics.median(runs),
        "prefill_s": statistics.median(prefill),
        "runs": runs,
        "prefill_runs": prefill,
        "tokens": first_tokens,
    }


def measure_llamacpp(
    gguf_path: Path,
    prompt_ids: list[int],
    max_new_tokens: int,
    repeats: int,
    n_threads: int,
) -> dict:
    """Time greedy decoding of ``gguf_path`` with llama-cpp-python.

    One warm-up run, then ``repeats`` timed runs (see the module docstring
    for what is timed).  Returns::

        {"tok_s": median decode tok/s, "prefill_s": median prefill seconds,
         "runs": [decode tok/s per run], "prefill_runs": [...],
         "tokens": generated ids of the first timed run,
         "gguf": str(gguf_path), "n_threads": n_threads,
         "n_prompt": len(prompt_ids), "max_new_tokens": max_new_tokens,
         "use_extra_bufts": False if disabled, None if left at the default}
    """
    if max_new_tokens < 2:
        raise ValueError("max_new_tokens must be >= 2 to time decoding")
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    llama_cpp = _import_llama_cpp()
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF not found: {gguf_path}")
    prompt_ids = [int(t) for t in prompt_ids]
    n_ctx = -(-(len(prompt_ids) + max_new_tokens + 1) // 256) * 256  # llama.cpp pads the KV cache to 256 anyway
    llm, use_extra_bufts = _open_llama(llama_cpp, gguf_path, n_ctx, n_threads)
    try:
        n_vocab = llm.n_vocab()
        if max(prompt_ids) >= n_vocab or min(prompt_ids) < 0:
            raise ValueError(f"prompt ids out of range for vocab of {n_vocab}")
        timed = _timed_runs(lambda: _greedy_run(llama_cpp, llm, prompt_ids, max_new_tokens), repeats)
    finally:
        llm.close()

    return timed | {
        "gguf": str(gguf_path),
        "n_threads": n_threads,
        "n_prompt": len(prompt_ids),
        "max_new_tokens": max_new_tokens,
        "use_extra_bufts": use_extra_bufts,
    }


def _open_llama(llama_cpp, gguf_path: Path, n_ctx: int, n_threads: int) -> tuple[Any, bool | None]:
    """llama-cpp-python's ``Llama`` for one sequence, without the extra buffer types (repacked weights) where
    this version lets them be turned off; returns it and that setting (None: left at the default)."""
    kwargs: dict[str, Any] = dict(
        model_path=str(gguf_path),
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        n_batch=512,
        logits_all=False,
        verbose=False,
    )
    use_extra_bufts = None
    if "use_extra_bufts" in inspect.signature(llama_cpp.Llama.__init__).parameters:
        kwargs["use_extra_bufts"] = use_extra_bufts = False
    return llama_cpp.Llama(**kwargs), use_extra_bufts


def _greedy_run(llama_cpp, llm, prompt_ids: list[int], max_new_tokens: int) -> tuple[float, float, list[int]]:
    """One run: (prefill seconds, decode tok/s, the tokens)."""
    import numpy as np  # a dependency of llama-cpp-python

    n_vocab = llm.n_vocab()

    def next_token() -> int:
        # Greedy = argmax of the last position's logits (the only row
        # computed with logits_all=False).  No EOS check on purpose.
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.ctypeslib.as_array(ptr, shape=(n_vocab,)).argmax())

    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt_ids)
    tok = next_token()
    t1 = time.perf_counter()
    tokens = [tok]
    for _ in range(max_new_tokens - 1):
        llm.eval([tok])
        tok = next_token()
        tokens.append(tok)
    t2 = time.perf_counter()
    return t1 - t0, (max_new_tokens - 1) / (t2 - t1), tokens


def _fill(batch: Any, entries: list[tuple[int, int, int, bool]]) -> None:
    """Write (token, position, sequence id, wants logits) entries into a ``llama_batch``."""
    batch.n_tokens = len(entries)
    for i, (token, pos, seq, logits) in enumerate(entries):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = int(logits)


def measure_llamacpp_batched(gguf_path: Path, prompts: list[list[int]], max_new_tokens: int, repeats: int, n_threads: int) -> dict:
    """Time greedy decoding of several sequences at once with llama.cpp's low-level API.

    One context holds every sequence (``n_seq_max`` = the batch, a KV cache of its own per sequence); each
    prompt is evaluated alone (chunks of 512), then every step decodes one ``llama_batch`` of one token per
    sequence. Decode tok/s = batch x (max_new_tokens - 1) / (time from the end of the prompts to the last
    step). One warm-up run, then ``repeats``. Returns the same fields as ``measure_llamacpp``.
    """
    if max_new_tokens < 2 or repeats < 1 or not prompts or not all(prompts):
        raise ValueError("need max_new_tokens >= 2, repeats >= 1 and non-empty prompts")
    llama_cpp = _import_llama_cpp()
    import numpy as np

    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF not found: {gguf_path}")
    n = len(prompts)
    per_seq = -(-(max(map(len, prompts)) + max_new_tokens + 1) // 256) * 256
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(gguf_path).encode(), llama_cpp.llama_model_default_params())
    if not model:
        raise RuntimeError(f"llama.cpp could not load {gguf_path}")
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = per_seq * n, 512, 512, n
    params.n_threads = params.n_threads_batch = n_threads
    params.kv_unified = False
    ctx = llama_cpp.llama_init_from_model(model, params)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    try:
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))

        def argmax(i: int) -> int:
            return int(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).argmax())

        def decode() -> None:
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")

        def one_run() -> tuple[float, float, list[int]]:
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            t0 = time.perf_counter()
            tokens = []
            for seq, ids in enumerate(prompts):
                for start in range(0, len(ids), 512):
                    part = ids[start : start + 512]
                    _fill(batch, [(t, start + i, seq, start + i == len(ids) - 1) for i, t in enumerate(part)])
                    decode()
                tokens.append([argmax(batch.n_tokens - 1)])
            t1 = time.perf_counter()
            for step in range(max_new_tokens - 1):
                _fill(batch, [(tokens[seq][-1], len(ids) + step, seq, True) for seq, ids in enumerate(prompts)])
                decode()
                for seq in range(n):
                    tokens[seq].append(argmax(seq))
            t2 = time.perf_counter()
            return t1 - t0, n * (max_new_tokens - 1) / (t2 - t1), tokens[0]

        timed = _timed_runs(one_run, repeats)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    return timed | {
        "gguf": str(gguf_path),
        "n_threads": n_threads,
        "batch_size": n,
        "n_prompt": [len(p) for p in prompts],
        "max_new_tokens": max_new_tokens,
    }


def run_llamacpp(
    gguf: Path,
    prompt_ids: list[int] | list[list[int]],
    max_new_tokens: int,
    repeats: int,
    n_threads: int,
    convert_from: Path | None = None,
    python: Path | None = None,
    ftype: str = "bf16",
) -> dict:
    """``measure_llamacpp`` in llama.cpp's own environment (made on first use), or ``measure_llamacpp_batched``
    when ``prompt_ids`` is a list of prompts; with ``convert_from``, ``gguf`` is first written as that GGUF's
    ``ftype`` (bf16 or f32) copy. Returns the measurement with ``llama_cpp_version``."""
    # imported here: this file also runs as a script in llama.cpp's environment, where speculab is not installed
    from speculab.launch.environments import llamacpp_python

    python = python or llamacpp_python(create=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompt_ids, f)
    argv = [str(python), __file__, "--gguf", str(gguf), "--prompt-ids-file", f.name, "--max-new-tokens", str(max_new_tokens)]
    argv += ["--repeats", str(repeats), "--threads", str(n_threads)]
    argv += ["--convert-from", str(convert_from), "--ftype", ftype] if convert_from else []
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    finally:
        Path(f.name).unlink(missing_ok=True)
    if done.returncode != 0:
        raise RuntimeError(f"the llama.cpp run failed ({python}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def embedded_gguf(quant: str) -> tuple[Path, Path | None]:
    """(the GGUF llama.cpp runs for ``quant``, the GGUF it is converted from or None): the embedded model's Q4_1
    file itself, or llama.cpp's own bf16/f32 copy of it, whose weights are speculab's dequantised ones."""
    from speculab.files import cache_dir  # speculab's side only: this file also runs in llama.cpp's environment
    from speculab.models.embedded import ensure_gguf

    q4 = ensure_gguf()
    if quant == "q4_1":
        return q4, None
    return cache_dir() / "gguf" / f"SmolLM2-135M-Instruct.{quant.upper()}.gguf", q4


def converted_gguf(quant: str) -> Path:
    """``embedded_gguf``'s file, converted first in llama.cpp's environment when it is a copy not made yet."""
    gguf, source = embedded_gguf(quant)
    return gguf if source is None else convert_copy(source, gguf, quant)


def convert_copy(source: Path, gguf: Path, ftype: str, python: Path | None = None) -> Path:
    """``ensure_gguf_copy`` run in llama.cpp's environment (nothing timed): ``gguf`` as ``source``'s ``ftype`` copy."""
    from speculab.launch.environments import llamacpp_python

    python = python or llamacpp_python(create=True)
    argv = [str(python), __file__, "--gguf", str(gguf), "--convert-from", str(source), "--ftype", ftype, "--convert-only"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp's conversion to {ftype} failed ({python}):\n{done.stderr[-3000:]}")
    return gguf


def main(argv: list[str] | None = None) -> int:
    """Script entry, run by llama.cpp's environment: the last stdout line is one JSON object."""
    p = argparse.ArgumentParser(description="time llama.cpp greedy decoding (speculab compare llama.cpp)")
    p.add_argument("--gguf", type=Path, required=True)
    p.add_argument("--convert-from", type=Path, default=None, help="first write --gguf as a --ftype copy of this GGUF")
    p.add_argument("--ftype", choices=sorted(FTYPES), default="bf16")
    p.add_argument("--convert-only", action="store_true", help="write the --ftype copy and stop (nothing timed)")
    p.add_argument("--prompt-ids-file", type=Path, help="JSON list of prompt token ids, or a list of such lists")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int)
    args = p.parse_args(argv)
    if args.convert_from is not None:
        ensure_gguf_copy(args.convert_from, args.gguf, args.ftype)
    if args.convert_only:
        print(json.dumps({"gguf": str(args.gguf)}))
        return 0
    if None in (args.prompt_ids_file, args.max_new_tokens, args.threads):
        p.error("--prompt-ids-file, --max-new-tokens and --threads are required unless --convert-only")
    prompt = json.loads(args.prompt_ids_file.read_text())
    if prompt and isinstance(prompt[0], list):
        result = measure_llamacpp_batched(args.gguf, prompt, args.max_new_tokens, args.repeats, args.threads)
    else:
        result = measure_llamacpp(args.gguf, prompt, args.max_new_tokens, args.repeats, args.threads)
    print(json.dumps(result | {"llama_cpp_version": _import_llama_cpp().__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
