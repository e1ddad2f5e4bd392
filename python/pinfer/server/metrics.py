"""Server counters in Prometheus' text exposition format (GET /metrics)."""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Deque, Dict, Tuple

WINDOW_S = 10.0  # tokens/s is measured over this trailing window


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Dict[Tuple[str, int], int] = collections.Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.steps = 0
        self.batch_tokens = 0
        self.decode_s = 0.0
        self._recent: Deque[Tuple[float, int]] = collections.deque()  # (time, outputs) per step

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[(route, status)] += 1

    def usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        with self._lock:
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)

    def step(self, n_tokens: int, n_outputs: int, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self.steps += 1
            self.batch_tokens += n_tokens
            self.decode_s += seconds
            self._recent.append((now, n_outputs))
            while self._recent and self._recent[0][0] < now - WINDOW_S:
                self._recent.popleft()

    def render(self, slots_total: int, slots_busy: int, queue_depth: int) -> str:
        now = time.monotonic()
        with self._lock:
            while self._recent and self._recent[0][0] < now - WINDOW_S:
                self._recent.popleft()
            tps = sum(n for _, n in self._recent) / WINDOW_S
            lines = ["# HELP pinfer_requests_total HTTP requests by route and status.",
                     "# TYPE pinfer_requests_total counter"]
            for (route, status), n in sorted(self.requests.items()):
                lines.append(f'pinfer_requests_total{{route="{route}",status="{status}"}} {n}')
            for name, kind, help_, v in (
                    ("pinfer_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
                     self.prompt_tokens),
                    ("pinfer_completion_tokens_total", "counter", "Generated tokens of finished requests.",
                     self.completion_tokens),
                    ("pinfer_batch_steps_total", "counter", "Batched decode steps.", self.steps),
                    ("pinfer_batch_tokens_total", "counter", "Tokens evaluated by the decode steps.",
                     self.batch_tokens),
                    ("pinfer_decode_seconds_total", "counter", "Time spent in decode steps.", round(self.decode_s, 6)),
                    ("pinfer_tokens_per_second", "gauge", f"Sequences advanced per second over the last "
                                                          f"{WINDOW_S:g} s.", round(tps, 3)),
                    ("pinfer_slots_total", "gauge", "Parallel slots.", slots_total),
                    ("pinfer_slots_busy", "gauge", "Slots running a request.", slots_busy),
                    ("pinfer_queue_depth", "gauge", "Requests waiting for a slot.", queue_depth)):
                lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {v}"]
        return "\n".join(lines) + "\n"
