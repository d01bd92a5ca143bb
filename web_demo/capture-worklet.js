// Microphone → 24 kHz mono PCM16 frames of 20 ms, posted to the main thread.
// Runs on the audio thread. Browsers hand us whatever the device gives (the
// Chromium fake mic is 2 ch at 44.1 kHz even for a mono WAV), so we downmix and
// resample linearly here instead of trusting getUserMedia constraints.
const OUT_RATE = 24000;
const FRAME = 480; // 20 ms at 24 kHz

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / OUT_RATE; // input samples per output sample
    this.pos = 0; // fractional read position into `this.tail` + current block
    this.prev = 0; // last input sample of the previous block (interpolation)
    this.frame = new Int16Array(FRAME);
    this.fill = 0;
    this.sumSq = 0;
  }

  process(inputs) {
    const chans = inputs[0];
    if (!chans || chans.length === 0) return true;
    const n = chans[0].length;
    const mono = new Float32Array(n);
    for (const ch of chans) for (let i = 0; i < n; i++) mono[i] += ch[i] / chans.length;
    // Linear interpolation; index -1 is the previous block's last sample.
    while (this.pos < n) {
      const i = Math.floor(this.pos);
      const f = this.pos - i;
      const a = i === 0 ? this.prev : mono[i - 1];
      const b = mono[i];
      // pos is measured so that pos==k means "between sample k-1 and k".
      this.push(a + (b - a) * f);
      this.pos += this.step;
    }
    this.pos -= n;
    this.prev = mono[n - 1];
    return true;
  }

  push(x) {
    const s = Math.max(-1, Math.min(1, x));
    this.sumSq += s * s;
    this.frame[this.fill++] = s < 0 ? s * 0x8000 : s * 0x7fff;
    if (this.fill === FRAME) {
      const pcm = this.frame;
      this.port.postMessage({ rms: Math.sqrt(this.sumSq / FRAME), pcm: pcm.buffer }, [pcm.buffer]);
      this.frame = new Int16Array(FRAME);
      this.fill = 0;
      this.sumSq = 0;
    }
  }
}

registerProcessor("capture-processor", CaptureProcessor);
