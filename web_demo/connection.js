// The realtime socket with the gateway's resume protocol. A dropped socket is
// not the end of the session: we reconnect to ?resume=<id>, send session.resume
// with the newest token and the last server_event_seq we saw, and the gateway
// replays exactly what we missed. Callers see one ordered stream of events.
const BACKOFF_MS = [0, 250, 500, 1000, 2000, 4000];

export class RealtimeConnection {
  constructor(url, { onEvent, onState } = {}) {
    this.url = url; // ws(s)://host/v1/realtime
    this.onEvent = onEvent || (() => {});
    this.onState = onState || (() => {});
    this.ws = null;
    this.sessionId = null;
    this.token = null;
    this.lastSeq = 0;
    this.seqGaps = 0;
    this.duplicates = 0;
    this.reconnects = 0;
    this.attempt = 0;
    this.closing = false;
    this.state = "idle";
  }

  setState(state, detail = "") {
    this.state = state;
    this.onState(state, detail);
  }

  open() {
    this.closing = false;
    this.setState("connecting");
    this.connect(null);
  }

  connect(resumeId) {
    // extensions=duplex: this page reads the duplex events (session.expired) too
    const url = resumeId ? `${this.url}?resume=${encodeURIComponent(resumeId)}`
      : `${this.url}?extensions=duplex`;
    // "realtime" is the subprotocol OpenAI's browser clients offer; the gateway picks it.
    const ws = new WebSocket(url, ["realtime"]);
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      if (resumeId) {
        ws.send(JSON.stringify({ type: "session.resume", resume_token: this.token,
          last_received_server_event_seq: this.lastSeq }));
      }
    };
    ws.onmessage = (e) => this.receive(ws, e.data);
    ws.onclose = (e) => this.closed(ws, e);
  }

  receive(ws, text) {
    if (ws !== this.ws) return; // a replaced socket's stragglers
    const ev = JSON.parse(text);
    const seq = ev.server_event_seq;
    if (typeof seq === "number" && ev.type !== "session.resumed") {
      if (seq <= this.lastSeq) { this.duplicates++; return; } // already handled
      if (this.lastSeq && seq !== this.lastSeq + 1) this.seqGaps++;
      this.lastSeq = seq;
    }
    switch (ev.type) {
      case "session.created":
        this.sessionId = ev.session.id;
        this.token = ev.resume_token;
        this.setState("connected");
        break;
      case "session.resumed":
        this.token = ev.resume_token; // tokens rotate: only the newest works next time
        this.setState("resumed", ev.recovered ? "the in-flight reply was lost" : "");
        break;
      case "session.resync_required":
        this.restart("the gateway could not replay what was missed; new session");
        return;
      case "error":
        if (ev.error?.code === "session_resume_expired") {
          this.restart("the session expired; started a new one");
          return;
        }
        break;
      case "session.expired":
      case "session.closed":
        this.sessionId = null;
        break;
    }
    this.onEvent(ev);
  }

  // Start over with a fresh session (the old one cannot be resumed).
  restart(why) {
    const old = this.ws;
    this.ws = null;
    old?.close(1000);
    this.sessionId = null;
    this.token = null;
    this.lastSeq = 0;
    this.setState("expired", why);
    this.connect(null);
  }

  closed(ws, e) {
    if (ws !== this.ws) return;
    this.ws = null;
    if (this.closing || !this.sessionId) {
      this.setState(this.closing ? "closed" : "disconnected", e.reason || `code ${e.code}`);
      return;
    }
    // Any other drop detaches the session on the gateway for its grace period.
    if (this.attempt >= BACKOFF_MS.length + 2) {
      this.restart("could not resume the session; started a new one");
      return;
    }
    this.setState("reconnecting");
    const delay = BACKOFF_MS[Math.min(this.attempt++, BACKOFF_MS.length - 1)];
    this.reconnects++;
    setTimeout(() => { if (!this.closing) this.connect(this.sessionId); }, delay);
  }

  send(obj) {
    if (this.ws?.readyState !== WebSocket.OPEN || this.state === "reconnecting") return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  // For the test hook and the "Drop" button: an abnormal close, as a network loss would be.
  // `resumeAs` (tests only) resumes another session id, e.g. one the gateway never
  // had, to exercise the expired-session path.
  drop({ resumeAs } = {}) {
    if (resumeAs) this.sessionId = resumeAs;
    this.ws?.close(4001, "dropped on purpose");
  }

  close() {
    this.closing = true;
    this.ws?.close(1000); // code 1000 ends the session on the gateway
  }
}
