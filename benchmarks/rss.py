"""Peak RSS of loading the embedded model and decoding at batch size 1 after a 1,200-token prompt.

Usage: python benchmarks/rss.py [bfloat16|float32]. The last stdout line is one JSON document.
"""

import json
import resource
import sys

from speculab.compare.peers import code_prompts
from speculab.engine import Engine
from speculab.runtime import load
from speculab.sampling import SamplingParams


def rss_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    dtype = sys.argv[1] if len(sys.argv) > 1 else "bfloat16"
    result = {"dtype": dtype, "after_import_mb": rss_mb()}
    loaded = load(None, dtype)
    result |= {"after_load_mb": rss_mb(), "peak_after_load_mb": peak_mb()}
    prompts = code_prompts(loaded.tokenizer, 1200, 1)
    engine = Engine(loaded.model, max_batch=1, max_seq_len=1400)
    engine.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True))
    result |= {"after_generate_mb": rss_mb(), "peak_mb": peak_mb(), "prompt_tokens": len(prompts[0])}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
