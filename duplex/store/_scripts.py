"""The Lua scripts, read from package files and registered on a client.

``_lib.lua`` is prepended to each script so the fence and lease rules exist
once; not to one that starts with flags (``#!lua flags=…``), which must come
first. ``register_script`` objects re-load themselves on NOSCRIPT (a restarted
server has an empty script cache).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript


def _source(name: str) -> str:
    return (resources.files(__package__) / "scripts" / f"{name}.lua").read_text("utf-8")


@dataclass(frozen=True, slots=True)
class Scripts:
    admit: AsyncScript
    open: AsyncScript
    readmit: AsyncScript
    release: AsyncScript
    forget: AsyncScript
    renew: AsyncScript
    bump_epoch: AsyncScript
    append_events: AsyncScript
    trim_journal: AsyncScript
    settled_last_seq: AsyncScript
    history_append: AsyncScript
    history_replace: AsyncScript
    history_delete: AsyncScript
    close: AsyncScript
    detach: AsyncScript
    resume: AsyncScript
    confirm_token: AsyncScript
    set_config: AsyncScript
    take_over: AsyncScript
    claim_expired: AsyncScript
    finish_expiry: AsyncScript
    due_buckets: AsyncScript

    @classmethod
    def register(cls, client: aioredis.Redis) -> Scripts:
        lib = _source("_lib")
        sources = {f.name: _source(f.name) for f in fields(cls)}
        loaded = {name: client.register_script(text if text.startswith("#!") else lib + "\n" + text)
                  for name, text in sources.items()}
        return cls(**loaded)
