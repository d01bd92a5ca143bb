"""The tone plugin: deterministic synthetic voice for protocol and load tests."""

from plugins.tone.decode import decode_turn
from plugins.tone.payloads import Clause, Heard, SpokenWord
from plugins.tone.plugin import TonePlugin
from plugins.tone.vad import EnergyVad

__all__ = ["Clause", "EnergyVad", "Heard", "SpokenWord", "TonePlugin", "decode_turn"]
