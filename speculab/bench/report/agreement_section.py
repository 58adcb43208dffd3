"""The report's greedy-agreement section: outputs against their engine's baseline and speculab's, and where they part.

Knows: the cells' agreement and divergence fields (``bench/divergence.py`` wrote them), near-tie bounds included,
every context's. Does not know: how divergences were found, or rendering.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Table
from speculab.bench.report.numbers import DASH, context_name, pct
from speculab.bench.report.results import Results


def agreement_blocks(results: Results) -> list[Block]:
    """Engines' greedy outputs against their own baseline and against speculab's; each divergence's gap on the target."""
    rows, several = [], results.several_contexts
    for (label, b, ctx), c in results.all_cells.items():
        if not (
            c.get("divergences")
            or c.get("speculab_divergences")
            or c.get("transport") == "http"
            and (c.get("agreement") is not None or c.get("agreement_with_speculab") is not None)
        ):
            continue
        own = c.get("divergences") or []
        ours = c.get("speculab_divergences") or []
        gaps = [abs(d["logprob_gap"]) for d in own + ours]
        # both runs' gaps between the two chosen tokens there (records older than that kept top-1 minus top-2)
        margins = [m for d in own if d.get("chosen_gaps") or d.get("margins") for m in d.get("chosen_gaps") or d["margins"]]
        bounds = [d["bound"] for d in own + ours if "bound" in d]
        rows.append(
            [
                results.short(label),
                *([context_name(results, ctx)] if several else []),
                str(b),
                DASH if c.get("greedy_identical") is None else ("yes" if c["greedy_identical"] else "no"),
                pct(c.get("agreement")),
                DASH if c.get("identical_to_speculab") is None else ("yes" if c["identical_to_speculab"] else "no"),
                pct(c.get("agreement_with_speculab")),
                str(len(own) + len(ours)),
                DASH if not gaps else f"{max(gaps):.4f}",
                DASH if not margins else f"{max(margins):.3f}",
                DASH if not bounds else f"{min(bounds):.3f}",
                DASH if not gaps else ("yes" if all(d["near_tie"] for d in own + ours) else "NO"),
            ]
        )
    if not rows:
        return []
    return [
        Heading(2, "Greedy agreement: across engines, and where outputs part"),
        Table(
            [
                "label",
                *(["context"] if several else []),
                "batch",
                "identical to its engine's baseline",
                "agreement",
                "baseline identical to speculab's",
                "agreement with speculab",
                "divergences",
                "max |log-prob gap| (nats)",
                "max chosen-token gap, both runs",
                "near-tie bound",
                "all near-ties",
            ],
            rows,
            "`cell.greedy_identical`, `cell.agreement`, `cell.identical_to_speculab`, `cell.agreement_with_speculab`, "
            "`cell.divergences` / `cell.speculab_divergences`: where outputs part, the gap between the two tokens on the "
            "target recomputed, and (in-process) the logit gap each run's target saw there between its own choice and the other "
            "run's. A near-tie: both gaps (or, for HTTP engines, the recomputed gap) under the bound rounding allows in the run's dtype "
            "(`bench/divergence.near_tie_bound`: 0.05 nats in fp32, 18 unit roundoffs of the top logit in bf16). Outputs that part only at "
            "near-ties differ by rounding, not by a bug; `--dtype float32` gives outputs identical to plain decoding.",
        ),
    ]
