"""Telephony carriers (Twilio Media Streams) on one carrier-neutral bridge onto
ordinary sessions: ``bridge`` and ``call_stream`` are the bridge, ``twilio`` and
``twilio_codec`` the carrier."""
