"""The speculation comparison's own logic: which methods it takes, the order the sides take turns, each engine's
figures from its passes. The run against a real llama-server is in test_speculation_on_llama_server.py."""

import argparse

import pytest

from speculab.compare.speculation import Pass, Side, passes_in_turns, speculating_spec, summary


def args(method: str, draft: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(method=method, draft=draft)


def test_draft_and_ngram_are_taken_with_their_settings_and_drafter():
    assert speculating_spec(args("ngram:num_speculative_tokens=5")).params["num_speculative_tokens"] == 5
    assert speculating_spec(args("draft", draft="/d")).params["draft"] == "/d"


@pytest.mark.parametrize(
    ("method", "draft", "message"),
    [("eagle", None, "ngram or draft only"), ("baseline", None, "ngram or draft only"), ("ngram", "/d", "only with --method draft")],
)
def test_what_llama_cpp_cannot_run_is_refused_by_name(method, draft, message):
    with pytest.raises(ValueError, match=message):
        speculating_spec(args(method, draft))


def recording_side(name: str, log: list) -> Side:
    def run(prompts, max_tokens):
        log.append((name, len(prompts), max_tokens))
        return Pass([[1]], decoded=max_tokens - 1, seconds=1.0)

    return Side(name, run)


def test_sides_warm_up_once_then_passes_in_turns_in_abba_order():
    log: list = []
    sides = [recording_side(n, log) for n in "ABCD"]
    passes_in_turns(sides, [[1, 2], [3]], max_tokens=32, repeats=3)
    assert log[:4] == [(n, 1, 32) for n in "ABCD"]  # warm-up: the first prompt
    assert [name for name, *_ in log[4:]] == list("ABCD" + "DCBA" + "ABCD")
    assert all(count == 2 and tokens == 32 for _, count, tokens in log[4:])
    assert [len(s.passes) for s in sides] == [3, 3, 3, 3]


def test_the_speedup_is_paired_by_round_and_acceptance_counts_every_pass():
    plain = Side("plain", None, [Pass([[1, 2]], 100, 2.0), Pass([[1, 2]], 100, 1.0), Pass([[1, 2]], 100, 4.0)])
    fast = Side(
        "fast",
        None,
        [Pass([[1, 2]], 100, 1.0, 10, 5), Pass([[1, 2]], 100, 1.0, 10, 5), Pass([[1, 3]], 100, 2.0, 20, 2)],
    )
    got = summary(plain, fast)
    assert got["speedups"] == [2.0, 1.0, 2.0] and got["speedup"] == 2.0 and got["speedup_range"] == [1.0, 2.0]
    assert got["plain_tok_s"] == 50.0 and got["speculating_tok_s"] == 100.0
    assert got["draft_tokens"] == 40 and got["accepted_tokens"] == 12 and got["acceptance_rate"] == 0.3
    assert got["output_agreement"] == 0.5  # the last passes part at the second token


def test_an_engine_that_drafted_nothing_has_no_acceptance_rate():
    plain = Side("plain", None, [Pass([[1]], 10, 1.0)])
    assert summary(plain, Side("s", None, [Pass([[1]], 10, 1.0)]))["acceptance_rate"] is None
