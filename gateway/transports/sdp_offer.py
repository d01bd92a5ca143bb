"""What a WebRTC offer must hold before a peer connection is made for it, no I/O.

``POST /v1/realtime/calls`` answers an SDP offer. Before the WebRTC stack sees it
(and before a session is opened for it) the offer is checked here: under the byte
limit, an SDP session description, one audio section that offers Opus at 48 kHz
(the only codec the gateway speaks on the track), a DTLS fingerprint (else the
call would fail only later, at the handshake), and the SCTP section that
carries the ``oai-events`` data channel. What fails is a clear ``InvalidRequest``
that the endpoint answers with a 400, leaving nothing behind.
"""

from __future__ import annotations

import re

from duplex.errors import InvalidRequest

_OPUS = re.compile(r"^a=rtpmap:(\d+) opus/48000(/\d+)?\s*$", re.IGNORECASE | re.MULTILINE)


def check_offer(sdp: str, *, max_bytes: int) -> str:
    """``sdp`` as the WebRTC stack takes it (CRLF line ends), or why not."""
    size = len(sdp.encode())
    if size > max_bytes:
        raise InvalidRequest(f"the SDP offer has {size} bytes, over the {max_bytes}-byte "
                             "limit", code="sdp_too_large", param="sdp")
    lines = [line.strip() for line in sdp.strip().splitlines()]
    if not lines or lines[0] != "v=0" or not any(line.startswith("o=") for line in lines):
        raise InvalidRequest("the body is not an SDP offer (it must start with v=0)",
                             code="invalid_sdp", param="sdp")
    if not any(line.startswith("a=fingerprint:") for line in lines):
        raise InvalidRequest("the SDP offer has no DTLS fingerprint (a=fingerprint), which "
                             "WebRTC requires", code="invalid_sdp", param="sdp")
    sections = _media_sections(lines)
    audio = [s for s in sections if s[0].startswith("m=audio ")]
    if not audio:
        raise InvalidRequest("the SDP offer has no audio section (m=audio)",
                             code="invalid_sdp", param="sdp")
    if not any(_offers_opus(section) for section in audio):
        raise InvalidRequest("the SDP offer's audio does not offer Opus at 48 kHz, the one "
                             "codec the gateway speaks", code="unsupported_codec", param="sdp")
    if not any(s[0].startswith("m=application ") and "webrtc-datachannel" in s[0]
               for s in sections):
        raise InvalidRequest("the SDP offer has no data channel section (m=application "
                             "... webrtc-datachannel): create the oai-events channel before "
                             "the offer", code="invalid_sdp", param="sdp")
    return "\r\n".join(lines) + "\r\n"


def _media_sections(lines: list[str]) -> list[list[str]]:
    sections: list[list[str]] = []
    for line in lines:
        if line.startswith("m="):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    return sections


def _offers_opus(section: list[str]) -> bool:
    """The m= line lists a payload type that an rtpmap maps to opus/48000."""
    listed = set(section[0].split()[3:])
    return any(m.group(1) in listed for m in _OPUS.finditer("\n".join(section[1:])))
