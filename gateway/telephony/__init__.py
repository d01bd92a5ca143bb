"""Telephony transports (Twilio Media Streams) as adapters onto ordinary sessions."""
