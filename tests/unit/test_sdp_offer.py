"""What a WebRTC offer must hold before the gateway negotiates it (no I/O)."""

from __future__ import annotations

import pytest

from duplex.errors import InvalidRequest
from gateway.transports.sdp_offer import check_offer

OFFER = """v=0
o=- 1 1 IN IP4 0.0.0.0
s=-
t=0 0
a=group:BUNDLE 0 1
m=audio 9 UDP/TLS/RTP/SAVPF 111 0
c=IN IP4 0.0.0.0
a=mid:0
a=rtpmap:111 opus/48000/2
a=rtpmap:0 PCMU/8000
a=ice-ufrag:abcd
a=ice-pwd:0123456789abcdef012345
a=fingerprint:sha-256 AB:CD
a=setup:actpass
m=application 9 UDP/DTLS/SCTP webrtc-datachannel
a=mid:1
a=sctp-port:5000
"""


def refusal(sdp: str, max_bytes: int = 32 * 1024) -> str:
    with pytest.raises(InvalidRequest) as caught:
        check_offer(sdp, max_bytes=max_bytes)
    assert caught.value.param == "sdp"
    return caught.value.code


def test_a_browser_like_offer_passes_with_crlf_line_ends() -> None:
    checked = check_offer(OFFER, max_bytes=32 * 1024)
    assert checked.startswith("v=0\r\no=") and checked.endswith("a=sctp-port:5000\r\n")
    assert "\n" not in checked.replace("\r\n", "")


def test_each_missing_part_is_named() -> None:
    assert refusal(OFFER, max_bytes=100) == "sdp_too_large"
    assert refusal("hello") == "invalid_sdp"
    assert refusal("") == "invalid_sdp"
    assert refusal(OFFER.replace("o=- 1 1", "x=- 1 1")) == "invalid_sdp"
    assert refusal(OFFER.replace("a=fingerprint:", "a=x-fingerprint:")) == "invalid_sdp"
    assert refusal(OFFER.replace("m=audio", "m=video")) == "invalid_sdp"
    assert refusal(OFFER.replace("webrtc-datachannel", "other")) == "invalid_sdp"


def test_audio_without_opus_at_48_khz_is_an_unsupported_codec() -> None:
    assert refusal(OFFER.replace("opus/48000/2", "opus/16000")) == "unsupported_codec"
    # an rtpmap for a payload type the m= line does not list offers nothing
    assert refusal(OFFER.replace("111 0\n", "0\n")) == "unsupported_codec"
    # mono Opus, and upper case, are Opus all the same
    check_offer(OFFER.replace("opus/48000/2", "OPUS/48000"), max_bytes=32 * 1024)
