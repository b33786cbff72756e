"""The labels party's Prometheus metrics: releases, ε charged and deliveries (plus HTTP, shared)."""

from __future__ import annotations

from labeldp.common.metrics import ServiceMetrics


class LabelsMetrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__()
        self.releases = self.counter(
            "labeldp_releases_total",
            "Release requests by outcome: created, replayed (same Idempotency-Key), rejected (4xx), "
            "budget_exhausted, error.",
            ("outcome",),
        )
        self.epsilon_charged = self.counter(
            "labeldp_epsilon_charged_total", "Sum of the ε of created releases (each charged per example)."
        )
        self.example_epsilon_charged = self.counter(
            "labeldp_example_epsilon_charged_total",
            "Sum over created releases of ε × examples charged (total privacy spend).",
        )
        self.examples_released = self.counter(
            "labeldp_examples_released_total", "Examples in created releases."
        )
        self.deliveries = self.counter(
            "labeldp_deliveries_total",
            "Delivery requests by outcome: delivered, failed, refused.",
            ("outcome",),
        )
        self.priors = self.counter(
            "labeldp_priors_total",
            "Priors requests to a features party by outcome: stored, refused (the recipient's refusal or an "
            "answer that failed a check), rejected (4xx before dialling).",
            ("outcome",),
        )

    def record_release(self, epsilon: float, examples: int) -> None:
        """A release created now (replays and refusals are counted by outcome only)."""
        self.releases.labels("created").inc()
        self.epsilon_charged.inc(epsilon)
        self.example_epsilon_charged.inc(epsilon * examples)
        self.examples_released.inc(examples)
