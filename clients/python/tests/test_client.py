"""runnel-client against a real stack (conftest.py): real worker, real
agents, real Redis streams.  The Redis stream of each run is the reference
the client's lines are compared with."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import runnel_client
from runnel_client import AsyncClient, Client, RunnelError

from conftest import TOKEN


def redis_lines(stack, run_id: str) -> list[tuple[str, dict]]:
    r = stack.redis_client()
    try:
        entries = r("XRANGE", f"runnel:{{{run_id}}}:out", "-", "+")
    finally:
        r.close()
    out = []
    for eid, fields in entries:
        f = dict(zip(fields[::2], fields[1::2]))
        out.append((eid.decode(), json.loads(f[b"line"])))
    return out


def test_submit_wait_get(stack) -> None:
    with Client(stack.base, TOKEN) as c:
        run = c.submit(stack.mint("counted"), caller="client-test", meta={"turn": 1})
        assert run.run_id.startswith("run_") and not run.existing
        assert run.stream == f"runnel:{{{run.run_id}}}:out" and run.control == f"runnel:{{{run.run_id}}}:ctl"
        end = c.wait(run.run_id)
        assert end["type"] == "result" and end["message"] == "counted to 40"
        # The terminal line as the stream holds it, usage included when there.
        assert end == redis_lines(stack, run.run_id)[-1][1]
        assert end.get("usage", {}).get("input_tokens") in (None, 10)
        deadline = time.monotonic() + 10
        while (state := c.get(run.run_id))["status"] != "succeeded" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state["status"] == "succeeded" and state["run_id"] == run.run_id


def test_stream_equals_redis(stack) -> None:
    with Client(stack.base, TOKEN) as c:
        run = c.submit(stack.mint("counted"))
        got = list(c.events(run.run_id))
    want = redis_lines(stack, run.run_id)
    assert [(e.id, e.line) for e in got] == want
    assert sum(1 for _, line in want if line["type"] == "log" and line["message"].startswith("tick ")) == 40


def test_sse_resume_after_dropped_connections(stack, proxy_factory) -> None:
    """The connection is cut three times mid-stream (inside an event); the
    client resumes with Last-Event-ID and ends with every line once."""
    proxy = proxy_factory([1200, 1500, 2100])
    with Client(stack.base, TOKEN) as direct:
        run = direct.submit(stack.mint("counted"))
    seen: list[str] = []
    with Client(proxy.base, TOKEN) as c:
        got = []
        for ev in c.events(run.run_id):
            got.append((ev.id, ev.line))
            seen.append(ev.id)
    want = redis_lines(stack, run.run_id)
    assert got == want, "lost or repeated lines across the drops"
    assert len(proxy.heads) >= 4, f"only {len(proxy.heads)} connections: the drops did not happen"
    # Every reconnect said where it stopped: the last id handed out before it.
    resumed = [h for h in proxy.heads[1:]]
    for head in resumed:
        text = head.decode()
        assert "last-event-id: " in text.lower(), text
        lei = text.lower().split("last-event-id: ", 1)[1].split("\r\n", 1)[0]
        assert lei in seen, (lei, seen)
    # Not all at the start: the drops happened mid-stream.
    assert len({h for h in resumed}) == len(resumed)


def test_resume_from_a_given_id(stack) -> None:
    with Client(stack.base, TOKEN) as c:
        run = c.submit(stack.mint("counted"))
        c.wait(run.run_id)
        want = redis_lines(stack, run.run_id)
        cut = want[10][0]
        assert [(e.id, e.line) for e in c.events(run.run_id, after=cut)] == want[11:]
        # At the terminal line: nothing follows, the stream ends at once.
        assert list(c.stream(run.run_id, after=want[-1][0])) == []


def test_cancel(stack) -> None:
    with Client(stack.base, TOKEN) as c:
        run = c.submit(stack.mint("slow"))
        it = c.stream(run.run_id)
        first = next(it)
        assert first["type"] == "step" and first["status"] == "running"
        ans = c.cancel(run.run_id, reason="client test")
        assert ans["run_id"] == run.run_id and ans["cancel"] == "requested"
        end = list(it)[-1]
    assert end["type"] == "error" and end["code"] == "cancelled", end


def test_reply_to_an_ask(stack) -> None:
    with Client(stack.base, TOKEN) as c:
        run = c.submit(stack.mint("ask"), permission_mode="ask")
        it = c.stream(run.run_id)
        ask = next(line for line in it if line["type"] == "ask")
        assert ask["id"] == "ask_1" and ask["status"] == "open"
        ans = c.reply(run.run_id, "ask_1", option="allow_once")
        assert ans == {"run_id": run.run_id, "ask_id": "ask_1", "reply": "requested"}
        rest = list(it)
        assert rest[-1] == {**rest[-1], "type": "result", "message": "Allowed and done."}
        # Settled now: a second answer is a conflict.
        with pytest.raises(RunnelError) as e:
            c.reply(run.run_id, "ask_1", reject=True)
        assert e.value.status == 409 and e.value.message == "ask_id: the ask is already settled"
    with pytest.raises(ValueError):
        Client(stack.base, TOKEN).reply("r", "a", option="x", reject=True)


def test_errors_name_the_field(stack) -> None:
    with Client(stack.base, TOKEN) as c:
        with pytest.raises(RunnelError) as e:
            c.get("run_nosuch")
        assert (e.value.status, e.value.code, e.value.message) == (404, "not_found", "run_id: no such run")
        job = stack.mint("quick")
        del job["otp_run"]
        with pytest.raises(RunnelError) as e:
            c.submit(job)
        assert (e.value.status, e.value.code, e.value.message) == (400, "bad_request", "otp_run: missing")
        with pytest.raises(RunnelError) as e:
            list(c.stream("run_nosuch"))
        assert e.value.status == 404
    with Client(stack.base) as anonymous:
        with pytest.raises(RunnelError) as e:
            anonymous.get("run_nosuch")
        assert (e.value.status, e.value.code) == (401, "unauthorized")


def test_async_client(stack) -> None:
    async def main() -> None:
        async with AsyncClient(stack.base, TOKEN) as c:
            run = await c.submit(stack.mint("counted"))
            lines = [line async for line in c.stream(run.run_id)]
            assert lines == [line for _, line in redis_lines(stack, run.run_id)]
            assert await c.wait(run.run_id) == lines[-1]
            assert (await c.get(run.run_id))["run_id"] == run.run_id
            slow = await c.submit(stack.mint("slow"))
            await c.cancel(slow.run_id)
            end = await c.wait(slow.run_id)
            assert end["type"] == "error" and end["code"] == "cancelled"
            with pytest.raises(RunnelError) as e:
                await c.reply(slow.run_id, "ask_9", text="hello")
            assert e.value.status in (404, 409)

    asyncio.run(main())


def test_async_resume(stack, proxy_factory) -> None:
    proxy = proxy_factory([1300, 1700])

    async def main() -> list:
        async with AsyncClient(proxy.base, TOKEN) as c:
            return [(e.id, e.line) async for e in c.events(run.run_id)]

    with Client(stack.base, TOKEN) as direct:
        run = direct.submit(stack.mint("counted"))
    assert asyncio.run(main()) == redis_lines(stack, run.run_id)
    assert len(proxy.heads) >= 3


def test_version() -> None:
    assert runnel_client.__version__ == "0.1.0"
