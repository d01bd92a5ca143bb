"""The session runtime: one session's room, from a client's frame to its events.

Three parts and the loop between them:

- the **inbox** (``inbox``; what it carries: ``items``) is everything the session
  is to handle and the one place its worker waits: lanes (I7, I8), reply media
  held until due, the session's timers;
- the **machine** (``machine``) turns one inbox item into actions (``actions``),
  synchronously: the sans-I/O core (``duplex.session``), the session's audio and
  VAD (``audio``), the plugin's plan, and what stage output does to the
  conversation (``replies``);
- the **outbox** (``outbox``) is where the session's words leave it: journaled,
  then sent (I4; ``journal``), through the socket it owns (``attachment``), with
  every write of the session to the store (``history``, epochs, the lease, the end);
- the **runner** (``runner``) takes an item from the inbox, lets the machine turn
  it into actions, and carries them out through the outbox, the orchestrator or
  the inbox; it is also the session's face to the transports and the orchestrator.

Time comes from a ``clock.Clock`` (the loop's, or one a test moves). ``restore``
rebuilds a session's core from what Redis holds, for a takeover.
"""
