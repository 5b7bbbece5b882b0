"""How a server runner meets a faulty server: which errors it retries, how long it waits, when it gives up.

A server that is busy (HTTP 429), behind a proxy that lost it for a moment (502, 503, 504) or not reachable
for a moment (a refused or dropped connection before any output) is asked again, a bounded number of times,
after an exponentially growing wait with jitter (so C requests that failed together do not come back
together). A stream that already produced output is never retried: what it produced was measured, and a
silent second attempt would time another request in its place, so it becomes a failed record naming the error.
Nothing else (HTTP 400, 500, a malformed answer) is retried either: asking again gets the same answer.

Timeouts bound what a stuck server costs: `stall_timeout` the wait for the next event of a stream (the first
one included), `request_timeout` one attempt as a whole. Every value here rides on `--option KEY=VALUE` and
changes how a run is carried out, not what it measures, so a resumed run may change it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from specbench.errors import SpecbenchError

# the statuses a server or proxy answers when asking again later may succeed
RETRY_STATUSES = frozenset({429, 502, 503, 504})

# option -> (default, smallest allowed value, what it is)
FAULT_OPTIONS: dict[str, tuple[float, float, str]] = {
    "retries": (3, 0, "retries per request on 429/502/503/504 and connection errors before output"),
    "retry_backoff": (1.0, 0.0, "seconds before the first retry, doubled for each further one"),
    "stall_timeout": (60.0, 0.001, "seconds a stream may go without an event before the request fails"),
    "request_timeout": (600.0, 0.001, "seconds one attempt of a request may take in all"),
}
MAX_WAIT_S = 30.0            # the longest backoff between two attempts
MAX_RETRY_AFTER_S = 60.0     # the longest Retry-After a server may ask for and get


class EngineHTTPError(Exception):
    """The server answered with an HTTP error or an error event, or its stream broke or stalled."""


class RetryableError(EngineHTTPError):
    """A failure that asking again may cure: HTTP 429/502/503/504, or a connection lost before any output."""

    def __init__(self, message: str, retry_after: float | None = None, connection: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.connection = connection


@dataclass(frozen=True)
class FaultPolicy:
    """The retry and timeout settings of one run, from its options."""

    retries: int = int(FAULT_OPTIONS["retries"][0])
    retry_backoff: float = FAULT_OPTIONS["retry_backoff"][0]
    stall_timeout: float = FAULT_OPTIONS["stall_timeout"][0]
    request_timeout: float = FAULT_OPTIONS["request_timeout"][0]

    @classmethod
    def from_options(cls, options: dict[str, Any], flag: str = "--option") -> "FaultPolicy":
        """The policy a run's options ask for; a value that is not a number in range is a SpecbenchError."""
        values: dict[str, Any] = {}
        for key, (_, low, what) in FAULT_OPTIONS.items():
            if key not in options:
                continue
            raw = options[key]
            try:
                if isinstance(raw, bool):
                    raise ValueError
                value = int(raw) if key == "retries" else float(raw)
                if key == "retries" and float(raw) != value:
                    raise ValueError
            except (TypeError, ValueError):
                raise SpecbenchError(f"{flag} {key}={raw!r}: expected a {'whole ' if key == 'retries' else ''}"
                                     f"number ({what})") from None
            if value < low or value != value or value == float("inf"):
                raise SpecbenchError(f"{flag} {key}={raw!r}: must be at least {low:g} ({what})")
            values[key] = value
        return cls(**values)

    def wait_s(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retry` (0-based): backoff * 2**retry, capped, times a jitter
        in [0.5, 1]; at least what the server asked for in Retry-After (capped too)."""
        base = min(MAX_WAIT_S, self.retry_backoff * 2 ** retry)
        wait = base * (0.5 + 0.5 * (rng or random).random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, MAX_RETRY_AFTER_S))
        return wait


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header given in seconds (an HTTP date is ignored: the backoff applies)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None
