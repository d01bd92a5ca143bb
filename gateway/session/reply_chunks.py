"""Reply audio cut into the chunks a client expects, at most ``MAX_CHUNK_MS``
each, and reply text into words (OpenAI streams both so).

A talker speaks a clause at a time (two or three seconds of audio in one
piece); OpenAI's ``response.output_audio.delta`` events carry a few hundred
milliseconds each, and clients size their playback buffers and barge-in
bookkeeping by that. Each chunk carries the words spoken in it, spread over
the chunks in order, so the playback ledger can truncate a reply close to
the word the user last heard (I6).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from plugins.base import Pcm

MAX_CHUNK_MS = 200
_WORD = re.compile(r"\s*\S+")


def words(text: str) -> list[str]:
    """``text`` as its words, each with the white space before it (and the last
    with what trails), so they concatenate to ``text``; [text] when it has none."""
    found = _WORD.findall(text)
    if not found:
        return [text]
    found[-1] += text[sum(map(len, found)):]
    return found


def reply_chunks(pcm: Pcm, rate: int, text: str,
                 max_ms: int = MAX_CHUNK_MS) -> Iterator[tuple[Pcm, str]]:
    """``pcm`` in chunks of at most ``max_ms``, each with its share of ``text``
    (the shares concatenate to ``text``)."""
    step = max(1, rate * max_ms // 1000)
    count = max(1, -(-len(pcm) // step))
    spoken = words(text)
    shares = [""] * count
    for i, word in enumerate(spoken):  # a word goes with the chunk where it ends, so a
        shares[((i + 1) * count - 1) // len(spoken)] += word  # truncation keeps none unheard
    for i in range(count):
        yield pcm[i * step:(i + 1) * step], shares[i]
