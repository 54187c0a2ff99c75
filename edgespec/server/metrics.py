"""/metrics: Prometheus text with vLLM's metric names under the `edgespec:` prefix.

Counters (exposed with prometheus-client's `_total` suffix, as vLLM's are):
spec_decode_num_drafts, spec_decode_num_draft_tokens, spec_decode_num_accepted_tokens,
spec_decode_num_accepted_tokens_per_pos{position}, prompt_tokens, generation_tokens,
request_success{finished_reason} (stop | length | abort). Gauges: num_requests_running,
num_requests_waiting, and spec_decode_drafter_chosen_ratio{drafter}: the share of verify
steps since start in which the controller chose that drafter ("none": a plain step).
Histograms: time_to_first_token_seconds, inter_token_latency_seconds (one observation per
verify step that emitted tokens, as vLLM observes one per engine step),
e2e_request_latency_seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

PREFIX = "edgespec:"
# vLLM's buckets for these histograms
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


@dataclass
class Outcome:
    """What one finished (or aborted) request adds to the metrics."""

    finished_reason: str  # stop | length | abort
    n_prompt: int
    n_generated: int
    n_drafts: int = 0
    n_draft_tokens: int = 0
    n_accepted: int = 0
    accepted_by_pos: list[int] = field(default_factory=list)
    steps_by_drafter: dict[str, int] = field(default_factory=dict)  # "none": plain steps
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float = 0.0


class Metrics:
    def __init__(self, running: Callable[[], int], waiting: Callable[[], int]) -> None:
        disable_created_metrics()  # no *_created series, as vLLM (a process-wide switch)
        self.registry = CollectorRegistry()  # one per app: two apps in a process never clash
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=r)

        self.drafts = counter("spec_decode_num_drafts", "Verify steps with a draft")
        self.draft_tokens = counter("spec_decode_num_draft_tokens", "Draft tokens proposed")
        self.accepted = counter("spec_decode_num_accepted_tokens", "Draft tokens accepted")
        self.accepted_per_pos = counter(
            "spec_decode_num_accepted_tokens_per_pos",
            "Draft tokens accepted, by position in the draft (0-based)",
            ("position",),
        )
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens (reused ones included)")
        self.generation_tokens = counter("generation_tokens", "Generated tokens")
        self.success = counter("request_success", "Finished requests", ("finished_reason",))
        Gauge(PREFIX + "num_requests_running", "Requests generating", registry=r).set_function(
            running
        )
        Gauge(PREFIX + "num_requests_waiting", "Requests queued", registry=r).set_function(waiting)
        self.chosen = Gauge(
            PREFIX + "spec_decode_drafter_chosen_ratio",
            "Share of verify steps in which the controller chose this drafter (none: plain)",
            ("drafter",),
            registry=r,
        )
        self.steps_by_drafter: dict[str, int] = {}
        self.ttft = Histogram(
            PREFIX + "time_to_first_token_seconds",
            "Request arrival to first token",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            PREFIX + "inter_token_latency_seconds",
            "Time between verify steps that emitted tokens",
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            PREFIX + "e2e_request_latency_seconds",
            "Request arrival to its last token",
            buckets=E2E_BUCKETS,
            registry=r,
        )

    def record(self, o: Outcome) -> None:
        self.success.labels(o.finished_reason).inc()
        self.prompt_tokens.inc(o.n_prompt)
        self.generation_tokens.inc(o.n_generated)
        self.drafts.inc(o.n_drafts)
        self.draft_tokens.inc(o.n_draft_tokens)
        self.accepted.inc(o.n_accepted)
        for pos, n in enumerate(o.accepted_by_pos):
            self.accepted_per_pos.labels(str(pos)).inc(n)
        for name, n in o.steps_by_drafter.items():
            self.steps_by_drafter[name] = self.steps_by_drafter.get(name, 0) + n
        total = sum(self.steps_by_drafter.values())
        for name, n in self.steps_by_drafter.items():
            self.chosen.labels(name).set(n / total)
        if o.ttft_s is not None:
            self.ttft.observe(o.ttft_s)
        for gap in o.itl_s:
            self.itl.observe(gap)
        self.e2e.observe(o.e2e_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
