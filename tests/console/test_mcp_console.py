"""The console's MCP pieces against a real MCP server (tests/mcp/servers.py, on
the official `mcp` Python SDK): a server's live tool list, and an agent's MCP
tools and approvals on its page, decided by an admin."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ADMIN_EMAIL, ADMIN_PASSWORD, http

ROOT = Path(__file__).resolve().parents[2]
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def alpha():
    """The `alpha` tool set on a loopback port: (its /mcp URL, the process)."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "mcp" / "servers.py"), "alpha"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        m = re.match(r"PORT (\d+)", line)
        assert m, f"the MCP server did not start: {line!r}"
        yield f"http://127.0.0.1:{m.group(1)}/mcp", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def add_server(gateway, name, url, **fields):
    status, body, _ = http(
        "POST", f"{gateway.url}/api/admin/mcp-servers", {"name": name, "url": url, **fields}, gateway.admin
    )
    assert status == 201, body


def rpc(gateway, token, method, params, session=None, mode="ask", rid=1):
    headers = {"Accept": ACCEPT, "X-Service-Tool-Mode": mode}
    if session:
        headers["Mcp-Session-Id"] = session
    return http(
        "POST",
        f"{gateway.url}/mcp",
        {"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
        token,
        headers=headers,
    )


def test_a_servers_page_lists_its_live_tools_and_says_when_the_upstream_is_down(console, gateway, alpha):
    url, proc = alpha
    add_server(gateway, "live", url, tool_classes={"echo": "write"})
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/mcp/live")
    add = console.page.locator("tr[data-mcp-tool=add]").inner_text()
    assert "live__add" in add and "read" in add and "annotations" in add and "yes" in add, add
    echo = console.page.locator("tr[data-mcp-tool=echo]").inner_text()
    assert "live__echo" in echo and "write" in echo and "config" in echo, echo
    # A name outside A-Za-z0-9_- is exposed sanitised, with its hash.
    dotted = console.page.locator('tr[data-mcp-tool="read.file"]').inner_text()
    assert re.search(r"live__read_file_[0-9a-f]{8}", dotted), dotted

    proc.terminate()
    proc.wait(timeout=10)
    console.go("/console/admin/mcp/live")
    assert console.page.locator("#mcp-tools-error").inner_text() == "upstream unavailable: live"
    assert console.page.locator("#mcp-tools").count() == 0
    assert console.errors == []
    http("DELETE", f"{gateway.url}/api/admin/mcp-servers/live", token=gateway.admin)


def test_an_agents_page_shows_its_mcp_tools_and_an_admin_approves_an_mcp_call(console, gateway, alpha):
    url, _ = alpha
    add_server(gateway, "agt", url)
    gateway.agent("mcp-console-agent")
    grant = {"mcp": {"servers": ["agt"]}}
    status, body, _ = http("PATCH", f"{gateway.url}/api/admin/agents/mcp-console-agent", grant, gateway.admin)
    assert status == 200, body
    _, login = gateway.user()
    status, me, _ = http("GET", f"{gateway.url}/api/users/me", token=login)
    assert status == 200, me
    status, body, _ = http("PATCH", f"{gateway.url}/api/admin/users/{me['id']}", grant, gateway.admin)
    assert status == 200, body
    access = gateway.sign_in(login, "mcp-console-agent")["access_token"]

    status, init, headers = rpc(
        gateway,
        access,
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "console-test", "version": "1"}},
    )
    assert status == 200, init
    session = headers["Mcp-Session-Id"]
    status, listed, _ = rpc(gateway, access, "tools/list", {}, session, rid=2)
    assert status == 200, listed
    assert "agt__write_note" in [t["name"] for t in listed["result"]["tools"]]
    call = {"name": "agt__write_note", "arguments": {"text": "hello"}}
    status, asked, _ = rpc(gateway, access, "tools/call", call, session, rid=3)
    assert status == 200 and asked["result"]["isError"] is True, asked
    approval = asked["result"]["_meta"]["gatehouse/approval"]["id"]

    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/agents/mcp-console-agent")
    tool = console.page.locator('tr[data-tool="agt__write_note"]')
    assert tool.locator(".source").inner_text() == "MCP server agt"
    assert tool.locator("button:has-text('Accept')").count() == 1
    row = console.page.locator(f"tr[data-approval={approval}]")
    assert row.locator(".source").inner_text() == "MCP server agt"
    assert row.locator(".status").inner_text() == "pending"
    assert '{"text":"hello"}' in row.inner_text()
    row.locator("button:has-text('Approve')").click()
    console.page.wait_for_load_state()
    assert console.page.locator(f"tr[data-approval={approval}] .status").inner_text() == "approved"

    # Approved: the same call goes upstream once.
    status, done, _ = rpc(gateway, access, "tools/call", call, session, rid=4)
    assert status == 200, done
    assert done["result"].get("isError") is not True, done
    assert "noted: hello" in done["result"]["content"][0]["text"], done
    assert console.errors == []
    http("DELETE", f"{gateway.url}/api/admin/mcp-servers/agt", token=gateway.admin)
