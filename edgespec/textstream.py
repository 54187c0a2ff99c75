"""Bytes from the detokenizer -> text safe to show: whole UTF-8 characters, stop strings cut.

Text that could be the start of a stop string is held back until it is known not to be one,
so a streaming client never sees part of a stop string it asked to stop on.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self.stop = [s for s in stop if s]
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""  # everything decoded so far, cut at a stop string once one is found
        self.emitted = 0  # characters of text already handed out
        self.stopped = False

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the new text that is safe to emit."""
        if self.stopped:
            return ""
        self.text += self.decoder.decode(piece)
        cut = self.find_stop()
        if cut is not None:
            self.text = self.text[:cut]
            self.stopped = True
            return self.take(cut)
        return self.take(len(self.text) - self.held_back())

    def finish(self) -> str:
        """End of generation: flush what was held back (an incomplete character becomes U+FFFD)."""
        if not self.stopped:
            self.text += self.decoder.decode(b"", final=True)
        return self.take(len(self.text))

    def find_stop(self) -> int | None:
        hits = [i for s in self.stop if (i := self.text.find(s, self.emitted)) >= 0]
        return min(hits) if hits else None

    def held_back(self) -> int:
        """Length of the longest suffix of text that begins some stop string."""
        tail = self.text[self.emitted :]
        for n in range(min(len(tail), max((len(s) for s in self.stop), default=0)), 0, -1):
            if any(s.startswith(tail[-n:]) for s in self.stop):
                return n
        return 0

    def take(self, end: int) -> str:
        out = self.text[self.emitted : end]
        self.emitted = max(self.emitted, end)
        return out
