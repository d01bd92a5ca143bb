"""Audio cut as a client sends it: the same samples in pieces of other sizes,
for the tests that hold a result must not depend on how audio is split."""

from __future__ import annotations

from typing import Any


def in_sizes(pcm: Any, sizes: list[int]) -> list[Any]:
    """``pcm`` as pieces of ``sizes`` samples in turn, repeated to its end."""
    out, start, i = [], 0, 0
    while start < pcm.size:
        out.append(pcm[start:start + sizes[i % len(sizes)]])
        start += sizes[i % len(sizes)]
        i += 1
    return out
