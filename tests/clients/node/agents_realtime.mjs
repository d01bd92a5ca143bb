// @openai/agents-realtime with its defaults: a RealtimeAgent in a RealtimeSession on
// the WebSocket transport, pointed at the gateway by `url` (the only change a user makes).
//
//   node agents_realtime.mjs [tools]
//
// A spoken turn, a barge-in while the agent answers (the SDK truncates what was not
// heard), a text message and a bad request, reported as the SDK's user sees them: its
// `audio`, `history_updated`, `audio_interrupted` and `error` events.
//
// `tools`: an agent with a `tool()` the tone plugin calls (`call=get_weather` in the
// instructions) on a spoken turn; the SDK runs it, sends its output and asks for the
// reply. Reported: what `execute` got, the session's `agent_tool_start`/`agent_tool_end`,
// the call's transport events, and the history once the reply is done.

import { OpenAIRealtimeWebSocket, RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';
import { z } from 'zod';
import { Inbox, Responses, frames, gateway, run, serverEvents, silence, tone } from './lib.mjs';

const INSTRUCTIONS = 'You are a helpful assistant. words=5';
const TOOL_INSTRUCTIONS = 'Answer questions about the weather. call=get_weather';
const WEATHER = 'seventeen degrees and cloudy';

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

function listen(session, inbox, responses, report, shape = history) {
  report.errors = [];
  report.interruptions = 0;
  session.on('transport_event', (event) => inbox.push(event));
  session.on('audio', (event) => responses.audio(event.responseId, event.data));
  session.on('history_updated', (items) => { report.history = shape(items); });
  session.on('audio_interrupted', () => { report.interruptions += 1; });
  session.on('error', (event) => {
    const error = event.error?.error ?? {};
    report.errors.push({ code: error.code ?? null, message: String(error.message ?? event.error) });
    inbox.push({ type: '#client-error', code: error.code });
  });
}

/** Every item of the SDK's history, function calls with their output included. */
function fullHistory(items) {
  return items.map((i) => (i.type === 'function_call'
    ? { id: i.itemId, type: i.type, status: i.status, name: i.name, arguments: i.arguments,
        output: i.output }
    : { type: i.type, ...history([i])[0] }));
}

/** The reply to a turn: wait for it to finish, keep what the user got from it. */
async function reply(inbox, responses) {
  const done = await inbox.until('response.done');
  return { ...responses.report(done.response.id), status: done.response.status };
}

/** A tool the agent calls: `execute` notes what it was given and answers the same. */
function weatherTool(report) {
  report.executed = [];
  return tool({
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: z.object({ city: z.string(), unit: z.enum(['celsius', 'fahrenheit']) }),
    execute: async (args) => {
      report.executed.push(args);
      return WEATHER;
    },
  });
}

async function tools(report) {
  const { wss, apiKey } = gateway();
  const inbox = new Inbox();
  const responses = new Responses();
  const agent = new RealtimeAgent({ name: 'Weather', instructions: TOOL_INSTRUCTIONS,
                                    tools: [weatherTool(report)] });
  const session = new RealtimeSession(agent, {
    transport: new OpenAIRealtimeWebSocket({ url: `${wss}/realtime?model=duplex-gateway` }),
  });
  listen(session, inbox, responses, report, fullHistory);
  report.tool_events = [];
  session.on('agent_tool_start', (_context, _agent, used, details) => {
    report.tool_events.push({ event: 'agent_tool_start', tool: used.name,
                              call: toolCall(details.toolCall) });
    inbox.push({ type: '#agent_tool_start' });
  });
  session.on('agent_tool_end', (_context, _agent, used, result, details) => {
    report.tool_events.push({ event: 'agent_tool_end', tool: used.name, result,
                              call: toolCall(details.toolCall) });
    inbox.push({ type: '#agent_tool_end' });
  });
  await session.connect({ apiKey });
  const updated = await inbox.until((e) => e.type === 'session.updated'
                                    && e.session.instructions === TOOL_INSTRUCTIONS,
                                    'instructions');
  report.session = { tools: updated.session.tools, tool_choice: updated.session.tool_choice };

  const turn = inbox.mark();
  speak(session, 1.0);
  const called = await inbox.until('response.done');
  report.call = { status: called.response.status,
                  output: called.response.output.map((o) => ({ type: o.type, name: o.name,
                                                               call_id: o.call_id,
                                                               arguments: o.arguments })) };
  // the SDK runs the tool on the call's response.output_item.done, maybe before its
  // response.done: look from the turn on, then for a response after the call's
  inbox.rewind(turn);
  await inbox.until('#agent_tool_end');
  const done = await inbox.until((e) => e.type === 'response.done'
                                 && e.response.id !== called.response.id, 'the reply');
  report.reply = { ...responses.report(done.response.id), status: done.response.status };
  // what went over the wire for the call, in order (the SDK's transport events)
  report.wire = inbox.events.filter((e) => e.type?.includes('function_call')
                                    || e.item?.type?.startsWith('function_call'))
    .map((e) => ({ type: e.type, item_type: e.item?.type ?? null }));
  report.server_events = serverEvents(inbox.events);
  session.close();
}

function toolCall(call) {
  return { call_id: call.callId, name: call.name, arguments: call.arguments };
}

async function conversation(report) {
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
  report.server_events = serverEvents(inbox.events);
  session.close();
}

await run(process.argv[2] === 'tools' ? tools : conversation);
