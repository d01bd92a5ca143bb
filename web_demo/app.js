// Page wiring: buttons and settings → socket; socket events → audio and DOM.
// Barge-in and latency live here because they need both the socket and audio.
import { AudioEngine, RATE, fromBase64, toBase64 } from "./audio.js";
import { RealtimeConnection } from "./connection.js";
import { Transcript } from "./transcript.js";
import { WebRTCConnection } from "./webrtc.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const wsUrl = params.get("ws") ||
  `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;
const callsUrl = `${location.origin}/v1/realtime/calls`;
// WebSocket (audio as base64 in JSON, played by our worklet) or WebRTC (Opus on the
// peer connection's tracks, played by the browser): ?transport=webrtc, or the switch
if (params.get("transport") === "webrtc") document.getElementById("transport").value = "webrtc";
const webrtc = () => $("transport").value === "webrtc";
const REPLY_SOUND_RMS = 0.01; // the reply's track: above this, its first sound has come

// Counters for the person (some) and for tests (all): see window.__duplexDemo.
const stats = {
  micFrames: 0, micRmsMax: 0, sentFrames: 0, audioDeltas: 0,
  playbackChunks: 0, playedSamples: 0, replyFrames: 0, bargeIns: 0,
  truncates: [], latenciesMs: [], splits: [], errors: [], states: [], events: {},
  // per turn end: where this page's last voiced sample and the server's end of speech
  // fell on the session's input clock (ms of audio sent), to check they agree
  speechEnds: [],
};

const transcript = new Transcript($("transcript"));
let conn = null;
let audio = null;
let currentItem = null; // the assistant audio item being played
const received = new Map(); // itemId → samples received
const played = new Map(); // itemId → samples rendered (from the worklet)
const truncated = new Set(); // items we already cut: late deltas for them are dropped
// Mouth to ear, as `duplex-gateway call` measures it: from the mic frame holding the
// person's last voiced sample (found by its energy, not from a server event) to the
// reply's first audio. A frame is voiced within 35 dB of the turn's loudest frame and
// above both the room's noise (twice its RMS) and -55 dBFS.
const voice = { peak: 0, noise: 1, lastVoicedAt: null, lastVoicedMs: null, waitFrom: null };
const BELOW_PEAK = 10 ** (-35 / 20);
const FRAME_SAMPLES = 480; // the capture worklet's 20 ms frames
const FLOOR = 10 ** (-55 / 20);

function showState(state, detail) {
  stats.states.push(state);
  const out = $("state");
  out.value = state === "reconnecting" ? "reconnecting…" : state;
  out.dataset.state = state;
  $("state-detail").textContent = detail || "";
  if (state === "expired") transcript.notice(detail);
  if (state === "resumed") transcript.notice("connection restored; session resumed");
}

function settingsUpdate() {
  const threshold = Number($("threshold").value);
  const silence = $("silence").value.trim();
  // No silence given: semantic_vad, which ends a finished question sooner.
  const turnDetection = silence === "" ? { type: "semantic_vad" }
    : { type: "server_vad", threshold, silence_duration_ms: Math.round(Number(silence)) };
  return { type: "session.update", session: {
    type: "realtime",
    instructions: $("instructions").value,
    audio: { input: { turn_detection: turnDetection } },
  } };
}

function applySettings(e) {
  e?.preventDefault();
  const ok = conn?.send(settingsUpdate());
  $("settings-status").value = ok ? "sent…" : "will apply when connected";
}

function onEvent(ev) {
  stats.events[ev.type] = (stats.events[ev.type] || 0) + 1;
  switch (ev.type) {
    case "session.created":
      // Settings typed before Talk apply to the new session (also after an expiry).
      conn.send(settingsUpdate());
      break;
    case "session.updated":
      $("settings-status").value = "applied";
      break;
    case "input_audio_buffer.speech_started":
      voice.waitFrom = null;
      bargeIn("speech");
      break;
    case "conversation.item.truncated":
      // over WebRTC the gateway cuts the reply at what its track played
      if (webrtc()) {
        stats.bargeIns++;
        stats.truncates.push({ itemId: ev.item_id, audio_end_ms: ev.audio_end_ms, why: "speech" });
        transcript.interrupted(ev.item_id);
      }
      break;
    case "input_audio_buffer.speech_stopped":
      voice.waitFrom = voice.lastVoicedAt; // the wait began there, not at this event
      stats.speechEnds.push({ voicedEndMs: voice.lastVoicedMs, audioEndMs: ev.audio_end_ms });
      break;
    case "conversation.item.input_audio_transcription.completed":
      transcript.user(ev.item_id, ev.transcript);
      break;
    case "response.output_audio_transcript.delta":
    case "response.audio_transcript.delta":
      if (!truncated.has(ev.item_id)) transcript.assistant(ev.item_id, ev.delta);
      break;
    case "response.output_audio.delta":
    case "response.audio.delta":
      onAudio(ev);
      break;
    case "response.output_audio.done":
    case "response.audio.done":
      audio?.flush();
      break;
    case "response.done":
      if (ev.response?.status === "cancelled") bargeIn("cancelled");
      else audio?.flush();
      showSplit(ev.timings_ms);
      break;
    case "error":
      stats.errors.push(ev.error);
      transcript.notice(`error: ${ev.error?.message || ev.error?.code}`);
      break;
  }
}

function onAudio(ev) {
  if (truncated.has(ev.item_id)) return; // cut by barge-in; the server may still be sending
  const pcm = fromBase64(ev.delta);
  stats.audioDeltas++;
  received.set(ev.item_id, (received.get(ev.item_id) || 0) + pcm.byteLength / 2);
  currentItem = ev.item_id;
  replyHeard();
  audio?.enqueue(ev.item_id, pcm);
}

// The reply's first sound: the end of the wait, mouth to ear.
function replyHeard() {
  if (voice.waitFrom === null) return;
  const ms = Math.round(performance.now() - voice.waitFrom);
  stats.latenciesMs.push(ms);
  $("latency").value = `${ms} ms`;
  $("split").textContent = "";
  voice.waitFrom = null;
  voice.peak = 0; // the next turn's loudness is its own
}

// Over WebRTC the reply plays from the peer connection's track: an <audio> element
// plays it (Chrome sends a remote track to Web Audio only once one does), and the
// capture worklet hears it, for the latency.
function onReplyTrack(stream) {
  const player = $("reply");
  player.srcObject = stream;
  player.play().catch(() => {});
  audio?.hear(stream, (rms) => {
    if (rms < REPLY_SOUND_RMS) return;
    stats.replyFrames++;
    replyHeard();
  });
}

// Stop playback at once and tell the gateway how much of the item was heard, so
// the conversation history holds only what the person actually heard.
async function bargeIn(why) {
  const itemId = currentItem;
  if (!itemId || truncated.has(itemId) || !audio) return;
  if ((played.get(itemId) || 0) >= (received.get(itemId) || 0) && why === "speech") return;
  truncated.add(itemId);
  const res = await audio.clear(itemId);
  const samples = res.played[itemId] || 0;
  const ms = Math.floor((samples * 1000) / RATE);
  stats.bargeIns++;
  stats.truncates.push({ itemId, audio_end_ms: ms, why });
  conn.send({ type: "conversation.item.truncate", item_id: itemId, content_index: 0,
    audio_end_ms: ms });
  conn.send({ type: "playback.ack", played_ms: ms, item_id: itemId, truncate: true });
  transcript.interrupted(itemId);
}

function onProgress(msg) {
  for (const [id, n] of Object.entries(msg.played)) played.set(id, n);
  if (msg.chunks !== undefined) {
    stats.playbackChunks = msg.chunks;
    stats.playedSamples = msg.samples;
  }
}

// The server's split of the wait (response.done's timings_ms), next to it.
// Each step counts from the turn's end, so each is at least the one before it.
const PHASES = { turn_detection: "turn end", transcribe: "transcribe",
  first_token: "first token", first_clause: "first clause", speak_first_output: "speak",
  first_audio: "first audio sent" };

function showSplit(timings) {
  if (!timings || timings.first_audio === undefined) return;
  stats.splits.push(timings);
  $("split").textContent = Object.entries(PHASES)
    .filter(([key]) => timings[key] !== undefined)
    .map(([key, name]) => `${name} ${Math.round(timings[key])} ms`).join(" · ");
}

function hearFrame(rms, now) {
  voice.noise = Math.min(rms, voice.noise * 1.001 + 1e-7); // the quietest, rising slowly
  voice.peak = Math.max(voice.peak, rms);
  if (rms >= Math.max(voice.peak * BELOW_PEAK, 2 * voice.noise, FLOOR)) {
    voice.lastVoicedAt = now;
    voice.lastVoicedMs = (stats.sentFrames * FRAME_SAMPLES * 1000) / RATE; // this frame's end
  }
}

function onMicFrame(pcm, rms) {
  stats.micFrames++;
  stats.micRmsMax = Math.max(stats.micRmsMax, rms);
  $("meter").value = Math.min(1, rms * 3); // speech RMS is ~0.05–0.3: scale for visibility
  // over WebRTC the microphone goes on the track: the frames are only listened to
  const sent = webrtc() ? conn?.state === "connected"
    : conn?.send({ type: "input_audio_buffer.append", audio: toBase64(pcm) });
  if (sent) {
    stats.sentFrames++;
    hearFrame(rms, performance.now());
  }
}

async function talk() {
  $("talk").disabled = true;
  try {
    audio = new AudioEngine({ onMicFrame, onProgress });
    $("transport").disabled = true;
    if (webrtc()) {  // the microphone first: its track is in the offer
      await audio.start({ echoCancellation: params.get("aec") !== "0" });
      conn = new WebRTCConnection(callsUrl, { onEvent, onState: showState, onReplyTrack,
        micStream: audio.stream });
      await conn.open();
    } else {
      // Open the socket first so the session (and its settings) exist when the mic starts.
      conn = new RealtimeConnection(wsUrl, { onEvent, onState: showState });
      conn.open();
      await audio.start({ echoCancellation: params.get("aec") !== "0" });
    }
    $("hangup").disabled = false;
    $("drop").disabled = false;
  } catch (err) {
    stats.errors.push({ message: String(err) });
    showState("error", `microphone or audio failed: ${err.message || err}`);
    $("talk").disabled = false;
    $("transport").disabled = false;
  }
}

async function hangup() {
  conn?.close();
  await audio?.stop();
  audio = null;
  $("talk").disabled = false;
  $("transport").disabled = false;
  $("hangup").disabled = true;
  $("drop").disabled = true;
  $("meter").value = 0;
}

$("talk").addEventListener("click", talk);
$("hangup").addEventListener("click", hangup);
$("drop").addEventListener("click", () => conn?.drop());
$("settings").addEventListener("submit", applySettings);

// The test hook: lets a browser test drive and observe the page.
window.__duplexDemo = {
  stats,
  dropSocket: (opts) => conn?.drop(opts),
  get state() { return conn?.state || "idle"; },
  get transport() { return webrtc() ? "webrtc" : "websocket"; },
  get lastSeq() { return conn?.lastSeq || 0; },
  get seqGaps() { return conn?.seqGaps || 0; },
  get reconnects() { return conn?.reconnects || 0; },
  get sessionId() { return conn?.sessionId || null; },
  get ctxState() { return audio?.ctx?.state || null; },
  get ctxRate() { return audio?.ctx?.sampleRate || null; },
  transcriptText: (role) => transcript.text(role),
  playedMs: (itemId) => Math.floor(((played.get(itemId) || 0) * 1000) / RATE),
};
