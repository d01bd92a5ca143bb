"""Orderings that are races over a real socket, set up exactly in-process: the
messages are in the session's inbox before its worker runs again."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
from client import b64, tone
from harness import MemorySocket, connect
from starlette.applications import Starlette
from twilio_emulator import parse_twiml, ulaw_silence, ulaw_tone

from duplex.events import ServerEvent
from gateway.gateway import Gateway
from plugins.tone.reply import word_count

FRAME = 480  # 20 ms at 24 kHz


def queue_audio(s: MemorySocket, pcm: object) -> None:
    for start in range(0, len(pcm), FRAME):  # type: ignore[arg-type]
        s.send({"type": "input_audio_buffer.append",
                "audio": b64(pcm[start:start + FRAME])})  # type: ignore[index]


async def test_i9_commit_and_create_in_one_read_answer_the_committed_turn(
        app: tuple[Starlette, Gateway]) -> None:
    """The turn's audio, its commit and the response.create all reach the inbox
    before the worker runs: the reply must still be built from that turn."""
    s = await connect(app[0])
    await s.until("session.created")
    s.send({"type": "session.update", "session": {"turn_detection": None}})
    for ms in (600, 1400, 800, 1000):  # 3, 7, 4 and 5 words
        queue_audio(s, tone(ms / 1000))
        s.send({"type": "input_audio_buffer.commit"})
        s.send({"type": "response.create"})
        done = await s.until("response.done")
        words = done["response"]["output"][0]["content"][0]["transcript"].split()
        assert len(words) - 4 == word_count(ms, ""), words
    assert s.of("error") == []


async def test_i7_a_cancel_overtakes_the_user_audio_queued_before_it(
        app: tuple[Starlette, Gateway]) -> None:
    """The user speaks over the reply while the worker is busy, and the client
    cancels at once: the cancel is handled before the queued speech, so the reply
    ends as the client asked (``client_cancelled``), not by the VAD hearing the
    speech (``turn_detected``). (A parked worker takes each frame as it is read,
    so audio queues only behind one that waits: here, on the update's journal
    write.)"""
    s = await connect(app[0])
    await s.until("session.created")
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    s.send({"type": "response.create"})
    await s.until("response.output_audio.delta")
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    queue_audio(s, tone(1.0))  # loud enough for the VAD to barge in
    s.send({"type": "response.cancel"})
    done = await s.until("response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    started = await s.until("input_audio_buffer.speech_started")  # the speech still counts
    assert s.events.index(done) < s.events.index(started)


async def test_a_late_detach_of_a_replaced_socket_leaves_the_new_one_attached(
        app: tuple[Starlette, Gateway]) -> None:
    """R15: the replaced socket's detach reaches the worker after the resume."""
    application, gateway = app
    a = await connect(application)
    created = await a.until("session.created")
    sid = created["session"]["id"]
    runner = gateway.runners[sid]
    old = runner.outbox.attachment
    assert old is not None
    b = await connect(application, query=f"resume={sid}")
    b.send({"type": "session.resume", "resume_token": created["resume_token"],
            "last_received_server_event_seq": created["server_event_seq"]})
    resumed = await b.until("session.resumed")
    assert await a.close_code() == 4000
    runner.request_detach(old)  # late: generation 1 is long gone
    b.send({"type": "session.heartbeat"})
    await b.until("session.heartbeat_ack")  # the worker has handled the detach
    record = await gateway.store.get(sid)
    assert record is not None and record.generation == resumed["attachment_generation"] == 2
    assert not record.detached_at and runner.outbox.attachment is not None


async def test_i5_a_detached_session_expires_once_on_the_reapers_clock(
        app: tuple[Starlette, Gateway]) -> None:
    application, gateway = app
    s = await connect(application)
    sid = (await s.until("session.created"))["session"]["id"]
    runner = gateway.runners[sid]
    s.drop(1006)  # no close frame: detach, the grace starts
    for _ in range(500):  # the detach has no event of its own: a bounded poll
        record = await gateway.store.get(sid)
        if record is not None and record.detached_at:
            break
        await asyncio.sleep(0.01)
    assert record is not None and record.detached_at
    await gateway._reap(time.time() + 1.0)  # within the grace: nothing happens
    assert not runner.closed.is_set()
    await gateway._reap(time.time() + gateway.config.disconnect_grace_s + 1.0)
    await runner.closed.wait()
    await gateway._reap(time.time() + 3600.0)  # nothing is left to reap
    journal = [json.loads(text) for _, text in await gateway.store.read_journal(sid, 0, 1000)]
    terminals = [e for e in journal if e["type"] in (ServerEvent.SESSION_EXPIRED,
                                                     ServerEvent.SESSION_CLOSED)]
    assert [(e["type"], e["reason"]) for e in terminals] == [("session.expired",
                                                             "disconnect_grace_expired")]


async def test_a_twilio_call_in_process(app: tuple[Starlette, Gateway]) -> None:
    application, _ = app
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        answer = await http.post("/v1/twilio/voice", data={"CallSid": "CA" + "1" * 32})
    assert answer.status_code == 200
    twiml = parse_twiml(answer.text)
    s = await connect(application, "/v1/twilio/media-stream")
    s.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
    s.send({"event": "start", "sequenceNumber": "1", "streamSid": "MZ1", "start": {
        "streamSid": "MZ1", "callSid": "CA" + "1" * 32, "tracks": ["inbound"],
        "customParameters": twiml.parameters,
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
    for chunk_start in range(0, 8000 * 2, 160):
        payload = (ulaw_tone(1.0) + ulaw_silence(1.0))[chunk_start:chunk_start + 160]
        s.send({"event": "media", "streamSid": "MZ1",
                "media": {"track": "inbound", "payload": base64.b64encode(payload).decode()}})
    media = await s.until("media", timeout=20)
    assert media["streamSid"] == "MZ1" and base64.b64decode(media["media"]["payload"])
    mark = await s.until("mark")
    assert mark["mark"]["name"].startswith("resp_")
    s.send({"event": "stop", "streamSid": "MZ1", "stop": {"callSid": "CA" + "1" * 32}})
    assert await s.close_code() == 1000


async def test_a_socket_whose_send_failed_ends_its_connection_task(
        app: tuple[Starlette, Gateway]) -> None:
    """The peer left mid-reply: the send fails and the session detaches. A frame
    the reader still had then must not leave the endpoint waiting forever on an
    attachment nobody ends (a drain would wait on that task too)."""
    application, gateway = app
    s = await connect(application)
    sid = (await s.until("session.created"))["session"]["id"]
    s.send({"type": "session.update", "session": {"instructions": "words=60"}})
    s.send({"type": "response.create"})
    await s.until("response.output_audio.delta")
    s.broken = True  # the next send fails
    await _detached(gateway, sid)
    s.send({"type": "session.heartbeat"})  # read after the detach
    await asyncio.wait_for(s.task, 10)  # the endpoint returned
    record = await gateway.store.get(sid)
    assert record is not None and record.state == "open"  # detached, still resumable


async def _detached(gateway: Gateway, sid: str) -> None:
    for _ in range(1000):  # the detach has no event of its own: a bounded poll
        record = await gateway.store.get(sid)
        if record is not None and record.detached_at:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never detached")
