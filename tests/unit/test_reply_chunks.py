"""Reply audio in chunks of at most 200 ms, each with its share of the words."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.session.reply_chunks import reply_chunks, words

RATE = 22050


@settings(max_examples=200, deadline=None, database=None)
@given(samples=st.integers(0, RATE * 3), text=st.text(alphabet=" ab.,\n", max_size=60))
def test_chunks_are_short_and_keep_every_sample_and_word(samples: int, text: str) -> None:
    pcm = np.arange(samples, dtype=np.int16)
    chunks = list(reply_chunks(pcm, RATE, text))
    assert all(len(c) <= RATE // 5 for c, _ in chunks)
    assert np.array_equal(np.concatenate([c for c, _ in chunks]), pcm)
    assert "".join(t for _, t in chunks) == text


def test_words_spread_over_the_chunks_in_order() -> None:
    pcm = np.zeros(RATE, dtype=np.int16)  # one second: five chunks
    chunks = [t for _, t in reply_chunks(pcm, RATE, " The capital is Paris. ")]
    assert len(chunks) == 5
    assert chunks == ["", " The", " capital", " is", " Paris. "]
    assert [t for _, t in reply_chunks(pcm[:100], RATE, "Hi.")] == ["Hi."]


def test_text_streams_a_word_a_delta() -> None:
    assert words(" The capital, Paris.\n") == [" The", " capital,", " Paris.\n"]
    assert words("") == [""] and words("  ") == ["  "]
