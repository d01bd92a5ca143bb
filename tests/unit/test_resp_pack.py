"""The write batcher's RESP packer sends what redis-py would have sent."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection

from duplex.store.batch import pack

EVENT = '{"type":"response.output_audio.delta","delta":"' + "QUJD" * 4000 + '"}'


@pytest.mark.parametrize("commands", [
    [("PING",)],
    [("EVALSHA", "a" * 40, 3, "k:meta", "k:journal", "leases", "sess", "owner", 7, 20000,
      "1733000000.125", "", "5-0", EVENT, "6-0", '{"text":"héllo ✓ 日本"}')],
    [("SET", "k", b"\x00\xff raw"), ("INCRBYFLOAT", "f", 0.1), ("INCRBY", "n", -12),
     ("WAIT", 1, 1000)],
])
def test_pack_matches_redis_py_byte_for_byte(commands: list[tuple[object, ...]]) -> None:
    assert pack(commands) == b"".join(Connection().pack_commands(commands))


@pytest.mark.parametrize("bad", [True, None, ["a"]])
def test_an_argument_redis_py_refuses_is_refused(bad: object) -> None:
    with pytest.raises(TypeError, match="a Redis argument must be"):
        pack([("SET", "k", bad)])
