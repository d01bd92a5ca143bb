"""Prometheus metrics of one gateway process (served at ``/metrics``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gateway.session.turn_split import PLAYBACK_MARK, TurnSplit

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0)
_PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class Metrics:
    """The gateway's metrics, one registry; each family is declared by its own
    method below."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._declare_connections(self.registry)
        self._declare_events(self.registry)
        self._declare_latencies(self.registry)
        self._declare_process(self.registry)
        self._declare_engines(self.registry)

    def _declare_connections(self, r: CollectorRegistry) -> None:
        """Sessions, their admission and resumes, and the sockets they arrive on."""
        self.sessions = Gauge("duplex_sessions_active", "open sessions on this process",
                              registry=r)
        self.sessions_opened = Counter("duplex_sessions_opened", "sessions opened",
                                       registry=r)
        self.sessions_rejected = Counter("duplex_sessions_rejected",
                                         "sessions refused at admission", ["code"], registry=r)
        self.connections_shed = Counter(
            "duplex_connections_shed",
            "connections closed while still sending their request headers to let newer "
            "ones in (gateway.admission): reason full (the connection budget) or address "
            "(too many waiting from one address)", ["reason"], registry=r)
        self.resumes = Counter("duplex_sessions_resumed", "successful session resumes",
                               registry=r)
        self.resumes_relayed = Counter(
            "duplex_resumes_relayed", "resumes relayed to the session's owner process",
            registry=r)
        self.relays = Gauge("duplex_relays_active",
                            "sockets relayed to another owner process now", registry=r)
        self.webrtc_calls = Gauge("duplex_webrtc_calls_active",
                                  "WebRTC peer connections open on this process (from the "
                                  "answer to the hang-up)", registry=r)

    def _declare_events(self, r: CollectorRegistry) -> None:
        """What went out to clients, and the store's repairs under it."""
        self.events = Counter("duplex_server_events", "server events journaled and sent",
                              ["type"], registry=r)
        self.errors = Counter("duplex_errors", "error events sent to clients", ["code"],
                              registry=r)
        self.journal_repairs = Counter(
            "duplex_journal_repairs",
            "times Redis had lost journaled events (a failover) and they were written again",
            registry=r)
        self.store_restarts = Counter(
            "duplex_store_restarts", "times the embedded Valkey exited and was restarted",
            registry=r)

    def _declare_latencies(self, r: CollectorRegistry) -> None:
        """Where a reply's time goes: stages, turns, first audio."""
        self.stage_latency = Histogram(
            "duplex_stage_latency_seconds",
            "time from a stage request's submit to each of its visible outputs",
            ["stage"], buckets=_LATENCY_BUCKETS, registry=r)
        self.first_audio = Histogram(
            "duplex_first_audio_seconds", "end of user turn to first reply audio",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.turn_phases = Histogram(
            "duplex_turn_phase_seconds",
            "where a reply's wait went (gateway.session.turn_split): turn_detection is the "
            "end of speech to the turn's end decided; the others run from that decision to "
            "the transcript, the first token, the first clause, each timed stage's first "
            "output, the first reply audio sent and the client's first playback mark",
            ["phase"], buckets=_LATENCY_BUCKETS, registry=r)
        self.heard_to_sent = Histogram(
            "duplex_end_of_speech_to_first_audio_seconds",
            "the user's last voiced sample to the first reply audio sent (VAD-ended turns): "
            "mouth to ear less the network and the client's playback",
            buckets=_LATENCY_BUCKETS, registry=r)

    def _declare_process(self, r: CollectorRegistry) -> None:
        """The process's garbage collector, which every session waits on."""
        self.gc_pauses = Histogram(
            "duplex_gc_pause_seconds",
            "the garbage collector's pauses of this process (every session waits them out)",
            ["generation"], buckets=_PAUSE_BUCKETS, registry=r)
        self.gc_frozen = Gauge(
            "duplex_gc_frozen_objects",
            "objects alive at readiness, frozen out of every later collection "
            "(gateway.heap; 0 where the process was not started by the CLI)", registry=r)

    def _declare_engines(self, r: CollectorRegistry) -> None:
        """What the engines count themselves, read when scraped."""
        self.guesses = _Guesses()
        r.register(self.guesses)
        self.model_servers = _ModelServers()
        r.register(self.model_servers)

    def observe_turn(self, split: TurnSplit) -> None:
        """One reply's split, as it reaches its first audio."""
        self.first_audio.observe(split.first_audio_ms / 1000)
        for phase, seconds in split.phases().items():
            self.turn_phases.labels(phase).observe(seconds)
        if split.heard_to_sent_ms is not None:
            self.heard_to_sent.observe(split.heard_to_sent_ms / 1000)

    def observe_playback_mark(self, seconds: float) -> None:
        """The client first said it played a reply, ``seconds`` after its turn's end."""
        self.turn_phases.labels(PLAYBACK_MARK).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Guesses:
    """``duplex_stage_guesses_total{stage, outcome}``: an engine's replies started
    ahead of the turn's end (``started``, ``finished``, ``adopted``, ``dropped``),
    read from the engines' own counts when scraped."""

    def __init__(self) -> None:
        self._sources: list[tuple[str, Mapping[str, int]]] = []

    def watch(self, stage: str, counts: Mapping[str, int]) -> None:
        self._sources.append((stage, counts))

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "duplex_stage_guesses", "replies an engine started before the turn ended, "
            "by what became of them", labels=["stage", "outcome"])
        for stage, counts in self._sources:
            for outcome in ("started", "finished", "adopted", "dropped"):
                family.add_metric([stage, outcome], counts.get(outcome, 0))
        yield family


class _Gate(Protocol):
    @property
    def open(self) -> int: ...

    @property
    def waiting(self) -> int: ...


class ServerCounts(Protocol):
    """What a client of a model server apart counts: the thinker's engine
    (``engines.chat_server``) or a speech server's use
    (``plugins.cascade.speech_server``). ``name`` is the ``stage`` label;
    ``counts_tokens``: ``counts`` holds ``{prompt,cached,completion}_tokens``."""

    @property
    def name(self) -> str: ...

    @property
    def counts(self) -> Mapping[str, int]: ...

    @property
    def counts_tokens(self) -> bool: ...

    @property
    def disconnects(self) -> int: ...

    @property
    def gate(self) -> _Gate: ...


class _ModelServers:
    """What the clients of model servers apart from the gateway report, read
    when scraped: ``duplex_model_server_completions_total{stage, outcome}``
    (``ok`` or the failure's cause), ``duplex_model_server_tokens_total{stage,
    kind}`` (``prompt``, ``cached``: of those, the server's prefix cache held;
    ``completion``; of the clients that count tokens: the thinker's),
    ``duplex_model_server_disconnects_total{stage}`` (streams closed early:
    barge-ins) and ``duplex_model_server_streams{stage, state}`` (``open``,
    ``waiting``). The thinker's stage is its own name (``think``); the
    listener's and the talker's are ``asr`` and ``tts``."""

    OUTCOMES = ("ok", "ServerDown", "ServerSilent", "ServerRefused", "ServerBroken",
                "ServerBusy", "failed")
    TOKENS = ("prompt", "cached", "completion")

    def __init__(self) -> None:
        self._sources: list[ServerCounts] = []

    def watch(self, source: ServerCounts) -> None:
        self._sources.append(source)

    def collect(self) -> Iterator[Metric]:
        completions = CounterMetricFamily(
            "duplex_model_server_completions", "requests asked of a model server (replies, "
            "transcriptions, clauses), by outcome", labels=["stage", "outcome"])
        tokens = CounterMetricFamily(
            "duplex_model_server_tokens", "prompt tokens sent (and of those, cached by the "
            "server) and completion tokens received", labels=["stage", "kind"])
        disconnects = CounterMetricFamily(
            "duplex_model_server_disconnects", "streams closed before their end (barge-ins)",
            labels=["stage"])
        streams = GaugeMetricFamily("duplex_model_server_streams",
                                    "streams open on a model server, and waiting for one",
                                    labels=["stage", "state"])
        for source in self._sources:
            counts = dict(source.counts)  # one C-level copy: a speech server's grows on threads
            for outcome in self.OUTCOMES:
                completions.add_metric([source.name, outcome], counts.get(outcome, 0))
            if source.counts_tokens:
                for kind in self.TOKENS:
                    tokens.add_metric([source.name, kind], counts.get(f"{kind}_tokens", 0))
            disconnects.add_metric([source.name], source.disconnects)
            streams.add_metric([source.name, "open"], source.gate.open)
            streams.add_metric([source.name, "waiting"], source.gate.waiting)
        yield from (completions, tokens, disconnects, streams)
