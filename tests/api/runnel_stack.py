"""A real runnel stack for the API tests: `runnel dev` on free ports.

`runnel dev` runs librdkafka's mock cluster in its own process, starts a
private redis-server, the runnel-dispatcher and runnel-worker binaries and
the workspace stub, and prints their addresses once the dispatcher's /readyz
answers 200.  The tests read that banner and talk to the pieces directly.

The binaries come from the environment (CTest sets them):
RUNNEL_CLI, RUNNEL_DISPATCHER_BIN, RUNNEL_WORKER_BIN.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

SANITIZER = re.compile(r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer")


def _own_group_dies_with_us() -> None:
    """In the child: its own process group (stop() signals the whole
    stack), and SIGTERM when the test process dies (a CTest timeout kills
    pytest; the stack must not outlive it)."""
    import ctypes

    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def command_agent(script: str, **config: object) -> dict:
    """An agent definition for the stub: /bin/sh printing envelope lines."""
    base = {
        "system_prompt": "api test",
        "model": "none",
        "skills": [],
        "mcp_servers": [],
        "agent": {"kind": "command", "argv": ["/bin/sh", "-c", "read -r turn\n" + script]},
        "max_runtime_sec": 120,
    }
    base.update(config)
    return {"env": {"variables": {}, "setup_script": None}, "config": base}


@dataclass
class Stack:
    """One `runnel dev` process group and what its banner said."""

    proc: subprocess.Popen
    dir: str
    base: str = ""
    stub: str = ""
    redis: str = ""
    kafka: str = ""
    scratch: str = ""
    out: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(self.out)

    def redis_client(self) -> "Redis":
        m = re.match(r"redis://([^:/]+):(\d+)", self.redis)
        assert m, self.redis
        return Redis(m.group(1), int(m.group(2)))

    def mint(self, agent: str, prompt: str = "api test") -> dict:
        """A job body for agent: OTPs minted by the workspace stub."""
        import urllib.request

        req = urllib.request.Request(f"{self.stub}/mint?agent={agent}", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10) as r:
            o = json.loads(r.read())
        return {k: o[k] for k in ("agent_url", "otp_setup", "otp_run", "otp_upload")} | {"prompt": prompt}

    def stop(self) -> list[str]:
        """Stops the stack; returns sanitizer findings from its output and logs."""
        findings = []
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if SANITIZER.search(self.text()):
            findings.append("runnel dev:\n" + self.text()[-4000:])
        for root, _dirs, files in os.walk(self.dir):
            for f in files:
                if f.endswith(".log"):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        t = fh.read()
                    if SANITIZER.search(t):
                        findings.append(f"{f}:\n{t[-4000:]}")
        shutil.rmtree(self.dir, ignore_errors=True)
        return findings


def start(agents: dict[str, dict] | None = None, token: str | None = None,
          idle_worker: bool = False, env: dict[str, str] | None = None,
          timeout: float = 90.0) -> Stack:
    """Starts `runnel dev --port 0` with the given agent definitions.

    idle_worker: a stand-in that takes no jobs replaces runnel-worker (the
    property tests enqueue runs whose agent_url points anywhere: no worker
    may fetch those).
    """
    cli = os.environ["RUNNEL_CLI"]
    d = tempfile.mkdtemp(prefix="runnel-api-")
    adir = os.path.join(d, "agents")
    os.mkdir(adir)
    for name, definition in (agents or {}).items():
        with open(os.path.join(adir, f"{name}.json"), "w") as f:
            json.dump(definition, f)
    e = dict(os.environ)
    e.update({"TMPDIR": d, "RUNNEL_DRAIN_SEC": "1"})
    e.pop("RUNNEL_API_TOKEN", None)
    if token is not None:
        e["RUNNEL_API_TOKEN"] = token
    if idle_worker:
        idle = os.path.join(d, "idle-worker")
        with open(idle, "w") as f:
            f.write("#!/bin/sh\n# Takes no jobs: the test plays the worker through Redis.\nexec sleep 100000\n")
        os.chmod(idle, 0o755)
        e["RUNNEL_WORKER_BIN"] = idle
    e.update(env or {})
    proc = subprocess.Popen([cli, "dev", "--port", "0", "--sandbox", "process", "--agents", adir, "--keep"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=e, preexec_fn=_own_group_dies_with_us, text=True, errors="replace")
    s = Stack(proc=proc, dir=d)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            s.out.append(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = s.text()
        if re.search(r"scratch\s+\S+", t) and re.search(r"dispatcher\s+http:\S+", t):
            s.base = re.search(r"dispatcher\s+(http:\S+)", t).group(1)
            s.stub = re.search(r"workspace\s+(http:\S+)", t).group(1)
            s.redis = re.search(r"redis\s+(redis:\S+)", t).group(1)
            s.kafka = re.search(r"kafka\s+(\S+)", t).group(1)
            s.scratch = re.search(r"scratch\s+(\S+)", t).group(1)
            return s
        if proc.poll() is not None:
            time.sleep(0.2)
            s.stop()
            raise RuntimeError("runnel dev exited:\n" + t)
        time.sleep(0.05)
    s.stop()
    raise RuntimeError("runnel dev did not come up:\n" + s.text())


class Redis:
    """The few Redis commands the tests need, over RESP2 (no client library)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.buf = b""
        self.lock = threading.Lock()

    def close(self) -> None:
        self.sock.close()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def __call__(self, *args):
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        msg = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        with self.lock:
            self.sock.sendall(msg)
            return self._reply()


class Finisher:
    """Plays the worker for runs nobody else will run: every run the
    dispatcher records as queued gets one terminal line, so /stream and the
    events tail end instead of waiting for a worker that never comes."""

    last_errors: list[str] = []

    def __init__(self, redis: Redis, prefix: str = "runnel") -> None:
        self.r = redis
        self.prefix = prefix
        self.done: set[bytes] = set()
        self.errors: list[str] = []
        Finisher.last_errors = self.errors
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.wait(0.02):
            try:
                self._pass()
            except Exception as e:  # keep finishing; say why a pass failed
                self.errors.append(repr(e))

    def _pass(self) -> None:
        if True:
            cursor = b"0"
            while True:
                cursor, keys = self.r("SCAN", cursor, "MATCH", f"{self.prefix}:{{*}}:state", "COUNT", 1000)
                for k in keys:
                    if k in self.done:
                        continue
                    if self.r("HGET", k, "status") != b"queued":
                        continue
                    self.done.add(k)
                    out = k[: -len(b"state")] + b"out"
                    now = int(time.time() * 1000)
                    line = json.dumps({"type": "result", "message": "finished by the test", "ts": now})
                    self.r("XADD", out, "*", "line", line)
                    self.r("HSET", k, "status", "succeeded", "ended_at", now, "code", "")
                if cursor in (b"0", 0):
                    break

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
