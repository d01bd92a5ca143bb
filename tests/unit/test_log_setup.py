"""``gateway.log_setup``: JSON lines name their session; polls are not access-logged."""

from __future__ import annotations

import json
import logging

from gateway.log_setup import JsonFormatter, not_a_poll


def record(name: str, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)


def test_a_json_line_names_the_session_it_is_about() -> None:
    line = json.loads(JsonFormatter().format(record(
        "gateway", "session %s: detach not persisted", "sess_AbCdEfGh12345678")))
    assert line["session"] == "sess_AbCdEfGh12345678"
    assert (line["level"], line["logger"]) == ("INFO", "gateway")
    assert line["message"] == "session sess_AbCdEfGh12345678: detach not persisted"
    assert line["time"].endswith("Z")
    assert "session" not in json.loads(JsonFormatter().format(record("x", "no ids here")))


def test_polls_are_dropped_and_everything_else_kept() -> None:
    access = '%s - "%s %s HTTP/%s" %d'
    assert not not_a_poll(record("uvicorn.access", access, "1.2.3.4:5", "GET", "/readyz",
                                 "1.1", 200))
    assert not not_a_poll(record("uvicorn.access", access, "1.2.3.4:5", "GET",
                                 "/metrics?x=1", "1.1", 200))
    assert not_a_poll(record("uvicorn.access", access, "1.2.3.4:5", "POST",
                             "/v1/twilio/voice", "1.1", 200))
    assert not_a_poll(record("gateway", "GET /readyz is how you ask"))  # not an access line


def test_a_repeated_warning_shows_once_then_with_a_count() -> None:
    from gateway.log_setup import FloodGate

    now = [0.0]
    gate = FloodGate(every_s=10.0, clock=lambda: now[0])

    def warn(msg: str) -> logging.LogRecord:
        r = record("asyncio", msg)
        r.levelno = logging.WARNING
        return r

    assert gate.filter(warn("accept failed"))
    assert not any(gate.filter(warn("accept failed")) for _ in range(50))
    assert gate.filter(warn("something else"))  # another kind is not held back
    now[0] = 11.0
    later = warn("accept failed")
    assert gate.filter(later)
    assert "(50 more like it in the last 10 s)" in later.getMessage()
    info = record("x", "accept failed")
    assert all(gate.filter(info) for _ in range(5))  # INFO is not rate-limited


def test_the_open_files_limit_is_lifted_to_the_hard_one() -> None:
    import resource

    from gateway.http_limits import raise_open_files_limit

    _, after = raise_open_files_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert after == soft and (soft == hard or hard == resource.RLIM_INFINITY)


def test_different_warnings_of_one_template_are_different_kinds() -> None:
    from gateway.log_setup import FloodGate

    gate = FloodGate(every_s=10.0, clock=lambda: 0.0)

    def warn(*args: object) -> logging.LogRecord:
        r = record("gateway.twilio", "call %s: ignored a message (%s)", *args)
        r.levelno = logging.WARNING
        return r

    assert gate.filter(warn("CA1", "not usable JSON"))
    assert gate.filter(warn("CA1", "track/payload is not a string"))  # other words
    assert not gate.filter(warn("CA2", "not usable JSON"))  # only a number differs
