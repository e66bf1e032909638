"""The MCP gateway with real MCP clients: the official `mcp` Python SDK's
streamable HTTP client session, and the TypeScript `@modelcontextprotocol/sdk`
client (tests/mcp-ts/client.mjs), against real MCP servers written with the
`mcp` SDK (tests/mcp/servers.py) behind the gateway.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, http

SERVERS = ROOT / "tests" / "mcp" / "servers.py"


def start_upstream(name, *args):
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS), name, *args], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/mcp"


@pytest.fixture(scope="module")
def mcp_key(gateway):
    """alpha and beta behind the gateway; an API key (of a user) granted both."""
    procs = []
    try:
        for name, args in [("alpha", []), ("beta", ["--json"])]:
            proc, url = start_upstream(name, *args)
            procs.append(proc)
            status, body = http(
                "POST", f"{gateway.url}/api/admin/mcp-servers", {"name": name, "url": url}, gateway.admin
            )
            assert status == 201, body
        status, body = http(
            "POST", f"{gateway.url}/api/admin/users",
            {"email": "mcp-sdk@example.com", "password": "user-password-1"}, gateway.admin,
        )
        assert status == 201, body
        uid = body["id"]
        status, body = http(
            "PATCH", f"{gateway.url}/api/admin/users/{uid}", {"mcp": {"servers": ["*"]}}, gateway.admin
        )
        assert status == 200, body
        status, body = http(
            "POST", f"{gateway.url}/api/auth/jwt/login",
            form={"username": "mcp-sdk@example.com", "password": "user-password-1"},
        )
        assert status == 200, body
        status, body = http(
            "POST", f"{gateway.url}/api/api-keys",
            {"name": "mcp-sdk", "mcp": {"servers": ["*"]}}, body["access_token"],
        )
        assert status == 201, body
        yield body["key"]
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


async def with_session(url, key, fn):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as hc:
        async with streamable_http_client(url, http_client=hc) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                return await fn(session, init)


def test_python_sdk_lists_and_calls_tools_through_mcp(gateway, mcp_key):
    import anyio

    async def run(session, init):
        assert init.server_info.name == "gatehouse"
        tools = (await session.list_tools()).tools
        names = [t.name for t in tools]
        assert names[:3] == ["alpha__add", "alpha__echo", "alpha__write_note"]
        assert names[-1] == "beta__mul"
        add = tools[0]
        assert add.annotations.read_only_hint is True
        assert add.meta["gatehouse/server"] == "alpha"
        assert add.meta["gatehouse/class"] == "read"
        r = await session.call_tool("alpha__add", {"a": 2, "b": 40})
        assert not r.is_error
        assert r.content[0].text == "42"
        r = await session.call_tool("beta__mul", {"a": 6, "b": 7})
        assert r.content[0].text == "42"
        r = await session.call_tool("alpha__fail", {})
        assert r.is_error
        with pytest.raises(Exception) as e:
            await session.call_tool("alpha__nope", {})
        assert "Unknown tool: alpha__nope" in str(e.value)
        await session.send_ping()
        return True

    assert anyio.run(with_session, f"{gateway.url}/mcp", mcp_key, run)


def test_python_sdk_on_one_server_route(gateway, mcp_key):
    import anyio

    async def run(session, init):
        names = [t.name for t in (await session.list_tools()).tools]
        assert names == ["mul"]
        r = await session.call_tool("mul", {"a": 3, "b": 3})
        return r.content[0].text

    assert anyio.run(with_session, f"{gateway.url}/mcp/beta", mcp_key, run) == "9"


def test_typescript_sdk_lists_and_calls_tools_through_mcp(gateway, mcp_key):
    script = ROOT / "tests" / "mcp-ts" / "client.mjs"
    out = subprocess.run(
        ["node", str(script), f"{gateway.url}/mcp", mcp_key],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["server"] == "gatehouse"
    assert "alpha__add" in r["tools"] and "beta__mul" in r["tools"]
    assert r["add"] == "5"
    assert r["unknown"].find("Unknown tool: alpha__nope") >= 0
