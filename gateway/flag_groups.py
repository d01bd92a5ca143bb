"""The sections of ``duplex-gateway serve --help``: every flag in one, in order.

Only the help's layout: a flag's name, variable and default are ``gateway.config``'s.
A flag no section names is listed under "other" (tests/unit/test_gateway_config.py
fails until it has its section). The flags for models on servers apart are
``gateway.model_flags``' (not the gateway's configuration: the plugin reads
them from the environment), in one more section, ``MODEL_SERVER_GROUP``.
"""

from __future__ import annotations

# section title → (what it is about, its flags in the order --help lists them)
FLAG_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "basics": ("where it listens and where the embedded store lives",
               ("host", "port", "data_dir")),
    "models": ("what answers", ("plugin",)),
    "sessions": ("what one session may hold and how long it lives", (
        "max_sessions", "max_sessions_per_process", "disconnect_grace_s", "idle_ttl_s",
        "max_session_s", "output_lead_ms", "max_message_bytes", "max_pending_commands",
        "max_conversation_items", "max_conversation_bytes")),
    "store": ("Redis or the embedded Valkey, and what a session keeps there for resume", (
        "redis_url", "redis_replica_acks", "journal_max_events", "resume_replay_ttl_s",
        "resume_replay_max_bytes", "ended_session_retention_s", "reaper_interval_s",
        "store_timeout_s", "store_down_unhealthy_s", "session_max_store_bytes",
        "retained_max_store_bytes", "valkey_maxmemory")),
    "security and TLS": ("who may connect, and over what", (
        "api_key", "allowed_origins", "ssl_certfile", "ssl_keyfile", "ssl_ca_file")),
    "connections": ("the door: how many, how slow, how compressed", (
        "max_connections", "fd_reserve", "max_incomplete_per_address",
        "max_sessions_per_address", "header_timeout_s",
        "ws_compression")),
    "WebRTC": ("POST /v1/realtime/calls (the webrtc extra; docs/webrtc.md)", (
        "webrtc_max_offer_bytes", "webrtc_ice_timeout_s")),
    "telephony": ("the carriers' routes (each off until its credential is set)", (
        "public_url", "twilio_auth_token", "twilio_instructions", "telnyx_public_key",
        "telnyx_instructions", "telnyx_codec", "plivo_auth_token", "plivo_instructions",
        "vonage_signature_secret", "exotel_credentials")),
    "scaling": ("more processes and more hosts on one store", (
        "workers", "advertise_url", "shutdown_timeout_s", "loop")),
    "logging and tracing": ("what it says, and to whom", ("log_level", "log_format", "otel")),
}

# the thinker's, listener's and talker's servers (gateway.model_flags.FLAGS, in its order)
MODEL_SERVER_GROUP = ("models on their own servers",
                      "the thinker, listener and talker on OpenAI-compatible servers apart "
                      "(docs/model-servers.md)")
