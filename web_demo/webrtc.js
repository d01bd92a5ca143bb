// The call over WebRTC, as OpenAI's browser clients make it: POST the offer to
// /v1/realtime/calls, the microphone on the peer connection's track (where the
// browser's echo cancellation works on what it was built for), the reply on the
// remote track, the Realtime events on the "oai-events" data channel. The same
// face as RealtimeConnection, so the page drives either. A dropped call is not
// resumed here (the gateway resumes a WebRTC session over the WebSocket only):
// Talk starts a new one.
export class WebRTCConnection {
  constructor(url, { onEvent, onState, onReplyTrack, micStream } = {}) {
    this.url = url; // http(s)://host/v1/realtime/calls
    this.onEvent = onEvent || (() => {});
    this.onState = onState || (() => {});
    this.onReplyTrack = onReplyTrack || (() => {});
    this.micStream = micStream;
    this.pc = null;
    this.channel = null;
    this.callUrl = null;
    this.sessionId = null;
    this.lastSeq = 0;
    this.seqGaps = 0; // the reply's audio deltas go on the track: their seqs are gaps here
    this.reconnects = 0;
    this.closing = false;
    this.state = "idle";
  }

  setState(state, detail = "") {
    this.state = state;
    this.onState(state, detail);
  }

  async open() {
    this.closing = false;
    this.setState("connecting");
    const pc = new RTCPeerConnection();
    this.pc = pc;
    for (const track of this.micStream.getAudioTracks()) pc.addTrack(track, this.micStream);
    const channel = pc.createDataChannel("oai-events");
    this.channel = channel;
    channel.onmessage = (e) => this.receive(e.data);
    pc.ontrack = (e) => this.onReplyTrack(e.streams[0] || new MediaStream([e.track]));
    pc.onconnectionstatechange = () => {
      if (pc !== this.pc || this.closing) return;
      if (["failed", "closed", "disconnected"].includes(pc.connectionState)) {
        this.setState("disconnected", `peer connection ${pc.connectionState}`);
      }
    };
    await pc.setLocalDescription(await pc.createOffer());
    const answer = await fetch(this.url, { method: "POST", body: pc.localDescription.sdp,
      headers: { "Content-Type": "application/sdp" } });
    if (!answer.ok) {
      const why = await answer.json().catch(() => ({}));
      throw new Error(why.error?.message || `the call was refused (${answer.status})`);
    }
    this.callUrl = new URL(answer.headers.get("Location"), this.url);
    await pc.setRemoteDescription({ type: "answer", sdp: await answer.text() });
  }

  receive(text) {
    const ev = JSON.parse(text);
    if (typeof ev.server_event_seq === "number") this.lastSeq = ev.server_event_seq;
    if (ev.type === "session.created") {
      this.sessionId = ev.session.id;
      this.setState("connected");
    } else if (ev.type === "session.closed" || ev.type === "session.expired") {
      this.sessionId = null;
    }
    this.onEvent(ev);
  }

  send(obj) {
    if (this.channel?.readyState !== "open") return false;
    this.channel.send(JSON.stringify(obj));
    return true;
  }

  // "Drop connection": the peer connection just goes; the gateway detaches the session.
  drop() {
    this.pc?.close();
    this.setState("disconnected", "dropped on purpose; Talk starts a new call");
  }

  close() {
    this.closing = true;
    if (this.callUrl) fetch(this.callUrl, { method: "DELETE" }).catch(() => {});
    this.pc?.close();
    this.setState("closed");
  }
}
