"""Detokenization with stop strings: the text is cut before the first stop string, and nothing past it leaks."""

from __future__ import annotations

import pytest

from speculab.serve.text import TextStream


class CharTokenizer:
    """One token per character (ids are code points), enough to drive TextStream."""

    def stream_decoder(self):
        return chr


def feed(stops: list[str], text: str, sizes: list[int]) -> tuple[str, bool]:
    stream, sent, ids, i = TextStream(CharTokenizer(), stops), [], [ord(c) for c in text], 0
    for n in sizes:
        sent.append(stream.push(ids[i : i + n]))
        i += n
    if not stream.stopped:
        sent.append(stream.flush())
    return "".join(sent), stream.stopped


@pytest.mark.parametrize("sizes", [[1] * 20, [3] * 7, [20], [2, 5, 13]])
def test_stop_string_cuts_wherever_tokens_split_it(sizes):
    assert feed(["END"], "hello END world....", sizes) == ("hello ", True)


def test_earliest_of_several_stops_wins():
    assert feed(["world", "lo"], "hello world", [1] * 11) == ("hel", True)


def test_without_stops_everything_is_sent_at_once():
    stream = TextStream(CharTokenizer(), [])
    assert stream.push([ord("a"), ord("b")]) == "ab"


def test_text_that_may_start_a_stop_string_is_held_back():
    stream = TextStream(CharTokenizer(), ["</s>"])
    assert stream.push([ord(c) for c in "ab</"]) == "a"  # "b</" could still become "</s>"
    assert stream.push([ord("x")]) == "b"  # "</x" could not, but "</" ... is still held: at most 3 characters
    assert stream.flush() == "</x" and not stream.stopped
