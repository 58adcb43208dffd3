"""Run by the vLLM environment's Python (not by pytest): parse argv lists with the installed vLLM's own
server parser and validation, and print what it made of them as one JSON line.

stdin: a JSON list of argv lists (the arguments after ``python -m <server module>``). stdout: the parsed
settings, SpeculativeConfig's field names, and the ``method`` values it accepts.
"""

import dataclasses
import json
import sys
import typing

from vllm.config import speculative
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = make_arg_parser(FlexibleArgumentParser())
parsed = []
for argv in json.load(sys.stdin):
    args = parser.parse_args(argv)  # an unknown flag or a bad value exits 2 with argparse's message
    validate_parsed_serve_args(args)
    parsed.append(
        {
            "model": args.model,
            "host": args.host,
            "port": args.port,
            "served_model_name": args.served_model_name,
            "dtype": args.dtype,
            "enforce_eager": args.enforce_eager,
            "max_model_len": args.max_model_len,
            "speculative_config": args.speculative_config,
        }
    )


def literal_values(tp) -> list[str]:
    args = typing.get_args(tp)
    return [v for a in args for v in (literal_values(a) if typing.get_args(a) else [a])]


fields = [f.name for f in dataclasses.fields(speculative.SpeculativeConfig)]
print(json.dumps({"parsed": parsed, "speculative_config_fields": fields, "methods": literal_values(speculative.SpeculativeMethod)}))
