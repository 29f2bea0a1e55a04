"""Schemathesis against a live dispatcher: every route of dispatcher/openapi.json,
with the bearer token configured and without one.

The stack is `runnel dev` (real redis-server, librdkafka's mock cluster, the
real runnel-dispatcher) with an idle stand-in for the worker: generated jobs
point their agent_url anywhere, and no worker may fetch those.  The test
plays the worker through Redis instead (runnel_stack.Finisher): every run
the dispatcher records as queued gets a terminal line, so streams end.

Checks: all of Schemathesis's (no 5xx, status codes, content types, headers
and bodies as documented, invalid input refused, valid input accepted, auth
enforced, undocumented methods answered 405), each request with a timeout
(a hang is a failure).  Budget: RUNNEL_API_EXAMPLES cases per operation and
phase (default 30), seed RUNNEL_API_SEED (default fixed, so CI repeats
itself; set it to explore).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import runnel_stack

HERE = Path(__file__).resolve().parent
DOC = HERE.parent.parent / "dispatcher" / "openapi.json"
EXAMPLES = int(os.environ.get("RUNNEL_API_EXAMPLES", "30"))
SEED = os.environ.get("RUNNEL_API_SEED", "20261126")
TOKEN = "api-test-token-0123456789"

# The run the document's examples name: seeded as a finished run with a
# settled ask, so the examples reach the real code paths (200, 409, 202).
EXAMPLE_RUN = "run_8Jd3kQ"


def seed_example_run(r: runnel_stack.Redis) -> None:
    out, state = f"runnel:{{{EXAMPLE_RUN}}}:out", f"runnel:{{{EXAMPLE_RUN}}}:state"
    lines = [
        {"type": "log", "level": "info", "message": "Loaded 3 skills", "ts": 1700000000000},
        {"type": "ask", "id": "ask_1", "kind": "permission", "title": "Run: mkdir -p assets",
         "options": [{"id": "allow_once", "label": "Allow"}, {"id": "reject_once", "label": "Reject"}],
         "status": "open", "ts": 1700000000100},
        {"type": "ask", "id": "ask_1", "kind": "permission", "status": "answered", "ts": 1700000000200},
        {"type": "result", "message": "Added an Inference node", "ts": 1700000000999},
    ]
    for i, line in enumerate(lines):
        r("XADD", out, f"1700000000050-{i}", "line", json.dumps(line))
    r("HSET", state, "status", "succeeded", "enqueued_at", 1700000000000, "started_at", 1700000000010,
      "ended_at", 1700000001000, "code", "", "tenant", "acme", "out_seq_base", 1700000000050)


def post(base: str, path: str, body: dict, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# Job fields of SPEC §2 that the document describes, each with a valid value.
NEWER_FIELDS = {
    "idempotency_key": "probe-key-1",
    "priority": 7,
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "webhook": "http://127.0.0.1:9/hook",
}


def refused_fields(base: str, token: str | None) -> list[str]:
    """The documented job fields this server still refuses as unknown."""
    refused = []
    for name, value in NEWER_FIELDS.items():
        body = {"agent_url": "http://127.0.0.1:9/ws", "otp_setup": "a", "otp_run": "b", "prompt": "p", name: value}
        status, answer = post(base, "/v1/runs", body, token)
        if status == 400 and answer.get("error", {}).get("message") == f"{name}: unknown field":
            refused.append(name)
        else:
            # Known; its value may still be refused here (a webhook without
            # a webhook secret, say), which is the field's own business.
            assert status < 500, (name, status, answer)
    return refused


def schema_for(base: str, token: str | None, tmp: Path) -> tuple[Path, list[str]]:
    """The served document, as Schemathesis gets it for this server."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(base + "/openapi.json", headers=headers), timeout=10) as r:
        served = r.read()
        assert r.headers["Content-Type"] == "application/json"
    # Served as it is in the tree.
    assert served == DOC.read_bytes()
    doc = json.loads(served)
    if token is None:
        # The document describes a dispatcher with a token; without one
        # every route is open (the description of the scheme says so).
        doc.pop("security", None)
    refused = refused_fields(base, token)
    for name in refused:
        del doc["components"]["schemas"]["JobFields"]["properties"][name]
    path = tmp / "openapi.json"
    path.write_text(json.dumps(doc))
    return path, refused


def explain_failure(stack: runnel_stack.Stack, report: Path) -> None:
    """Prints what helps to read a failure: network errors and their
    requests from the report, and the end of the dispatcher's log."""
    for f in report.glob("*.ndjson"):
        for line in f.read_text(errors="replace").splitlines():
            if "timed out" in line or "Connection" in line and "rror" in line:
                print("report:", line[:3000])
    log = Path(stack.scratch) / "logs" / "dispatcher.log"
    if log.exists():
        print("dispatcher.log ends with:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-60:]))
    print("finisher errors:", runnel_stack.Finisher.last_errors)


# Length caps are in bytes (caller 128, a cancel's reason 128, a reply's
# text 3072, prompt 512 KiB) and JSON Schema's maxLength counts characters,
# so with multi-byte text no maxLength is exact both ways.  Each run takes
# one side: with the token off, UTF-8 text of every plane and every check
# but positive_data_acceptance (valid-looking text over a byte cap is
# refused, rightly); with the token on, ASCII text, where bytes are
# characters, and every check.
MODES = {
    "off": ("utf-8", ["--exclude-checks", "positive_data_acceptance"]),
    "on": ("ascii", []),
}


@pytest.mark.parametrize("auth", ["off", "on"])
def test_schemathesis(auth: str, tmp_path: Path) -> None:
    token = TOKEN if auth == "on" else None
    stack = runnel_stack.start(idle_worker=True, token=token)
    finisher = None
    findings: list[str] = []
    try:
        r = stack.redis_client()
        seed_example_run(r)
        finisher = runnel_stack.Finisher(r)
        schema, refused = schema_for(stack.base, token, tmp_path)
        if refused:
            print(f"not accepted by this dispatcher yet (left out): {', '.join(refused)}")
        st = Path(sys.executable).parent / "schemathesis"
        # One worker: Hypothesis parses lambda sources with `ast`, which
        # CPython 3.11 does not do safely from two threads at once ("AST
        # constructor recursion depth mismatch" as a Schemathesis error).
        codec, extra = MODES[auth]
        config = tmp_path / "schemathesis.toml"
        config.write_text((HERE / "schemathesis.toml").read_text() + f'\n[generation]\ncodec = "{codec}"\n')
        cmd = [str(st), "--config-file", str(config), "run", str(schema), "--url", stack.base,
               "--checks", "all", "--request-timeout", "10",
               "--max-examples", str(EXAMPLES), "--seed", SEED, "--workers", "1",
               "--suppress-health-check", "data_too_large,filter_too_much,too_slow,large_base_example", "--no-color",
               "--report", "ndjson", "--report-dir", str(tmp_path / "report")]
        cmd += extra
        if token:
            cmd += ["--header", f"Authorization: Bearer {token}"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, cwd=tmp_path)
        print(p.stdout)
        m = re.search(r"(\d+) generated", p.stdout)
        print(f"schemathesis auth={auth} text={codec}: {m.group(1) if m else '?'} test cases, exit {p.returncode}")
        assert m and int(m.group(1)) > 0, "schemathesis ran no test case"
        if p.returncode != 0 or "errored" in p.stdout:
            explain_failure(stack, tmp_path / "report")
        assert p.returncode == 0, "schemathesis found failures (above)"
        assert "errored" not in p.stdout, "schemathesis had errors (above): a hang is one"
        # Still alive and still answering after all of it.
        with urllib.request.urlopen(stack.base + "/healthz", timeout=10) as h:
            assert h.status == 200
    finally:
        if finisher:
            finisher.stop()
        findings = stack.stop()
    assert not findings, "\n".join(findings)
