"""Prometheus metrics of one gateway process (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions = Gauge("duplex_sessions_active", "open sessions on this process",
                              registry=r)
        self.sessions_opened = Counter("duplex_sessions_opened", "sessions opened",
                                       registry=r)
        self.sessions_rejected = Counter("duplex_sessions_rejected",
                                         "sessions refused at admission", ["code"], registry=r)
        self.resumes = Counter("duplex_sessions_resumed", "successful session resumes",
                               registry=r)
        self.resumes_relayed = Counter(
            "duplex_resumes_relayed", "resumes relayed to the session's owner process",
            registry=r)
        self.relays = Gauge("duplex_relays_active",
                            "sockets relayed to another owner process now", registry=r)
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
        self.stage_latency = Histogram(
            "duplex_stage_latency_seconds",
            "time from a stage request's submit to each of its visible outputs",
            ["stage"], buckets=_LATENCY_BUCKETS, registry=r)
        self.first_audio = Histogram(
            "duplex_first_audio_seconds", "end of user turn to first reply audio",
            buckets=_LATENCY_BUCKETS, registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
