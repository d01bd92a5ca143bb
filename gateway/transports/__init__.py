"""The transport edge: wire protocols as codecs, served by one loop.

- ``codec``: what a protocol is (``parse`` a frame, ``render`` an event), no I/O;
  ``realtime_codec`` (OpenAI Realtime, GA and beta), and the carriers' under
  ``gateway.telephony`` (Twilio, Vonage, Exotel).
- ``frames``: one socket's frames in and out (uvicorn's fast path behind it).
- ``attachment``: a socket as the session sees it; ``loop``: the one read loop.
- ``session``: what a transport needs from a session (a protocol owned here).

An endpoint does its protocol's handshake (``gateway.realtime``, a carrier's
``gateway.telephony``), attaches a ``SocketAttachment`` to the session and hands
it to ``loop.serve``.
"""
