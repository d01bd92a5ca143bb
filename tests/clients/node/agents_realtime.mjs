// @openai/agents-realtime with its defaults: a RealtimeAgent in a RealtimeSession on
// the WebSocket transport, pointed at the gateway by `url` (the only change a user makes).
//
//   node agents_realtime.mjs
//
// A spoken turn, a barge-in while the agent answers (the SDK truncates what was not
// heard), a text message and a bad request, reported as the SDK's user sees them: its
// `audio`, `history_updated`, `audio_interrupted` and `error` events.

import { OpenAIRealtimeWebSocket, RealtimeAgent, RealtimeSession } from '@openai/agents-realtime';
import { Inbox, Responses, frames, gateway, run, silence, tone } from './lib.mjs';

const INSTRUCTIONS = 'You are a helpful assistant. words=5';

/** The SDK's history as plain data: role, status and what each item says. */
function history(items) {
  return items.filter((i) => i.type === 'message').map((i) => ({
    id: i.itemId, role: i.role, status: i.status,
    content: i.content.map((c) => ({ type: c.type, text: c.text ?? null,
                                     transcript: c.transcript ?? null })),
  }));
}

function speak(session, seconds) {
  for (const frame of frames(Buffer.concat([tone(seconds), silence(1.5)]))) {
    // sendAudio takes an ArrayBuffer of PCM16 at the session's 24 kHz
    session.sendAudio(frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.length));
  }
}

function listen(session, inbox, responses, report) {
  report.errors = [];
  report.interruptions = 0;
  session.on('transport_event', (event) => inbox.push(event));
  session.on('audio', (event) => responses.audio(event.responseId, event.data));
  session.on('history_updated', (items) => { report.history = history(items); });
  session.on('audio_interrupted', () => { report.interruptions += 1; });
  session.on('error', (event) => {
    const error = event.error?.error ?? {};
    report.errors.push({ code: error.code ?? null, message: String(error.message ?? event.error) });
    inbox.push({ type: '#client-error', code: error.code });
  });
}

/** The reply to a turn: wait for it to finish, keep what the user got from it. */
async function reply(inbox, responses) {
  const done = await inbox.until('response.done');
  return { ...responses.report(done.response.id), status: done.response.status };
}

await run(async (report) => {
  const { wss, apiKey } = gateway();
  const inbox = new Inbox();
  const responses = new Responses();
  const agent = new RealtimeAgent({ name: 'Assistant', instructions: INSTRUCTIONS });
  const session = new RealtimeSession(agent, {
    transport: new OpenAIRealtimeWebSocket({ url: `${wss}/realtime?model=duplex-gateway` }),
  });
  listen(session, inbox, responses, report);
  await session.connect({ apiKey });
  const updated = await inbox.until((e) => e.type === 'session.updated'
                                    && e.session.instructions === INSTRUCTIONS, 'instructions');
  report.session = { instructions: updated.session.instructions,
                     turn_detection: updated.session.audio.input.turn_detection };

  const turn = inbox.mark();
  speak(session, 1.0);
  report.spoken = await reply(inbox, responses);
  // once transcribed, the SDK fetches the user's item: history then holds the transcript
  inbox.rewind(turn);
  await inbox.until('conversation.item.retrieved');
  await inbox.until('response.done');
  await responses.played(report.spoken.id, report.spoken.audio_ms + 50); // heard it all

  speak(session, 0.6);
  const first = await inbox.until('response.output_audio.delta');
  // the user talks over the answer once 600 ms of it has played
  await inbox.until((e) => e.type === 'response.output_audio.delta'
                    && responses.of(first.response_id).audio_bytes >= 28800, '600 ms of audio');
  await responses.played(first.response_id, 600);
  speak(session, 0.6);
  const cut = await inbox.until((e) => e.type === 'response.done'
                                && e.response.id === first.response_id, 'the cut response');
  const truncated = await inbox.until('conversation.item.truncated');
  await inbox.until((e) => e.type === 'conversation.item.retrieved'
                    && e.item.id === truncated.item_id, 'the truncated item');
  report.barge_in = { ...responses.report(first.response_id), status: cut.response.status,
                      reason: cut.response.status_details?.reason ?? null,
                      truncated: { item_id: truncated.item_id,
                                   audio_end_ms: truncated.audio_end_ms } };
  report.after_barge_in = await reply(inbox, responses);
  await responses.played(report.after_barge_in.id, report.after_barge_in.audio_ms + 50);

  session.sendMessage('hello');
  report.text = await reply(inbox, responses);

  session.transport.sendEvent({ type: 'conversation.item.retrieve', item_id: 'item_none' });
  await inbox.until('#client-error');
  session.close();
});
