"""What the five carrier codec tests check alike: a fuzzed stream parses to audio or
controls alone, every server event renders, and a barge-in truncates the reply at
the last playback point the carrier echoed (a module of its own: a test module
imported by another is collected twice, and ``conftest`` is a name every test
folder shares)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from codec_strategies import json_values
from hypothesis import strategies as st

from duplex import commands as c
from gateway.outbound import Outbound
from gateway.session.attachment import dumps, outbound
from gateway.transports.codec import (
    QUIET,
    Codec,
    Control,
    Frame,
    Hangup,
    Inbound,
    Keypress,
    Played,
    Rendered,
    Report,
    StreamStart,
)

LIMIT = 64 * 1024  # the codecs' --max-message-bytes
SPEECH_STARTED = outbound({"type": "input_audio_buffer.speech_started"})

# a media message's payload: base64 of audio, or any JSON value
media_payloads = st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()) | json_values


def message_bodies(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An event's object with any of ``fields`` (each possibly wrong), or any JSON value."""
    return st.fixed_dictionaries({}, optional=fields) | json_values


def reply_delta(rid: str, nbytes: int, sample: bytes = b"\xff") -> Outbound:
    """A delta of ``nbytes`` of reply ``rid``'s audio (its item: ``item_<rid>``)."""
    return outbound({"type": "response.output_audio.delta", "response_id": rid,
                     "item_id": f"item_{rid}",
                     "delta": base64.b64encode(sample * nbytes).decode()})


def check_parses(codec: Codec, frames: Iterable[Frame], begun: bool,
                 hangup_event: str | None) -> None:
    """Each frame parses to audio or a control, never an error to hear (no carrier
    has one); audio and keys only once the stream began (a fuzzed frame may be
    the start itself); a hang-up only from ``hangup_event`` of a begun stream."""
    for frame in frames:
        parsed = codec.parse(frame)
        assert isinstance(parsed, c.AppendAudio | Control), parsed
        assert not isinstance(parsed, Report)
        if isinstance(parsed, Hangup):
            assert begun and hangup_event is not None
            assert json.loads(frame)["event"] == hangup_event
        begun = begun or isinstance(parsed, StreamStart)
        if isinstance(parsed, c.AppendAudio | Keypress):
            assert begun  # nothing is the session's before the start


def rendered_each(codec: Codec, events: Iterable[tuple[dict[str, Any], bool]]
                  ) -> Iterator[tuple[dict[str, Any], Rendered]]:
    """Each event and its rendering: as built, or (``True``) as a replay reads it back
    from the journal."""
    for event, replayed in events:
        yield event, codec.render(Outbound(dumps(event)) if replayed else outbound(event))


def check_barge_in(codec: Codec, points: list[str], chunks: list[int], heard: int,
                   echo: Callable[[str], Inbound], bytes_per_ms: float) -> Rendered:
    """Reply ``resp_a`` went out in ``chunks`` (bytes), each followed by one of
    ``points``; the carrier echoes the first ``heard`` of them (``echo``), then the
    caller barges in. The first echo is the reply's playback mark, the others say
    nothing; the barge-in truncates the reply at the last point echoed, or, when
    all of it played, sends and says nothing. Returns the barge-in's rendering."""
    told = [echo(point) for point in points[:heard]]
    assert told == [Played("resp_a"), *[QUIET] * (heard - 1)][:heard]
    rendered = codec.render(SPEECH_STARTED)
    if heard == len(chunks):  # all of it played: nothing to clear
        assert rendered.frames == () and rendered.answer is None
    else:
        heard_ms = sum(chunks[:heard]) / bytes_per_ms
        assert rendered.answer == c.TruncateItem(None, "item_resp_a", 0, int(heard_ms))
    return rendered
