"""Sync and async clients of the dispatcher's HTTP API (dispatcher/openapi.json)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from ._sse import TERMINAL, Backoff, Event, Line, RunCreated, SseParser, raise_for_error

DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=60.0)  # streams get a heartbeat every 15 s


ENDED = ("succeeded", "failed", "cancelled", "lost")


def _ended(state: Mapping[str, Any]) -> bool:
    """The run's state hash says it is over (its terminal line is written)."""
    return state.get("status") in ENDED


def _headers(token: str | None) -> dict[str, str]:
    h = {"Accept": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


def _job(job: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(job or {})
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def _created(resp: httpx.Response) -> RunCreated:
    raise_for_error(resp.status_code, resp.content)
    o = resp.json()
    return RunCreated(o["run_id"], o["stream"], o["control"], existing=resp.status_code == 200)


def _reply_body(option: str | None, text: str | None, reject: bool) -> dict[str, Any]:
    given = [x for x in (option is not None, text is not None, reject) if x]
    if len(given) != 1:
        raise ValueError("give exactly one of option, text, reject")
    if option is not None:
        return {"option": option}
    if text is not None:
        return {"text": text}
    return {"reject": True}


def _events_request(run_id: str, after: str | None) -> tuple[str, dict[str, str], dict[str, str]]:
    params = {}
    headers = {"Accept": "text/event-stream"}
    if after:
        # Last-Event-ID wins over after= on the dispatcher; send both forms
        # the same, so a proxy that drops one still resumes right.
        params["after"] = after
        headers["Last-Event-ID"] = after
    return f"/v1/runs/{run_id}/events", params, headers


class Client:
    """A blocking client.  Use as a context manager or call close().

    base_url: the dispatcher, e.g. "http://127.0.0.1:8080".  token: its
    RUNNEL_API_TOKEN, when it has one.  retries: how many reconnects in a
    row without a new line stream() makes before it gives up (StreamLost).
    """

    def __init__(self, base_url: str, token: str | None = None, *, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 retries: int = 8, http: httpx.Client | None = None) -> None:
        self._http = http or httpx.Client(base_url=base_url, headers=_headers(token), timeout=timeout)
        self.retries = retries

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def submit(self, job: Mapping[str, Any] | None = None, *, traceparent: str | None = None,
               **fields: Any) -> RunCreated:
        """POST /v1/runs: enqueue a run; returns once Kafka has the job.

        job (or keyword fields) is the job of SPEC §2: agent_url, otp_setup,
        otp_run, prompt, and the optional otp_upload, run_id, caller,
        max_runtime_sec, meta, tenant, permission_mode, idempotency_key,
        priority, traceparent, webhook.
        """
        h = {"traceparent": traceparent} if traceparent else None
        return _created(self._http.post("/v1/runs", json=_job(job, fields), headers=h))

    def get(self, run_id: str) -> dict[str, Any]:
        """GET /v1/runs/{run_id}: the run's state (status, worker, times, code, usage...)."""
        r = self._http.get(f"/v1/runs/{run_id}")
        raise_for_error(r.status_code, r.content)
        return r.json()

    def cancel(self, run_id: str, reason: str | None = None) -> dict[str, Any]:
        """POST /v1/runs/{run_id}/cancel: asks the run to stop (it ends `cancelled`)."""
        r = self._http.post(f"/v1/runs/{run_id}/cancel", json={"reason": reason} if reason else None)
        raise_for_error(r.status_code, r.content)
        return r.json()

    def reply(self, run_id: str, ask_id: str, *, option: str | None = None, text: str | None = None,
              reject: bool = False) -> dict[str, Any]:
        """POST /v1/runs/{run_id}/replies/{ask_id}: answers an open ask (exactly one of the three)."""
        r = self._http.post(f"/v1/runs/{run_id}/replies/{ask_id}", json=_reply_body(option, text, reject))
        raise_for_error(r.status_code, r.content)
        return r.json()

    def events(self, run_id: str, after: str | None = None) -> Iterator[Event]:
        """The run's lines after entry id `after`, each with its entry id,
        until the terminal line.  A dropped connection is resumed with
        Last-Event-ID = the last id seen, so no line is lost or repeated."""
        backoff = Backoff(self.retries)
        while True:
            path, params, headers = _events_request(run_id, after)
            try:
                with self._http.stream("GET", path, params=params, headers=headers) as r:
                    if r.status_code == 503:
                        r.read()
                        time.sleep(backoff.next_delay())
                        continue
                    if r.status_code >= 400:
                        raise_for_error(r.status_code, r.read())
                    parser = SseParser()
                    got = 0
                    for raw in r.iter_lines():
                        ev = parser.feed(raw)
                        if ev is None:
                            continue
                        after = ev.id
                        got += 1
                        backoff.progress()
                        yield ev
                        if ev.line.get("type") in TERMINAL:
                            return
                # A clean end without the terminal line: either the cursor
                # was already at the terminal line (the dispatcher ends such
                # an answer at once, empty) or the dispatcher is draining.
                if got == 0 and _ended(self.get(run_id)):
                    return
            except (httpx.TransportError, ValueError):
                pass  # dropped mid-stream (or cut inside an event): resume below
            time.sleep(backoff.next_delay())

    def stream(self, run_id: str, after: str | None = None) -> Iterator[Line]:
        """The run's envelope lines (dicts) until its terminal line, resuming
        by itself after a dropped connection."""
        for ev in self.events(run_id, after):
            yield ev.line

    def wait(self, run_id: str) -> Line:
        """Follows the run to its end; returns the terminal line (a `result`
        or an `error`, with `usage` when the run called a model)."""
        last: Line = {}
        for last in self.stream(run_id):
            pass
        return last


class AsyncClient:
    """The same API for asyncio: every call is awaited, events() and
    stream() are async iterators."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 retries: int = 8, http: httpx.AsyncClient | None = None) -> None:
        self._http = http or httpx.AsyncClient(base_url=base_url, headers=_headers(token), timeout=timeout)
        self.retries = retries

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def submit(self, job: Mapping[str, Any] | None = None, *, traceparent: str | None = None,
                     **fields: Any) -> RunCreated:
        h = {"traceparent": traceparent} if traceparent else None
        return _created(await self._http.post("/v1/runs", json=_job(job, fields), headers=h))

    async def get(self, run_id: str) -> dict[str, Any]:
        r = await self._http.get(f"/v1/runs/{run_id}")
        raise_for_error(r.status_code, r.content)
        return r.json()

    async def cancel(self, run_id: str, reason: str | None = None) -> dict[str, Any]:
        r = await self._http.post(f"/v1/runs/{run_id}/cancel", json={"reason": reason} if reason else None)
        raise_for_error(r.status_code, r.content)
        return r.json()

    async def reply(self, run_id: str, ask_id: str, *, option: str | None = None, text: str | None = None,
                    reject: bool = False) -> dict[str, Any]:
        r = await self._http.post(f"/v1/runs/{run_id}/replies/{ask_id}", json=_reply_body(option, text, reject))
        raise_for_error(r.status_code, r.content)
        return r.json()

    async def events(self, run_id: str, after: str | None = None) -> AsyncIterator[Event]:
        backoff = Backoff(self.retries)
        while True:
            path, params, headers = _events_request(run_id, after)
            try:
                async with self._http.stream("GET", path, params=params, headers=headers) as r:
                    if r.status_code == 503:
                        await r.aread()
                        await asyncio.sleep(backoff.next_delay())
                        continue
                    if r.status_code >= 400:
                        raise_for_error(r.status_code, await r.aread())
                    parser = SseParser()
                    got = 0
                    async for raw in r.aiter_lines():
                        ev = parser.feed(raw)
                        if ev is None:
                            continue
                        after = ev.id
                        got += 1
                        backoff.progress()
                        yield ev
                        if ev.line.get("type") in TERMINAL:
                            return
                if got == 0 and _ended(await self.get(run_id)):
                    return
            except (httpx.TransportError, ValueError):
                pass
            await asyncio.sleep(backoff.next_delay())

    async def stream(self, run_id: str, after: str | None = None) -> AsyncIterator[Line]:
        async for ev in self.events(run_id, after):
            yield ev.line

    async def wait(self, run_id: str) -> Line:
        last: Line = {}
        async for last in self.stream(run_id):
            pass
        return last
