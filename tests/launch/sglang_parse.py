"""Run by the SGLang environment's Python (not by pytest): parse argv lists with the installed SGLang's own
``ServerArgs`` parser and checks, and print what it made of each as one JSON line.

stdin: a JSON list of argv lists (the arguments after ``python -m sglang.launch_server``). stdout: one result per
argv: ``{"ok": true, "parsed": {...}, "validated": {...}}`` or ``{"ok": false, "stage": ..., "error": ...}``.

What runs, as ``sglang.launch_server`` runs it (0.5.3's ``prepare_server_args``, then the engine's check):
1. ``ServerArgs.add_cli_args`` on a parser, ``parse_args``: unknown flags and values outside a flag's
   choices or type are refused (stage "parse");
2. ``ServerArgs.from_cli_args``, whose ``__post_init__`` fills the defaults and runs SGLang's checks, the
   speculative ones among them (``_handle_speculative_decoding``; it reads the target's config.json)
   (stage "validate");
3. ``check_server_args`` (stage "check").

Knows, and differs from the launcher in two ways:
- the parser takes full flag names only (``allow_abbrev=False``); SGLang's own takes any unambiguous prefix,
  so ``--speculative-num-step`` would start there. speculab writes full names (``launch/sglang.py``): a prefix
  that matches today becomes ambiguous once a later version adds a flag.
- ``--device cuda`` is added when the argv has no ``--device``: SGLang detects the device otherwise and finds
  none on this CPU, and with ``--device cpu`` it refuses NGRAM ("only supports CUDA device"). The commands are
  for a CUDA machine; with no GPU here, the memory-dependent defaults take SGLang's no-GPU-memory branch.

Does not know: whether SGLang would load the model or the drafter, or serve: nothing is loaded and no kernel runs.
"""

import argparse
import json
import sys

from sglang.srt.server_args import ServerArgs

FIELDS = (
    "model_path",
    "host",
    "port",
    "served_model_name",
    "enable_metrics",
    "device",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_token_map",
    "speculative_ngram_min_match_window_size",
    "speculative_ngram_max_match_window_size",
)


class FullNamesParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)  # argparse would print and exit; each argv gets its own answer instead


def picked(obj) -> dict:
    return {name: getattr(obj, name, None) for name in FIELDS}


def check(argv: list[str]) -> dict:
    parser = FullNamesParser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    stage = "parse"
    try:
        args = parser.parse_args(argv if "--device" in argv else [*argv, "--device", "cuda"])
        stage = "validate"
        server_args = ServerArgs.from_cli_args(args)
        stage = "check"
        server_args.check_server_args()
    except (ValueError, AssertionError, TypeError) as err:
        return {"ok": False, "stage": stage, "error": f"{type(err).__name__}: {err}"}
    return {"ok": True, "parsed": picked(args), "validated": picked(server_args)}


print(json.dumps([check(argv) for argv in json.load(sys.stdin)]))
