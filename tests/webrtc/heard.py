"""What a WebRTC client heard on the gateway's track: reply audio, by the 20 ms frame."""

from __future__ import annotations

import numpy as np
from client import eventually
from peer_client import PeerClient

FRAME_MS = 20
LOUD_RMS = 300.0  # the tone plugin's reply is far louder; Opus's silence is near 0


def loud(frame: np.ndarray) -> bool:
    return float(np.sqrt(np.mean(frame.astype(np.float64) ** 2))) > LOUD_RMS


def loud_ms(peer: PeerClient, since: int = 0, until: int | None = None) -> int:
    """Milliseconds of reply audio heard from frame ``since`` on (to ``until``)."""
    return FRAME_MS * sum(loud(f) for f in peer.heard[since:until])


def loud_audio(peer: PeerClient, since: int = 0) -> np.ndarray:
    frames = [f for f in peer.heard[since:] if loud(f)]
    return np.concatenate(frames) if frames else np.zeros(0, np.int16)


async def heard_at_least(peer: PeerClient, ms: int, since: int = 0,
                         timeout: float = 30.0) -> int:
    """Once ``ms`` of reply audio was heard from frame ``since`` on: how much."""
    async def check() -> int:
        return loud_ms(peer, since) if loud_ms(peer, since) >= ms else 0

    return await eventually(check, timeout, f"{ms} ms of reply audio heard on the track")


async def heard_through(peer: PeerClient, frames: int, since: int = 0,
                        timeout: float = 120.0) -> int:
    """Once the track has run ``frames`` 20 ms frames past its first loud one from frame
    ``since`` on: that first loud frame's index. The gateway's track sends a frame
    every 20 ms, silence between replies, so the frames heard are a clock; loudness
    alone is not (Opus moves a frame near the floor either way)."""
    async def check() -> int | None:
        first = next((i for i in range(since, len(peer.heard)) if loud(peer.heard[i])), None)
        return first if first is not None and len(peer.heard) >= first + frames else None

    first = await eventually(check, timeout, f"{frames} frames heard past the reply's start")
    return first
