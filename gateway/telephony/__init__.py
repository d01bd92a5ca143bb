"""Telephony carriers on one carrier-neutral bridge onto ordinary sessions:
``bridge`` and ``call_stream`` are the bridge; ``twilio``/``twilio_codec``,
``vonage``/``vonage_codec`` and ``exotel``/``exotel_codec`` the carriers
(``chunking``: the fixed frame sizes of the raw-PCM ones)."""
