"""dispatcher/openapi.json: a valid OpenAPI 3.1 document, and the prose, the
router and the document name the same routes.

- the document validates with openapi-spec-validator;
- the route table of docs/protocol.md (the contract restated) and the route
  headings of docs/dispatcher.md list exactly the document's operations;
- every path the router (dispatcher/http.c, match_path) knows is in the
  document, and every document path is one the router knows;
- the versions agree: CMakeLists.txt, the document, runnel-client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "dispatcher" / "openapi.json"
METHODS = ("get", "post", "put", "delete", "patch", "head", "options")


def document() -> dict:
    return json.loads(DOC.read_text())


def operations() -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, item in document()["paths"].items() for m in item if m in METHODS}


def normalise(path: str) -> str:
    """`/v1/runs/{id}/events?after=ID` -> `/v1/runs/{run_id}/events`."""
    return path.split("?", 1)[0].replace("{id}", "{run_id}")


def test_document_validates() -> None:
    spec, _ = read_from_filename(str(DOC))
    validate(spec)
    assert spec["openapi"].startswith("3.1")


def test_every_operation_is_described() -> None:
    doc = document()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            assert op.get("summary") and op.get("operationId"), (method, path)
            assert "200" in op["responses"] or "202" in op["responses"], (method, path)
            # Every operation behind the token documents the 401.
            if op.get("security", doc["security"]):
                assert "401" in op["responses"], (method, path)
            for code, resp in op["responses"].items():
                if code.startswith(("4", "5")) and "$ref" not in resp:
                    types = resp.get("content", {})
                    assert "application/json" in types, (method, path, code)


def protocol_routes() -> set[tuple[str, str]]:
    """The route table of docs/protocol.md ('| `POST /stream` | ...')."""
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text.split("## Dispatcher HTTP", 1)[1].split("\n## ", 1)[0]
    routes = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        method = None
        for tok in re.findall(r"`([^`]+)`", cell):
            m = re.fullmatch(r"(GET|POST|PUT|DELETE|PATCH) (/\S*)", tok)
            if m:
                method, path = m.group(1), m.group(2)
            elif tok.startswith("/") and method:
                path = tok
            else:
                continue
            routes.add((method, normalise(path)))
    return routes


def dispatcher_md_routes() -> set[tuple[str, str]]:
    """The '### METHOD /path - what' headings of docs/dispatcher.md."""
    text = (ROOT / "docs" / "dispatcher.md").read_text()
    routes = set()
    for m in re.finditer(r"^### ((?:GET|POST|PUT|DELETE|PATCH) .*)$", text, re.M):
        head = m.group(1).split(" - ", 1)[0]
        method, rest = head.split(" ", 1)
        for path in re.split(r",\s*", rest):
            routes.add((method, normalise(path.strip())))
    return routes


def test_prose_lists_the_documents_routes() -> None:
    ops = operations()
    assert protocol_routes() == ops, f"docs/protocol.md vs openapi.json: {protocol_routes() ^ ops}"
    assert dispatcher_md_routes() == ops, f"docs/dispatcher.md vs openapi.json: {dispatcher_md_routes() ^ ops}"


def router_paths() -> set[str]:
    """The path literals dispatcher/http.c's match_path compares with."""
    src = (ROOT / "dispatcher" / "http.c").read_text()
    body = src.split("static void match_path(", 1)[1].split("\n}\n", 1)[0]
    exact = set(re.findall(r'strcmp\(path, "(/[^"]*)"\) == 0', body))
    runs = re.search(r'static const char runs\[\] = "(/[^"]*)";', body).group(1)
    subs = set(re.findall(r'strcmp\(slash, "(/[^"]*)"\) == 0', body))
    subs |= {s + "{ask_id}" for s in re.findall(r'strncmp\(slash, "(/[^"]*/)", \d+\) == 0', body)}
    paths = exact | {runs + "{run_id}"} | {runs + "{run_id}" + s for s in subs}
    # "/ui" redirects to "/ui/", which the document describes.
    return {p for p in paths if p != "/ui"} | ({"/ui/"} if "/ui" in exact else set())


def test_router_and_document_agree() -> None:
    doc_paths = set(document()["paths"])
    assert router_paths() == doc_paths, f"http.c vs openapi.json: {router_paths() ^ doc_paths}"


def test_versions_agree() -> None:
    cmake = (ROOT / "CMakeLists.txt").read_text()
    server = re.search(r"project\(runnel VERSION (\S+)", cmake).group(1)
    pyproject = (ROOT / "clients" / "python" / "pyproject.toml").read_text()
    client = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    init = (ROOT / "clients" / "python" / "src" / "runnel_client" / "__init__.py").read_text()
    assert document()["info"]["version"] == server
    assert client == server
    assert f'__version__ = "{server}"' in init
