"""``duplex-gateway serve --workers N``: N gateway processes serving one port.

One gateway process runs one event loop, so it uses about one core
(bench/README.md); ``--workers N`` runs N of them. Each worker is a whole
gateway with its own owner id: it owns the sessions it opened exactly as a
separate host would, and a resume that reaches another worker is relayed to the
owner (``gateway.owner_relay``), or taken over once a dead owner's heartbeat
lapses.

What they share:

- The port. Every worker has its own socket bound with ``SO_REUSEPORT`` to the
  same port, and the kernel spreads new connections over those that listen, by
  a hash of the addresses. A worker listens on it only once it is ready (models
  warm, Redis up), so while one starts or restarts the others get its share
  instead of refusals (``not_ready``); one that dies takes with it only the
  connections it had not accepted yet. The parent holds the port with one more
  bound socket that never listens (``--port 0`` is resolved once, by it), so no
  other program takes the port while the workers restart.
- The store: the embedded Valkey (no ``--redis-url``) is started once, by the
  parent (``gateway.cli``), and every worker is given its URL.

What each has for itself:

- A relay address. The shared port cannot name one worker, so each also listens
  on ``--host`` at a port of its own (the parent keeps it per worker slot, so a
  restarted worker has the same one) and advertises that in Redis as where its
  sessions' owner is reached. With ``--advertise-url`` its scheme and host are
  kept and the port is the worker's.
- ``/metrics``, ``/readyz``, ``/healthz``: each answers for the worker the
  request reached.

The parent prints the ``listening`` line, and the ``ready`` line once every
worker is ready. SIGTERM or SIGINT to it sends SIGTERM to each worker, which
closes its sockets within ``--shutdown-timeout-s`` (their sessions stay
resumable); a worker still running ``WORKER_KILL_AFTER_S`` later is killed. A
worker that exits after it was ready is started again after
``RESTART_DELAY_S``; one that exits before it was ready stops the whole gateway
with its exit status: a configuration that cannot start would otherwise be
restarted for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from duplex.store.embedded import die_with_parent
from gateway.config import GatewayConfig, encode_config
from gateway.serving import banners, listen, reachable_at

log = logging.getLogger("duplex_gateway")

RESTART_DELAY_S = 1.0  # between a worker's exit and its restart
WORKER_KILL_AFTER_S = 5.0  # past --shutdown-timeout-s, before SIGKILL
READY_MARK = "duplex-gateway worker {index} ready:"


# -- the parent -----------------------------------------------------------------------


@dataclass(slots=True)
class _Slot:
    index: int
    private: socket.socket  # this worker's relay address, kept across its restarts
    relay: str  # and its URL
    pid: int | None = None
    ready: bool = False


class _Supervision:
    def __init__(self, config: GatewayConfig, port: int, slots: list[_Slot],
                 ready_line: str) -> None:
        self.config = config
        self.port = port  # the shared one
        self.slots = slots
        self.ready_line = ready_line
        self.announced = False
        self.stopping = asyncio.Event()
        self.status = 0

    def fail(self, slot: _Slot, status: int) -> None:
        if not self.stopping.is_set():
            print(f"duplex-gateway: worker {slot.index} {_described(status)} before it was "
                  f"ready; stopping the other workers", file=sys.stderr, flush=True)
            self.status = status if status > 0 else 1
            self.stopping.set()

    def saw_ready(self, slot: _Slot) -> None:
        slot.ready = True
        if not self.announced and all(s.ready for s in self.slots):
            self.announced = True
            print(self.ready_line, flush=True)


def supervise(config: GatewayConfig) -> int:
    """Run ``config.workers`` gateway processes on one port until SIGTERM/SIGINT; the
    exit status. ``config.redis_url`` is set (the caller started the store)."""
    slots: list[_Slot] = []
    hold: socket.socket | None = None
    try:
        hold = _bound(config.host, config.port)
        host, port = hold.getsockname()[:2]
        for index in range(config.workers):
            private = listen(config.host, 0)
            slots.append(_Slot(index, private, _relay_url(config, private)))
    except OSError as exc:
        for sock in [hold, *(slot.private for slot in slots)]:
            if sock is not None:
                sock.close()
        print(f"duplex-gateway: cannot listen on {config.host}:{config.port}: {exc}",
              file=sys.stderr)
        return 1
    listening, ready = banners(config, host, port, f", {config.workers} workers")
    # the shared port takes connections once a worker is ready; each worker's own
    # relay address answers (/readyz) from its start
    print(listening.partition(" (")[0] + f" ({config.workers} workers getting ready; the "
          "port takes connections once one is, each worker's /readyz at its relay "
          "address meanwhile)", flush=True)
    try:
        return asyncio.run(_supervise(_Supervision(config, port, slots, ready)))
    finally:
        hold.close()
        for slot in slots:
            slot.private.close()


def _bound(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT``, not listening: it
    gets connections only once it listens."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)  # IPPROTO_TCP: see listen
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _relay_url(config: GatewayConfig, private: socket.socket) -> str:
    """Where the other workers and gateways reach this worker's sessions."""
    host, port = private.getsockname()[:2]
    if config.advertise_url is None:
        return reachable_at(host, port, tls=config.tls)
    parts = urlsplit(config.advertise_url)
    name = parts.hostname or host
    name = f"[{name}]" if ":" in name else name
    return f"{parts.scheme}://{name}:{port}"


async def _supervise(sup: _Supervision) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, sup.stopping.set)
    await asyncio.gather(*(_keep_running(sup, slot) for slot in sup.slots))
    return sup.status


async def _keep_running(sup: _Supervision, slot: _Slot) -> None:
    """Run the slot's worker, again whenever it exits, until the gateway stops."""
    while not sup.stopping.is_set():
        try:
            proc = await _spawn(sup, slot)
        except OSError as exc:  # the port taken meanwhile, or no more processes
            log.error("cannot start worker %d: %s", slot.index, exc)
            sup.fail(slot, 1)
            return
        slot.pid, slot.ready = proc.pid, False
        pump = asyncio.create_task(_pump(sup, slot, proc))
        stop = asyncio.create_task(sup.stopping.wait())
        await asyncio.wait([pump, stop], return_when=asyncio.FIRST_COMPLETED)
        if not pump.done():
            await _stop(proc, sup.config.shutdown_timeout_s + WORKER_KILL_AFTER_S)
            await pump
            return
        stop.cancel()
        status = await proc.wait()
        if sup.stopping.is_set():
            return
        if not slot.ready:
            sup.fail(slot, status)
            return
        log.warning("worker %d (pid %d) %s; starting it again in %.3g s", slot.index,
                    proc.pid, _described(status), RESTART_DELAY_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sup.stopping.wait(), RESTART_DELAY_S)


async def _spawn(sup: _Supervision, slot: _Slot) -> asyncio.subprocess.Process:
    # a fresh socket each time: the worker's alone, so it stops taking connections
    # when the worker ends
    public = _bound(sup.config.host, sup.port)
    fds = (public.fileno(), slot.private.fileno())
    spec = {"index": slot.index, "public_fd": fds[0], "private_fd": fds[1],
            "relay": slot.relay, "config": encode_config(sup.config)}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, pass_fds=fds,
            # its own process group: a terminal's Ctrl-C reaches the parent alone, which
            # stops each worker once; PDEATHSIG ends a worker whose parent was killed
            start_new_session=True, preexec_fn=die_with_parent())
    finally:
        public.close()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(spec).encode())  # the secrets never show in ps
    await proc.stdin.drain()
    proc.stdin.close()
    return proc


async def _pump(sup: _Supervision, slot: _Slot, proc: asyncio.subprocess.Process) -> None:
    """Pass the worker's output on, and notice its ready line; until it exits."""
    assert proc.stdout is not None
    mark = READY_MARK.format(index=slot.index)
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        print(line, flush=True)
        if line.startswith(mark):
            sup.saw_ready(slot)
    await proc.wait()


async def _stop(proc: asyncio.subprocess.Process, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        log.warning("worker pid %d still running %.3g s after SIGTERM; killing it",
                    proc.pid, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def _described(status: int) -> str:
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-status).name}"
        return f"was killed by signal {-status}"
    return f"exited with status {status}"
