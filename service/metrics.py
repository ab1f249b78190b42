"""Prometheus metrics of one app (its own registry, so several apps never share counters)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter("afp_requests", "HTTP requests", ["route", "status"], registry=r)
        self.latency = Histogram("afp_request_seconds", "Request latency", ["route"], buckets=LATENCY_BUCKETS,
                                 registry=r)
        self.in_progress = Gauge("afp_requests_in_progress", "HTTP requests being received or answered",
                                 registry=r, multiprocess_mode="livesum")
        self.errors = Counter("afp_errors", "Requests answered with an error, by kind", ["kind"], registry=r)
        self.batch_requests = Histogram("afp_batch_requests", "Scoring calls merged into one model call",
                                        buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.batch_pairs = Histogram("afp_batch_pairs", "(context, word) pairs per model call",
                                     buckets=(10, 100, 1000, 1e4, 1e5, 1e6), registry=r)
        self.expanded_arcs = Histogram("afp_expanded_arcs", "Arcs of expanded lattices",
                                       buckets=(100, 1000, 1e4, 1e5, 1e6, 1e7), registry=r)
        self.lattices = Counter("afp_lattices", "Lattices rescored", registry=r)

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format: this app's, or, when the server runs several
        processes (``PROMETHEUS_MULTIPROC_DIR`` set), every process's summed."""
        import os

        from prometheus_client import generate_latest

        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        return generate_latest(merged)

    def on_batch(self, requests: int, pairs: int) -> None:
        self.batch_requests.observe(requests)
        self.batch_pairs.observe(pairs)
