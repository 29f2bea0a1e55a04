"""runnel-client: the dispatcher's HTTP API from Python.

    from runnel_client import Client
    with Client("http://127.0.0.1:8080", token="...") as c:
        run = c.submit(agent_url=..., otp_setup=..., otp_run=..., prompt="hi")
        for line in c.stream(run.run_id):
            print(line)

The API is described by the dispatcher's GET /openapi.json.
"""

from ._client import AsyncClient, Client
from ._sse import Event, Line, RunCreated, RunnelError, StreamLost

__version__ = "0.1.0"  # the server's version; tests/api checks it

__all__ = ["AsyncClient", "Client", "Event", "Line", "RunCreated", "RunnelError", "StreamLost", "__version__"]
