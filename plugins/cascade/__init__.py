"""The cascade plugin: the default CPU voice agent (VAD + ASR → LLM → TTS).

Stage 0 (listener: silero VAD + Whisper tiny.en), stage 1 (thinker, vLLM),
stage 2 (talker: piper). The speech packages are imported lazily, inside the
``load()`` methods, so importing this package needs none of them.
"""
