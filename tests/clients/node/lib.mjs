// What every driver shares: speech the tone plugin hears, an ordered inbox of what a
// client delivered, and one way to end: a JSON report on stdout.
//
// A driver collects what its client's user would see (events, transcripts, audio
// byte counts, errors) and prints it; tests/clients/ asserts on that report.

export const RATE = 24000;
export const HEAD_BYTES = 9600; // the first 200 ms word: enough to decode the turn

/** PCM16 little-endian mono at 24 kHz: a sine (the tone plugin hears it as speech). */
export function tone(seconds, hz = 440) {
  const n = Math.round(RATE * seconds);
  const pcm = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) {
    const v = hz ? Math.round(0.3 * 32767 * Math.sin((2 * Math.PI * hz * i) / RATE)) : 0;
    pcm.writeInt16LE(v, i * 2);
  }
  return pcm;
}

export const silence = (seconds) => tone(seconds, 0);

/** ``buf`` cut in 20 ms frames, as a microphone would deliver it. */
export function* frames(buf) {
  for (let i = 0; i < buf.length; i += 960) yield buf.subarray(i, i + 960);
}

export const audioMs = (bytes) => Math.floor((bytes / 2 / RATE) * 1000);

/**
 * Everything a client delivered, in order. ``until`` waits for the next event after
 * the last one it returned, so nothing that arrives between two waits is missed.
 */
export class Inbox {
  constructor(timeoutMs = 20000) {
    this.events = [];
    this.cursor = 0;
    this.timeoutMs = timeoutMs;
    this.waiter = null;
  }

  push(event) {
    this.events.push(event);
    this.waiter?.();
  }

  async until(match, what = String(match)) {
    const test = typeof match === 'string' ? (e) => e.type === match : match;
    const deadline = Date.now() + this.timeoutMs;
    for (;;) {
      while (this.cursor < this.events.length) {
        const event = this.events[this.cursor++];
        if (test(event)) return event;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => { clearTimeout(timer); resolve(); };
      });
      this.waiter = null;
    }
  }

  /** Where the next ``until`` starts; ``rewind`` goes back there (events stay in order). */
  mark() {
    return this.cursor;
  }

  rewind(mark) {
    this.cursor = mark;
  }

  count(type) {
    return this.events.filter((e) => e.type === type).length;
  }
}

/** What one response brought: its audio (size and first word) and its transcript. */
export class Responses {
  constructor() {
    this.byId = new Map();
  }

  of(id) {
    if (!this.byId.has(id)) {
      this.byId.set(id, { id, audio_bytes: 0, head: [], transcript: '', first_at: null });
    }
    return this.byId.get(id);
  }

  audio(id, bytes) {
    const r = this.of(id);
    r.first_at ??= Date.now();
    if (r.audio_bytes < HEAD_BYTES) r.head.push(Buffer.from(bytes).subarray(0, HEAD_BYTES - r.audio_bytes));
    r.audio_bytes += bytes.byteLength;
  }

  text(id, delta) {
    this.of(id).transcript += delta;
  }

  /**
   * Resolves once ``ms`` of a response's audio has played, were it played as it came:
   * from its first delta on, in real time. That is how the SDKs reckon what was heard,
   * and a user who answers waits for the end; a user who interrupts, for some of it.
   */
  async played(id, ms = audioMs(this.of(id).audio_bytes)) {
    const left = this.of(id).first_at + ms - Date.now();
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  }

  report(id) {
    const r = this.of(id);
    return { id, audio_bytes: r.audio_bytes, audio_ms: audioMs(r.audio_bytes),
             head_b64: Buffer.concat(r.head).toString('base64'), transcript: r.transcript };
  }
}

/**
 * The server events among ``events`` (a driver's own markers start with `#`), as they
 * came, for the test's check against the openai package's types; an audio delta's
 * payload is cut to 8 characters (the types say only "a string") to keep reports small.
 */
export function serverEvents(events) {
  return events.filter((e) => !e.type.startsWith('#')).map((e) => (
    e.type.endsWith('audio.delta') && typeof e.delta === 'string'
      ? { ...e, delta: e.delta.slice(0, 8) } : e));
}

/** Run ``body(report)``; print ``report`` as JSON (with ``failure`` if it threw) and exit. */
export async function run(body, limitMs = 60000) {
  const report = {};
  const limit = setTimeout(() => finish(new Error(`driver ran past ${limitMs} ms`)), limitMs);
  function finish(error) {
    clearTimeout(limit);
    if (error) report.failure = String(error?.stack ?? error);
    // a pipe's writes are asynchronous: exit once the whole report is out (over 64 KiB,
    // exiting at once would cut it)
    process.stdout.write(JSON.stringify(report) + '\n', () => process.exit(error ? 1 : 0));
  }
  try {
    await body(report);
    finish(null);
  } catch (error) {
    finish(error);
  }
}

/** The gateway's address and key, from the environment the test sets. */
export function gateway() {
  const base = process.env.GATEWAY_HTTPS_BASE; // https://127.0.0.1:PORT/v1
  const apiKey = process.env.GATEWAY_API_KEY;
  if (!base || !apiKey) throw new Error('GATEWAY_HTTPS_BASE and GATEWAY_API_KEY must be set');
  return { base, apiKey, wss: base.replace(/^https:/, 'wss:') };
}
