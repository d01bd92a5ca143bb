"""The flags that turn the Telnyx and Plivo routes on, with the emulators' credentials
(a module of its own: importing from ``conftest`` is ambiguous across test folders)."""

from __future__ import annotations

from telnyx_emulator import PUBLIC_KEY
from twilio_helpers import AUTH_TOKEN

CARRIER_FLAGS = ("--telnyx-public-key", PUBLIC_KEY, "--plivo-auth-token", AUTH_TOKEN)
