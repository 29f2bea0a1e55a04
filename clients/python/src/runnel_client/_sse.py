"""Server-sent events as the dispatcher writes them, and what both clients
share: the error type, the answer types, the resume policy."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TERMINAL = ("result", "error")

Line = dict[str, Any]
"""One envelope line (SPEC §4): {"type": "log" | "step" | "result" | "error" | "ask", ...}."""


class RunnelError(Exception):
    """The dispatcher refused a request: {"error": {"code", "message"}}.

    status is the HTTP status; code and message are the dispatcher's (the
    message names the field at fault, e.g. "otp_run: missing").
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class StreamLost(Exception):
    """The run's stream could not be resumed within the retry budget."""


@dataclass(frozen=True)
class RunCreated:
    """The answer to submit(): the run's id and its Redis streams.

    existing is True when the dispatcher recognised the idempotency key and
    answered with the first run (HTTP 200 instead of 202).
    """

    run_id: str
    stream: str
    control: str
    existing: bool = False


@dataclass
class Event:
    """One SSE event: id is the Redis stream entry id, line the envelope line."""

    id: str
    line: Line


@dataclass
class SseParser:
    """Feeds lines of a text/event-stream body, yields complete events.

    Comments (": heartbeat") are skipped; several data lines are joined with
    LF, which gives back the JSON text the dispatcher split.
    """

    _id: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, raw: str) -> Event | None:
        if raw.endswith("\r"):
            raw = raw[:-1]
        if raw == "":
            if not self._data:
                return None
            text, self._data = "\n".join(self._data), []
            return Event(self._id, json.loads(text))
        if raw.startswith(":"):
            return None
        name, _, value = raw.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "id":
            self._id = value
        elif name == "data":
            self._data.append(value)
        return None


def raise_for_error(status: int, body: bytes) -> None:
    """Raises RunnelError for a 4xx/5xx answer."""
    if status < 400:
        return
    try:
        err = json.loads(body)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", body[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    raise RunnelError(status, code, message)


@dataclass
class Backoff:
    """Delays between reconnects: 0.25 s doubling to 4 s; reset on progress."""

    retries: int
    failures: int = 0

    def next_delay(self) -> float:
        self.failures += 1
        if self.failures > self.retries:
            raise StreamLost(f"the stream dropped {self.failures} times without progress")
        return min(4.0, 0.25 * 2 ** (self.failures - 1))

    def progress(self) -> None:
        self.failures = 0
