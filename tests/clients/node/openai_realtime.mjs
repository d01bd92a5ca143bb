// npm `openai`: a Realtime session as its users write one, over wss://.
//
//   node openai_realtime.mjs ws|websocket vad|manual
//
// `ws` is OpenAIRealtimeWS (the `ws` package, Bearer header); `websocket` is
// OpenAIRealtimeWebSocket (the runtime's WebSocket, the key in a subprotocol). Turn 1
// is a spoken turn ("words=3"); turn 2 is interrupted (by speech in `vad` mode, by
// response.cancel in `manual`) and truncated where the user stopped hearing it; in
// `vad` mode the interrupting speech is turn 3, and the start of its reply is kept.

import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket';
import {
  Inbox, Responses, audioMs, frames, gateway, run, serverEvents, silence, tone,
} from './lib.mjs';

const [klass, mode] = process.argv.slice(2);

async function connect(report) {
  const { base, apiKey } = gateway();
  const client = new OpenAI({ apiKey, baseURL: base });
  if (klass === 'websocket' && typeof globalThis.WebSocket !== 'function') {
    // openai 7 wants Node 22, whose WebSocket is built in; older Node gets `ws`'s
    globalThis.WebSocket = (await import('ws')).WebSocket;
    report.websocket = 'ws';
  } else {
    report.websocket = klass === 'websocket' ? 'native' : 'ws';
  }
  const Klass = { ws: OpenAIRealtimeWS, websocket: OpenAIRealtimeWebSocket }[klass];
  if (!Klass) throw new Error(`unknown class ${klass}`);
  return new Klass({ model: 'duplex-gateway' }, client);
}

function listen(rt, inbox, responses, report) {
  report.errors = [];
  rt.on('event', (event) => inbox.push(event));
  rt.on('error', (err) => {
    report.errors.push({ code: err.error?.code ?? null, event_id: err.error?.event_id ?? null,
                         message: err.message });
    inbox.push({ type: '#client-error', code: err.error?.code });
  });
  rt.on('response.output_audio.delta', (e) =>
    responses.audio(e.response_id, Buffer.from(e.delta, 'base64')));
  rt.on('response.output_audio_transcript.delta', (e) => responses.text(e.response_id, e.delta));
}

async function speak(rt, seconds) {
  for (const frame of frames(Buffer.concat([tone(seconds), silence(0.8)]))) {
    rt.send({ type: 'input_audio_buffer.append', audio: frame.toString('base64') });
  }
  if (mode === 'manual') {
    rt.send({ type: 'input_audio_buffer.commit' });
    rt.send({ type: 'response.create' });
  }
}

async function configure(rt, inbox, words) {
  const turnDetection = mode === 'vad' ? { type: 'server_vad', silence_duration_ms: 300 } : null;
  rt.send({ type: 'session.update', session: {
    type: 'realtime', instructions: `words=${words}`,
    audio: { input: { turn_detection: turnDetection } } } });
  return (await inbox.until('session.updated')).session;
}

/** A reply cut short: interrupt it once its audio starts, then truncate it there. */
async function interrupted(rt, inbox, responses, report) {
  const first = await inbox.until('response.output_audio.delta');
  if (mode === 'vad') {
    for (const frame of frames(Buffer.concat([tone(0.6), silence(0.8)]))) {
      rt.send({ type: 'input_audio_buffer.append', audio: frame.toString('base64') });
    }
  } else {
    rt.send({ type: 'response.cancel' });
  }
  const done = await inbox.until((e) => e.type === 'response.done'
                                  && e.response.id === first.response_id, 'the cut response');
  const afterCut = inbox.mark(); // the next turn may start while the truncate is on its way
  // what the user heard: the audio that had arrived when playback stopped
  const heardMs = Math.min(audioMs(responses.of(first.response_id).audio_bytes), 400);
  rt.send({ type: 'conversation.item.truncate', item_id: first.item_id, content_index: 0,
            audio_end_ms: heardMs });
  const truncated = await inbox.until('conversation.item.truncated');
  report.interrupted = { ...responses.report(first.response_id), status: done.response.status,
                         reason: done.response.status_details?.reason ?? null,
                         item_id: first.item_id, sent_ms: heardMs,
                         truncated: { item_id: truncated.item_id,
                                      audio_end_ms: truncated.audio_end_ms } };
  inbox.rewind(afterCut);
}

await run(async (report) => {
  const inbox = new Inbox();
  const responses = new Responses();
  const rt = await connect(report);
  listen(rt, inbox, responses, report);
  report.url = rt.url.toString();
  const created = await inbox.until('session.created');
  report.session_id = created.session.id;

  rt.send({ type: 'response.cancel', event_id: 'evt_idle' }); // nothing to cancel yet
  await inbox.until('#client-error');

  const session = await configure(rt, inbox, 3);
  report.session = { instructions: session.instructions,
                     turn_detection: session.audio.input.turn_detection };
  await speak(rt, 1.0);
  const user = await inbox.until('conversation.item.input_audio_transcription.completed');
  const done = await inbox.until('response.done');
  report.turn1 = { ...responses.report(done.response.id), status: done.response.status,
                   user_transcript: user.transcript,
                   output_transcript: done.response.output[0]?.content?.[0]?.transcript };

  await configure(rt, inbox, 60);
  await speak(rt, 0.6);
  await interrupted(rt, inbox, responses, report);
  if (mode === 'vad') { // the interrupting speech is a turn of its own
    const next = await inbox.until('response.created');
    const start = await inbox.until((e) => e.type === 'response.output_audio.delta'
                                    && e.response_id === next.response.id, 'turn 3 audio');
    report.turn3 = responses.report(start.response_id);
  }
  report.history = inbox.events.filter((e) => e.type.startsWith('conversation.item.added')
                                       || e.type.startsWith('conversation.item.done'))
    .map((e) => ({ type: e.type, role: e.item.role, status: e.item.status }));
  report.counts = Object.fromEntries(['input_audio_buffer.speech_started',
    'input_audio_buffer.committed', 'response.created', 'response.done']
    .map((t) => [t, inbox.count(t)]));
  report.server_events = serverEvents(inbox.events);
  rt.close();
});
