"""One sampled token's draw from one 49,152-token row: rejection's path against the coupled race, noise included.

``verify_sampled`` on a draft-less tree (what plain sampling runs: the target's distribution, then ``torch.multinomial``)
against ``verify_coupled`` with a fresh output position's noise each call (``position_noise``), and the two parts
alone: the sampling distribution (``sampling_probs``) and the noise. Medians of ``--repeats`` runs of 100 calls.

    .venv/bin/python benchmarks/sampling_draw.py

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit

import torch

from speculab.cpu import reported_cpu_flags
from speculab.position_noise import PositionNoise
from speculab.sampling import SamplingParams, sampling_probs
from speculab.speculative.tree import Draft, VerifyTree
from speculab.speculative.verify import verify_coupled, verify_sampled
from speculab.testbed import testbed

VOCAB = 49152


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    torch.manual_seed(0)
    logits = torch.randn(1, VOCAB) * 3
    params = SamplingParams(temperature=0.7, seed=3)
    tree = VerifyTree.from_draft(5, Draft.empty())
    generator = torch.Generator().manual_seed(1)
    noise, position = PositionNoise(3, VOCAB), [0]

    def next_noise():
        position[0] += 1
        noise.forget_before(position[0])
        return noise.at([position[0]])

    calls = {
        "sampling_probs": lambda: sampling_probs(logits, params),
        "rejection_draw": lambda: verify_sampled(tree, sampling_probs(logits, params), generator),
        "coupled_draw": lambda: verify_coupled(tree, sampling_probs(logits, params), next_noise()),
        "noise": next_noise,
    }
    us = {}
    for name, call in calls.items():
        us[name] = statistics.median(t / 100 * 1e6 for t in timeit.repeat(call, number=100, repeat=args.repeats))
        print(f"{name:15s} {us[name]:7.1f} us", flush=True)
    print(json.dumps({"us": us, "vocab": VOCAB, "machine": {"cpu": testbed()["cpu"], "flags": reported_cpu_flags()}}))


if __name__ == "__main__":
    main()
