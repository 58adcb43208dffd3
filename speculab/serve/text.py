"""Token ids to the text a client is sent, with stop strings.

Knows: incremental detokenization (the tokenizer's stream decoder, so a
character split over several tokens is sent whole), and OpenAI's ``stop``
strings: the text is cut before the first stop string and the request ends
with ``finish_reason`` "stop". Text that could still turn into a stop string
is held back until it cannot.

Does not know: the engine or HTTP.
"""

from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stops: list[str]):
        self._decode = tokenizer.stream_decoder()
        self.stops = stops
        self._hold = max(map(len, stops), default=1) - 1  # characters that may begin a stop string
        self.text = ""  # everything decoded so far, cut at a stop string once one is found
        self.sent = 0  # characters of ``text`` already handed out
        self.stopped = False

    def push(self, token_ids: list[int]) -> str:
        """Decode new tokens; returns the text that is now safe to send ("" while holding back)."""
        if self.stopped:
            return ""
        for token in token_ids:
            self.text += self._decode(token) or ""
        if self.stops:
            start = max(0, self.sent - self._hold)
            found = [i for stop in self.stops if (i := self.text.find(stop, start)) >= 0]
            if found:
                self.text, self.stopped = self.text[: min(found)], True
                return self.flush()
            return self._take(len(self.text) - self._hold)
        return self.flush()

    def flush(self) -> str:
        """All text not yet sent (at the end of the request)."""
        return self._take(len(self.text))

    def _take(self, end: int) -> str:
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : end], end
        return piece
