"""The WebRTC tier's gateway limits that its tests reckon with too (a module of its
own: ``conftest`` is a name every test folder shares, so importing from it is
ambiguous when tiers are collected together)."""

ICE_TIMEOUT_S = "3"  # --webrtc-ice-timeout-s: an abandoned offer's session ends this soon
