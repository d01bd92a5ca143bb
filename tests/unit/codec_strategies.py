"""Hypothesis strategies the carrier codec tests share (a module of its own: a test
module imported by another is collected twice, and ``conftest`` is a name every test
folder shares)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)

# base64 of audio, or any text: what a delta or a media payload may carry
payloads = st.binary(max_size=400).map(lambda b: base64.b64encode(b).decode()) | st.text()

event_types = st.sampled_from(["response.output_audio.delta",
                               "input_audio_buffer.speech_started", "error",
                               "response.done", "session.created"]) | st.text(max_size=10)


@st.composite
def server_events(draw: st.DrawFn) -> dict[str, Any]:
    """Server events a Twilio-style codec renders, each part possibly wrong (any
    response id, any item id)."""
    event: dict[str, Any] = {"type": draw(event_types)}
    event.update(draw(st.fixed_dictionaries({}, optional={
        "delta": payloads | json_values, "response_id": st.text(max_size=10) | json_values,
        "item_id": json_values, "error": json_values})))
    return event


@st.composite
def reply_events(draw: st.DrawFn, kinds: Sequence[str], max_delta: int) -> dict[str, Any]:
    """Server events of ``kinds`` about two replies (``r1``, ``r2``) of one item, with
    up to ``max_delta`` bytes of audio a delta, each part possibly wrong."""
    event: dict[str, Any] = {"type": draw(st.sampled_from(kinds) | json_values)}
    event.update(draw(st.fixed_dictionaries({}, optional={
        "delta": st.binary(max_size=max_delta).map(lambda b: base64.b64encode(b).decode())
        | json_values, "response_id": st.sampled_from(["r1", "r2"]) | json_values,
        "item_id": st.just("i1") | json_values, "error": json_values})))
    return event
