"""Real MCP servers for the gateway's tests, written with the official `mcp`
Python SDK (`MCPServer`, formerly FastMCP), served over Streamable HTTP on a
loopback port.

    python tests/mcp/servers.py NAME [--port N] [--log FILE] [--json] [--stateless]

Prints `PORT <n>` once it listens. NAME picks the tool set (`alpha`, `beta`,
`many`). With --log, every HTTP request that reaches the server is appended to
FILE as one JSON line (method, JSON-RPC method, tool name, the headers the
tests look at), so a test can tell what reached the upstream.
"""

import argparse
import asyncio
import json
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


def alpha() -> MCPServer:
    s = MCPServer("alpha")

    @s.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Adds two numbers.")
    def add(a: int, b: int) -> int:
        return a + b

    @s.tool(description="Echoes the text.")
    def echo(text: str) -> str:
        return text

    @s.tool(annotations=ToolAnnotations(destructiveHint=False), description="Writes a note.")
    def write_note(text: str) -> str:
        return f"noted: {text}"

    @s.tool(name="read.file", annotations=ToolAnnotations(readOnlyHint=True))
    def read_file(path: str) -> str:
        return f"contents of {path}"

    # No structured copy: the result grows by one byte per x (the cap tests).
    @s.tool(description="Answers n times the letter x.", structured_output=False)
    def big(n: int) -> str:
        return "x" * n

    @s.tool(description="Sleeps, then answers.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "awake"

    @s.tool(description="Always fails.")
    def fail() -> str:
        raise ValueError("this tool always fails")

    return s


def beta() -> MCPServer:
    s = MCPServer("beta")

    @s.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Multiplies.")
    def mul(a: int, b: int) -> int:
        return a * b

    return s


def many() -> MCPServer:
    """More tools than one page of the SDK's listing holds, if it pages."""
    s = MCPServer("many")
    for i in range(120):
        def make(i=i):
            def f() -> int:
                return i
            f.__name__ = f"t{i:03d}"
            return f
        s.tool(name=f"t{i:03d}")(make())
    return s


class Log:
    """ASGI middleware: one JSON line per HTTP request that reached us."""

    def __init__(self, app, path):
        self.app = app
        self.path = path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.path:
            return await self.app(scope, receive, send)
        chunks = []
        more = True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        rpc = {}
        try:
            rpc = json.loads(body) if body else {}
        except ValueError:
            pass
        if not isinstance(rpc, dict):
            rpc = {}
        line = {
            "http": scope["method"],
            "method": rpc.get("method"),
            "tool": (rpc.get("params") or {}).get("name") if isinstance(rpc.get("params"), dict) else None,
            "authorization": headers.get("authorization"),
            "x-up": headers.get("x-up"),
            "session": headers.get("mcp-session-id"),
            "version": headers.get("mcp-protocol-version"),
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=["alpha", "beta", "many"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log")
    p.add_argument("--json", action="store_true", help="answer application/json, not SSE")
    p.add_argument("--stateless", action="store_true")
    a = p.parse_args()
    server = {"alpha": alpha, "beta": beta, "many": many}[a.name]()
    app = server.streamable_http_app(json_response=a.json, stateless_http=a.stateless)
    # IPPROTO_TCP given, not left 0: asyncio sets TCP_NODELAY only on sockets
    # whose proto says TCP, and without it the answer's body (written after its
    # head) waits for the client's delayed ACK, ~40 ms a request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(Log(app, a.log), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
