"""A real runnel stack for the client's tests: `runnel dev` (librdkafka's mock
cluster, a private redis-server, runnel-dispatcher, runnel-worker with the
process sandbox, the workspace stub) with command agents written here.

Needs RUNNEL_CLI (and the binaries next to it, as a build tree has them);
CTest sets it (tests/api/CMakeLists.txt).  The stack launcher is shared with
the property tests: tests/api/runnel_stack.py.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "api"))

import runnel_stack  # noqa: E402

TOKEN = "client-test-token-42"

USAGE = '{"requests":1,"input_tokens":10,"output_tokens":2,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}'
EMIT = "emit() { printf '%s\\n' \"$1\"; }\n"

AGENTS = {
    # 40 numbered lines over ~2 s, then a result carrying usage.
    "counted": runnel_stack.command_agent(EMIT + """
i=1
while [ $i -le 40 ]; do
  emit '{"type":"log","level":"info","message":"tick '$i' padding padding padding padding padding padding"}'
  sleep 0.05
  i=$((i+1))
done
emit '{"type":"result","message":"counted to 40","usage":""" + USAGE + """}'
"""),
    "quick": runnel_stack.command_agent(EMIT + """
emit '{"type":"result","message":"done at once"}'
"""),
    # A step that does not end by itself.
    "slow": runnel_stack.command_agent(EMIT + """
emit '{"type":"step","id":"step_wait","name":"waiting","status":"running"}'
i=0
while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
emit '{"type":"result","message":"nobody cancelled me"}'
"""),
    # Asks for permission, goes on only when allowed.
    "ask": runnel_stack.command_agent(EMIT + """
emit '{"type":"ask","id":"ask_1","kind":"permission","title":"Run: mkdir -p assets","tool":"Bash","options":[{"id":"allow_once","label":"Allow"},{"id":"reject_once","label":"Reject"}],"status":"open"}'
while read -r line; do
  case "$line" in
    *'"reply"'*allow_once*) emit '{"type":"result","message":"Allowed and done."}'; exit 0 ;;
    *'"reply"'*) emit '{"type":"error","code":"agent_refused","message":"permission refused"}'; exit 0 ;;
    *'"cancel"'*) exit 0 ;;
  esac
done
""", permission_mode="ask"),
}


@pytest.fixture(scope="session")
def stack() -> Iterator[runnel_stack.Stack]:
    s = runnel_stack.start(agents=AGENTS, token=TOKEN)
    try:
        yield s
    finally:
        findings = s.stop()
        assert not findings, "\n".join(findings)


class DroppingProxy:
    """A TCP proxy in front of the dispatcher that cuts its first answers
    after a given number of bytes (mid-stream, mid-event), the way a load
    balancer or a network blip would.  It records every request head."""

    def __init__(self, upstream: str, budgets: list[int]) -> None:
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.budgets = list(budgets)
        self.heads: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        with self.lock:
            budget = self.budgets.pop(0) if self.budgets else None
        u = socket.create_connection(self.upstream)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = c.recv(65536)
            if not chunk:
                c.close()
                u.close()
                return
            head += chunk
        with self.lock:
            self.heads.append(head)
        u.sendall(head)
        sent = 0
        try:
            while True:
                data = u.recv(65536)
                if not data:
                    break
                if budget is not None and sent + len(data) >= budget:
                    c.sendall(data[: budget - sent])
                    break
                c.sendall(data)
                sent += len(data)
        except OSError:
            pass
        # A hard drop: no FIN handshake niceties, just gone.
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def proxy_factory(stack: runnel_stack.Stack) -> Iterator:
    made: list[DroppingProxy] = []

    def make(budgets: list[int]) -> DroppingProxy:
        p = DroppingProxy(stack.base, budgets)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def pytest_report_header() -> str:
    return f"runnel: {os.environ.get('RUNNEL_CLI', '(RUNNEL_CLI unset)')}"
