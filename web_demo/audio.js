// The audio side: one AudioContext at 24 kHz (the gateway's PCM16 rate, so the
// browser does the device-rate conversion), a capture worklet for the mic and a
// playback worklet for replies. No DOM and no socket here: callers wire it up.
export const RATE = 24000;

export class AudioEngine {
  constructor({ onMicFrame, onProgress } = {}) {
    this.onMicFrame = onMicFrame || (() => {});
    this.onProgress = onProgress || (() => {});
    this.ctx = null;
    this.stream = null;
    this.capture = null;
    this.playback = null;
    this.pendingClears = [];
  }

  // Must run inside a user gesture (autoplay policy) — the Talk button.
  async start({ echoCancellation = true } = {}) {
    this.ctx = new AudioContext({ sampleRate: RATE });
    const base = new URL(".", import.meta.url);
    await this.ctx.audioWorklet.addModule(new URL("capture-worklet.js", base));
    await this.ctx.audioWorklet.addModule(new URL("playback-worklet.js", base));
    this.playback = new AudioWorkletNode(this.ctx, "playback-processor",
      { numberOfInputs: 0, outputChannelCount: [1] });
    this.playback.connect(this.ctx.destination);
    this.playback.port.onmessage = (e) => this.onPlaybackMessage(e.data);
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation, noiseSuppression: false, autoGainControl: false },
    });
    const source = this.ctx.createMediaStreamSource(this.stream);
    // Zero outputs: the node is still processed, and nothing is echoed to the speakers.
    this.capture = new AudioWorkletNode(this.ctx, "capture-processor", { numberOfOutputs: 0 });
    this.capture.port.onmessage = (e) => this.onMicFrame(e.data.pcm, e.data.rms);
    source.connect(this.capture);
    if (this.ctx.state !== "running") await this.ctx.resume();
  }

  // A remote stream (the reply's track, over WebRTC) heard frame by frame as the mic
  // is, so the page can tell when the reply's first sound arrives.
  hear(stream, onFrame) {
    const source = this.ctx.createMediaStreamSource(stream);
    this.remote = new AudioWorkletNode(this.ctx, "capture-processor", { numberOfOutputs: 0 });
    this.remote.port.onmessage = (e) => onFrame(e.data.rms);
    source.connect(this.remote);
  }

  onPlaybackMessage(msg) {
    if (msg.type === "progress") this.onProgress(msg);
    else if (msg.type === "cleared") {
      this.onProgress(msg);
      const resolve = this.pendingClears.shift();
      if (resolve) resolve(msg);
    }
  }

  enqueue(itemId, pcmBuffer) {
    this.playback?.port.postMessage({ type: "audio", itemId, pcm: pcmBuffer }, [pcmBuffer]);
  }

  flush() {
    this.playback?.port.postMessage({ type: "flush" });
  }

  // Stop playback now; resolves with the worklet's final per-item played counts.
  clear(itemId) {
    if (!this.playback) return Promise.resolve({ played: {} });
    return new Promise((resolve) => {
      this.pendingClears.push(resolve);
      this.playback.port.postMessage({ type: "clear", itemId });
    });
  }

  async stop() {
    this.stream?.getTracks().forEach((t) => t.stop());
    await this.ctx?.close();
    this.ctx = this.stream = this.capture = this.playback = this.remote = null;
  }
}

// base64 <-> ArrayBuffer without String.fromCharCode(...big array) stack limits.
export function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

export function fromBase64(b64) {
  const s = atob(b64);
  const bytes = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
  return bytes.buffer;
}
