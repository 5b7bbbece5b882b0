"""The numbers `specbench serve` reports: vLLM's spec-decode counters and per-request metrics, same meaning.

- `SpecCounters` is vLLM's SpecDecodingStats (vllm/v1/spec_decode/metrics.py, `observe_draft`): for each step
  of a sequence that drafted k > 0 tokens and accepted a of them, drafts += 1, draft tokens += k, accepted
  tokens += a, and accepted-per-position[i] += 1 for i < a. Accepted counts are not cut by EOS / max_tokens
  (vLLM counts them before the stop check); steps that drafted nothing (no prompt-lookup match) are not drafts.
- `request_spec_metrics` is `metrics.speculative_decoding` of one request, as vLLM's
  `--per-request-spec-decode-metrics detailed` reports it.
- `exposition` writes /metrics with prometheus_client's own exposition, so every Prometheus client parses it:
  counter families are named without `_total` (`# TYPE vllm:prompt_tokens counter`) and their samples with
  it (`vllm:prompt_tokens_total{...}`), exactly as vLLM, which uses the same library, writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class SpecCounters:
    """vLLM's SpecDecodingStats, accumulated over the server's life (see the module docstring)."""

    def __init__(self, num_spec_tokens: int):
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.per_pos = [0] * max(num_spec_tokens, 0)

    def observe(self, step: dict[str, Any]) -> None:
        if step["drafted"] <= 0:
            return
        self.drafts += 1
        self.draft_tokens += step["drafted"]
        self.accepted += step["accepted"]
        if step["accepted"] > len(self.per_pos):
            self.per_pos += [0] * (step["accepted"] - len(self.per_pos))
        for i in range(step["accepted"]):
            self.per_pos[i] += 1


def request_spec_metrics(steps: list[dict[str, Any]], num_spec_tokens: int) -> dict[str, Any]:
    """`metrics.speculative_decoding` of one request, as vLLM's `detailed` level reports it."""
    drafting = [s for s in steps if s["drafted"] > 0]
    width = max([num_spec_tokens, *(s["drafted"] for s in drafting)])
    hist = [0] * (width + 1)
    by_len: dict[str, list[int]] = {}
    for s in drafting:
        hist[s["accepted"]] += 1
        row = by_len.setdefault(str(s["drafted"]), [0] * (s["drafted"] + 1))
        row[min(s["accepted"], s["drafted"])] += 1
    accepted = sum(s["accepted"] for s in drafting)
    drafted = sum(s["drafted"] for s in drafting)
    return {
        "mean_acceptance_length": 1.0 + accepted / len(drafting) if drafting else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": hist,
        "acceptance_histogram_by_draft_length": by_len,
        "num_spec_steps": len(drafting),
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": num_spec_tokens,
        "per_step_accepted": [s["accepted"] for s in drafting],
        "per_step_drafted": [s["drafted"] for s in drafting],
    }


@dataclass(frozen=True)
class MetricsSnapshot:
    """The server's counters and gauges at one moment; `spec` is None when no speculative method runs."""

    model_name: str
    running: int
    waiting: int
    prompt_tokens: int
    generation_tokens: int
    requests: int
    spec: tuple[int, int, int, list[int]] | None = None    # drafts, draft tokens, accepted, accepted per position


class _Snapshot:
    """A one-shot collector: yields the families of one snapshot."""

    def __init__(self, snap: MetricsSnapshot):
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        s = self.snap
        labels, values = ["engine", "model_name"], ["0", s.model_name]

        def family(kind: type, name: str, help_text: str, value: float) -> Metric:
            metric = kind(name, help_text, labels=labels)
            metric.add_metric(values, value)
            return metric

        yield family(GaugeMetricFamily, "vllm:num_requests_running", "Number of requests in model execution "
                     "batches.", s.running)
        yield family(GaugeMetricFamily, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                     s.waiting)
        yield family(CounterMetricFamily, "vllm:prompt_tokens", "Number of prefill tokens processed.",
                     s.prompt_tokens)
        yield family(CounterMetricFamily, "vllm:generation_tokens", "Number of generation tokens processed.",
                     s.generation_tokens)
        yield family(CounterMetricFamily, "vllm:request_success", "Count of successfully processed requests.",
                     s.requests)
        if s.spec is None:
            return                              # vLLM exposes no spec-decode counters without speculation
        drafts, draft_tokens, accepted, per_pos = s.spec
        yield family(CounterMetricFamily, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts)
        yield family(CounterMetricFamily, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                     draft_tokens)
        yield family(CounterMetricFamily, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                     accepted)
        by_pos = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                     "Accepted tokens per draft position.", labels=[*labels, "position"])
        for i, value in enumerate(per_pos):
            by_pos.add_metric([*values, str(i)], value)
        yield by_pos


def exposition(snap: MetricsSnapshot) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of one snapshot."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(snap))
    return generate_latest(registry)
