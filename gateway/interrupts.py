"""Ctrl-C (SIGINT) stops ``serve`` as SIGTERM does, without a traceback.

Python turns SIGINT into ``KeyboardInterrupt``, raised wherever the main thread
is: in an import of the models' libraries, in the embedded store's start, or,
once uvicorn has shut down and raised the signal again (as it does for both), in
asyncio's runner, which then waits for a model load still running in a thread
until a second Ctrl-C prints a traceback from the thread join. SIGTERM has none
of that: until uvicorn takes both signals for its graceful shutdown, and again
after it, it ends the process. So SIGINT is given SIGTERM's action: whatever
SIGTERM's handler is (the default, or coverage's, which saves its data first).

The embedded Valkey and ``--workers``' workers run in sessions of their own, so a
terminal's Ctrl-C reaches the gateway alone, and the gateway stops them: each
once, in order, not all at the same moment.
"""

from __future__ import annotations

import signal


def interrupt_as_terminate() -> None:
    """Give SIGINT what SIGTERM does now (call from the main thread)."""
    action = signal.getsignal(signal.SIGTERM)
    # None: a handler installed outside Python; the default is what SIGTERM then does
    signal.signal(signal.SIGINT, signal.SIG_DFL if action is None else action)
