"""The features party's Prometheus metrics: received releases and training jobs (plus HTTP, shared)."""

from __future__ import annotations

from labeldp.common.metrics import ServiceMetrics


class FeaturesMetrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__()
        self.received = self.counter(
            "labeldp_received_releases_total",
            "gRPC deliveries by outcome: stored, replayed, or the rejection's status code.",
            ("outcome",),
        )
        self.examples_received = self.counter(
            "labeldp_examples_received_total", "Examples in newly stored releases."
        )
        self.training_jobs = self.counter(
            "labeldp_training_jobs_total",
            "Training jobs by outcome: started, succeeded, failed.",
            ("outcome",),
        )
        self.pricings = self.counter(
            "labeldp_pricings_total",
            "gRPC pricing requests by outcome: answered, or the refusal's status code.",
            ("outcome",),
        )
        self.examples_priced = self.counter(
            "labeldp_examples_priced_total", "Example IDs in answered pricing requests."
        )
        self.training_running = self.gauge(
            "labeldp_training_jobs_in_progress", "Training jobs queued or running in this process."
        )

    def record_pricing(self, outcome: str, examples: int) -> None:
        self.pricings.labels(outcome).inc()
        if outcome == "answered":
            self.examples_priced.inc(examples)

    def record_delivery(self, outcome: str, examples: int) -> None:
        self.received.labels(outcome).inc()
        if outcome == "stored":
            self.examples_received.inc(examples)
