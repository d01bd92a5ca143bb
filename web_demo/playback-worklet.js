// Reply audio → speakers: a FIFO jitter buffer of PCM16 chunks tagged by item.
// Gapless because chunks are concatenated sample-exactly; a short prebuffer
// absorbs network jitter before a new item starts. It counts what was really
// rendered per item, because barge-in must truncate at what the person heard,
// not at what was received.
const PREBUFFER = 1440; // 60 ms at 24 kHz

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // {itemId, data: Float32Array, off}
    this.buffered = 0;
    this.playing = false;
    this.flushed = false; // the server said the item's audio is complete
    this.played = new Map(); // itemId → samples rendered
    this.chunks = 0;
    this.samples = 0;
    this.quanta = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(msg) {
    if (msg.type === "audio") {
      const pcm = new Int16Array(msg.pcm);
      const data = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) data[i] = pcm[i] / 0x8000;
      this.queue.push({ itemId: msg.itemId, data, off: 0 });
      this.buffered += data.length;
      this.chunks++;
      this.flushed = false;
    } else if (msg.type === "flush") {
      this.flushed = true; // play out the tail even if below the prebuffer
    } else if (msg.type === "clear") {
      // Barge-in: drop everything queued and report what was heard, in the same
      // message so the main thread truncates at an exact, final number.
      const itemId = this.queue.length ? this.queue[0].itemId : msg.itemId;
      this.queue = [];
      this.buffered = 0;
      this.playing = false;
      this.port.postMessage({ type: "cleared", itemId, reqItemId: msg.itemId,
        played: Object.fromEntries(this.played) });
    }
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    if (!this.playing && (this.buffered >= PREBUFFER || (this.flushed && this.buffered > 0))) {
      this.playing = true;
    }
    let w = 0;
    while (this.playing && w < out.length && this.queue.length) {
      const head = this.queue[0];
      const n = Math.min(out.length - w, head.data.length - head.off);
      out.set(head.data.subarray(head.off, head.off + n), w);
      head.off += n;
      w += n;
      this.buffered -= n;
      this.samples += n;
      this.played.set(head.itemId, (this.played.get(head.itemId) || 0) + n);
      if (head.off === head.data.length) this.queue.shift();
    }
    if (this.playing && this.queue.length === 0) this.playing = false; // underrun: re-prebuffer
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    // ~every 43 ms at 24 kHz: enough for a ms-accurate UI without flooding the port.
    if (++this.quanta % 8 === 0 || w > 0 && this.queue.length === 0) {
      this.port.postMessage({ type: "progress", chunks: this.chunks, samples: this.samples,
        buffered: this.buffered, played: Object.fromEntries(this.played) });
    }
    return true;
  }
}

registerProcessor("playback-processor", PlaybackProcessor);
