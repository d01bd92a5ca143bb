"""Which core method a client command goes to (the transport commands are the
runner's: ``apply_command`` says False for them)."""

from __future__ import annotations

from duplex import commands as c
from duplex.session import SessionCore


def apply_command(core: SessionCore, cmd: c.Command) -> bool:
    """Route a conversation command to the core; False for transport commands
    (ack, close, resume, audio append) that the runner owns."""
    match cmd:
        case c.UpdateSession():
            core.update_session(cmd)
        case c.CommitInput():
            core.commit(cmd)
        case c.ClearInput():
            core.clear_input()
        case c.CreateResponse():
            core.create_response(cmd)
        case c.CancelResponse():
            core.cancel_response(cmd)
        case c.ClearOutputAudio():
            core.clear_output_audio()
        case c.CreateItem():
            core.create_item(cmd)
        case c.RetrieveItem():
            core.retrieve_item(cmd)
        case c.DeleteItem():
            core.delete_item(cmd)
        case c.TruncateItem():
            core.truncate_item(cmd)
        case c.PlaybackAck():
            core.playback_ack(cmd)
        case c.Heartbeat():
            core.heartbeat()
        case c.DtmfReceived():
            core.dtmf_received(cmd)
        case _:
            return False
    return True
