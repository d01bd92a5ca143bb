// Page wiring: buttons and settings → socket; socket events → audio and DOM.
// Barge-in and latency live here because they need both the socket and audio.
import { AudioEngine, RATE, fromBase64, toBase64 } from "./audio.js";
import { RealtimeConnection } from "./connection.js";
import { Transcript } from "./transcript.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const wsUrl = params.get("ws") ||
  `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;

// Counters for the person (some) and for tests (all): see window.__duplexDemo.
const stats = {
  micFrames: 0, micRmsMax: 0, sentFrames: 0, audioDeltas: 0,
  playbackChunks: 0, playedSamples: 0, bargeIns: 0,
  truncates: [], latenciesMs: [], errors: [], states: [], events: {},
};

const transcript = new Transcript($("transcript"));
let conn = null;
let audio = null;
let currentItem = null; // the assistant audio item being played
const received = new Map(); // itemId → samples received
const played = new Map(); // itemId → samples rendered (from the worklet)
const truncated = new Set(); // items we already cut: late deltas for them are dropped
let speechStoppedAt = null;

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
      speechStoppedAt = null;
      bargeIn("speech");
      break;
    case "input_audio_buffer.speech_stopped":
      speechStoppedAt = performance.now();
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
  if (speechStoppedAt !== null) {
    const ms = Math.round(performance.now() - speechStoppedAt);
    stats.latenciesMs.push(ms);
    $("latency").value = `${ms} ms`;
    speechStoppedAt = null;
  }
  audio?.enqueue(ev.item_id, pcm);
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

function onMicFrame(pcm, rms) {
  stats.micFrames++;
  stats.micRmsMax = Math.max(stats.micRmsMax, rms);
  $("meter").value = Math.min(1, rms * 3); // speech RMS is ~0.05–0.3: scale for visibility
  if (conn?.send({ type: "input_audio_buffer.append", audio: toBase64(pcm) })) stats.sentFrames++;
}

async function talk() {
  $("talk").disabled = true;
  try {
    audio = new AudioEngine({ onMicFrame, onProgress });
    // Open the socket first so the session (and its settings) exist when the mic starts.
    conn = new RealtimeConnection(wsUrl, { onEvent, onState: showState });
    conn.open();
    await audio.start({ echoCancellation: params.get("aec") !== "0" });
    $("hangup").disabled = false;
    $("drop").disabled = false;
  } catch (err) {
    stats.errors.push({ message: String(err) });
    showState("error", `microphone or audio failed: ${err.message || err}`);
    $("talk").disabled = false;
  }
}

async function hangup() {
  conn?.close();
  await audio?.stop();
  audio = null;
  $("talk").disabled = false;
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
  get lastSeq() { return conn?.lastSeq || 0; },
  get seqGaps() { return conn?.seqGaps || 0; },
  get reconnects() { return conn?.reconnects || 0; },
  get sessionId() { return conn?.sessionId || null; },
  get ctxState() { return audio?.ctx?.state || null; },
  get ctxRate() { return audio?.ctx?.sampleRate || null; },
  transcriptText: (role) => transcript.text(role),
  playedMs: (itemId) => Math.floor(((played.get(itemId) || 0) * 1000) / RATE),
};
