"""HAProxy (Debian's package) run with ``deploy/haproxy.cfg`` as shipped, in
front of two gateways: the balancer of the deployments in tests/deploy."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

from gateway_process import REPO, GatewayProcess
from redis_server import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
INSTALLED = os.path.exists(HAPROXY)


def wait_listening(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # haproxy says nothing when it listens: poll
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"haproxy is not listening on {port}")


@contextlib.contextmanager
def balancing(gateways: list[GatewayProcess]) -> Iterator[str]:
    """HAProxy over ``gateways`` (two): yields the address clients connect to."""
    port = free_port()
    env = {**os.environ, "DG_LISTEN": f"127.0.0.1:{port}",
           "DG_GATEWAY1": gateways[0].address, "DG_GATEWAY2": gateways[1].address}
    config = REPO / "deploy" / "haproxy.cfg"
    check = subprocess.run([HAPROXY, "-c", "-f", str(config)], env=env,
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_listening(port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
