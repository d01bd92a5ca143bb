"""How the gateway logs: one line per event that matters, readable by a person or,
with ``--log-format json``, by a log pipeline.

- Everything goes to one handler on the root logger (stderr); uvicorn adds none
  of its own (``log_config=None``), so its lines take the same format.
- Health, readiness and metrics polls are not access-logged below DEBUG: a
  supervisor polling ``/readyz`` every second would drown everything else.
- The model libraries' chatter (vLLM, torch, transformers, onnxruntime …, and
  Python ``warnings``) shows only at DEBUG; their errors always show.
- Progress bars (tqdm) are off when stderr is not a terminal: in a log file they
  are thousands of carriage returns.
- A warning or error that repeats (same logger, same words whatever the numbers) shows
  once, then at most once per ``FLOOD_EVERY_S`` with a count of the ones held
  back: a peer that can trigger a warning at will cannot fill the disk (one
  refused accept() per connection attempt was 60 MB of tracebacks a minute).
- Secrets are masked in every line (``gateway.log_redaction``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from gateway.log_redaction import protect

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_PATHS = re.compile(r'"(?:GET|HEAD) /(?:healthz|readyz|metrics)[ ?]')
THIRD_PARTY = ("vllm", "torch", "transformers", "huggingface_hub", "faster_whisper",
               "ctranslate2", "onnxruntime", "piper", "numba", "filelock", "httpx",
               "httpcore", "urllib3", "py.warnings", "aioice", "aiortc")
_SESSION = re.compile(r"\bsess_[A-Za-z0-9_-]{8,}")
FLOOD_EVERY_S = 10.0
_DIGITS = re.compile(r"\d+")
FLOOD_KINDS = 256  # message templates remembered (bounded, I8)


class FloodGate(logging.Filter):
    """Repeated warnings and errors: the first, then one per ``every_s`` with a count."""

    def __init__(self, every_s: float = FLOOD_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._seen: OrderedDict[tuple[str, str], list[float]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        # the same words, whatever the numbers (ports, counts, pids): one kind
        key = (record.name, _DIGITS.sub("#", record.getMessage()))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.every_s:
            seen[1] += 1
            return False
        held = int(seen[1]) if seen is not None else 0
        self._seen[key] = [now, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > FLOOD_KINDS:
            self._seen.popitem(last=False)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self.every_s:.0f} s)"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the session the
    line is about (the first session id in it) for pipelines to group by."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "message": message}
        session = _SESSION.search(message)
        if session:
            line["session"] = session.group(0)
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def not_a_poll(record: logging.LogRecord) -> bool:
    """False for the access line of a health, readiness or metrics poll."""
    return record.name != "uvicorn.access" or not QUIET_PATHS.search(record.getMessage())


def configure(level: str, fmt: str, secrets: Iterable[str]) -> None:
    """Set up logging for ``serve`` (call once, before uvicorn starts)."""
    if fmt not in FORMATS:
        raise SystemExit(f"--log-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    numeric = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    logging.captureWarnings(True)
    handler.addFilter(FloodGate())
    if numeric > logging.DEBUG:
        handler.addFilter(not_a_poll)
        for name in THIRD_PARTY:
            logging.getLogger(name).setLevel(logging.ERROR)
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_DISABLE", "1")
    protect(secrets, loggers=("",))
