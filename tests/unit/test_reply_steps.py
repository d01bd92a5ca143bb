"""The reply's steps a stage tells the session (``plugins.base.ReplyStep``): the
thinkers' first token and first clause, each once, ahead of what they lead; and
the WebRTC speaker's playback mark, when the track takes a reply's first audio."""

from __future__ import annotations

import numpy as np

from duplex.fence import Fence
from engines.stages import ChatReply
from gateway.transports.speaker import FRAME_SAMPLES, Speaker
from plugins.base import FIRST_CLAUSE, FIRST_TOKEN, Context, ReplyStep
from plugins.cascade.chat_thinker import ChatThinker
from plugins.cascade.payloads import Clause, UserTurn
from plugins.cascade.thinker import ThinkerAdapter

FENCE = Fence("s", 0, 0, 0)


def test_the_thinkers_first_token_and_first_clause_lead_their_results_once() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    chunk = a.plan(s, UserTurn(1, "i1", "Hello", True))
    assert chunk is not None
    out = [[(r.payload, r.segment_finished, r.visible) for r in a.on_text(s, chunk, d, last)]
           for d, last in (("Hi", False), (" there.", False), (" How are", False),
                           (" you?", True))]
    step = (ReplyStep(1, FIRST_TOKEN), False, True)  # to the session, never to the talker
    assert out[0] == [step]  # text, no clause yet
    assert out[1] == []  # a clause ends at the white space after its stop
    assert out[2] == [(ReplyStep(1, FIRST_CLAUSE), False, True),
                      (Clause(1, "Hi there.", last=False), True, False)]
    assert [p for p, _, _ in out[3]] == [Clause(1, " How are you?", last=True)]
    again = a.plan(s, UserTurn(2, "i2", "And?", True))  # the next reply has its own
    assert again is not None
    assert [r.payload for r in a.on_text(s, again, "Fine.", True)] == [
        ReplyStep(2, FIRST_TOKEN), ReplyStep(2, FIRST_CLAUSE), Clause(2, "Fine.", last=True)]


def test_a_model_servers_reply_tells_its_steps_even_when_it_comes_whole() -> None:
    thinker = ChatThinker()
    state = thinker.open(FENCE)
    thinker.plan(state, Context(None))
    chunk = thinker.plan(state, UserTurn(1, "i1", "Hi", True))
    assert chunk is not None
    assert [r.payload for r in thinker.on_text(state, chunk, "Hello")] == [
        ReplyStep(1, FIRST_TOKEN)]
    results, _ = thinker.on_end(state, chunk, ChatReply("Hello", (), "stop"))
    assert [r.payload for r in results] == [ReplyStep(1, FIRST_CLAUSE),
                                            Clause(1, "Hello", last=True)]


def test_the_speaker_tells_a_replys_playback_mark_when_the_track_takes_its_first_audio(
        ) -> None:
    speaker = Speaker()
    marks: list[str] = []
    speaker.on_played = marks.append
    speaker.frame()  # silence: nothing played
    speaker.queue("resp_1", "item_1", np.ones(3 * FRAME_SAMPLES // 2, np.int16))
    assert marks == []  # queued is not played
    speaker.frame()
    speaker.frame()
    assert marks == ["resp_1"]  # once a reply
    speaker.queue("resp_2", "item_2", np.ones(FRAME_SAMPLES, np.int16))
    speaker.frame()
    assert marks == ["resp_1", "resp_2"]
