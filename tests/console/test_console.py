"""The web console in a real headless Chromium, against a real gateway."""

import http.server as httpserver
import os
import threading
import time
import urllib.parse

import pytest
from pathlib import Path

from conftest import ADMIN_EMAIL, ADMIN_PASSWORD, USER_PASSWORD, free_port, http

SHOTS = os.environ.get("GATEHOUSE_CONSOLE_SCREENSHOTS")
EVIL = '<script>window.__pwned=1;alert(1)</script><img src=x onerror="window.__pwned=1;alert(2)">'


def shot(console, name, full_page=True):
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        console.page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=full_page)


def chat(gateway, agent, access, tools):
    body = {
        "model": "ignored",
        "messages": [{"role": "user", "content": "hello"}],
        "tools": [
            {"type": "function", "function": {"name": t, "parameters": {"type": "object", "properties": {}}}}
            for t in tools
        ],
    }
    status, answer, headers = http(
        "POST", f"{gateway.url}/v1/agents/{agent}/chat/completions", body, access
    )
    assert status == 200, answer
    return headers.get("X-Service-Held-Tools")


def test_a_fresh_install_leads_through_the_next_steps_to_a_first_request(fresh_console, fresh_gateway, stub):
    console, page = fresh_console, fresh_console.page
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    steps = page.locator("section.first-run")
    assert steps.locator("h2").inner_text() == "Get started"
    assert steps.locator("li.todo").count() == 3
    assert f"{fresh_gateway.url}/v1" in steps.inner_text()
    charts = page.locator("figure.chart")
    assert charts.count() == 3
    assert page.locator("figure.chart svg").count() == 0, "no bare axes"
    assert charts.locator("p.empty").all_inner_texts() == ["No requests yet."] * 3
    shot(console, "first-run")

    # Each step's link leads to the page that does it.
    page.click("section.first-run a:has-text('Add a provider')")
    page.wait_for_load_state()
    assert page.url.endswith("/console/admin/models#providers")
    form = page.locator("form[action='/console/admin/providers']")
    form.locator("input[name=name]").fill("stub")
    form.locator("input[name=base_url]").fill(f"{stub}/v1")
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()
    console.go("/console/")
    assert steps.locator("li.done").count() == 1

    page.click("section.first-run a:has-text('Add a model')")
    page.wait_for_load_state()
    assert page.url.endswith("/console/admin/models#new-model")
    page.fill("input[name=id]", "first-chat")
    page.fill("input[name=upstream_model_0]", "up-first")
    page.click("button:has-text('Add model')")
    page.wait_for_load_state()
    console.go("/console/")
    assert steps.locator("li.done").count() == 2

    page.click("section.first-run a:has-text('Create an API key')")
    page.wait_for_load_state()
    assert page.url.endswith("/console/keys")
    page.fill("input[name=name]", "first key")
    page.click("button:has-text('Create key')")
    page.wait_for_load_state()
    key = page.locator("#new-key").inner_text()

    # Set up: the steps are gone; the first request shows in the charts.
    console.go("/console/")
    assert steps.count() == 0
    status, answer, _ = http(
        "POST", f"{fresh_gateway.url}/v1/chat/completions",
        {"model": "first-chat", "messages": [{"role": "user", "content": "hi"}]}, key,
    )
    assert status == 200, answer
    deadline = time.monotonic() + 10
    while page.locator("figure.chart svg").count() != 3:
        assert time.monotonic() < deadline, page.content()
        time.sleep(0.2)
        console.go("/console/")
    assert page.locator("figure.chart p.empty").count() == 0
    assert console.errors == [], console.errors


def test_sign_in_and_sign_out(console):
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    assert console.page.url.endswith("/console/")
    assert console.page.locator("h1").inner_text() == "Overview"
    assert ADMIN_EMAIL in console.page.locator("header .who").inner_text()
    console.page.click("header button:has-text('Sign out')")
    console.page.wait_for_load_state()
    assert "/console/login" in console.page.url
    # The session is gone: pages send us back to the sign-in form.
    console.go("/console/admin/users")
    assert "/console/login" in console.page.url
    assert console.errors == []


def test_wrong_password_is_refused(console):
    console.sign_in(ADMIN_EMAIL, "not-the-password")
    assert "/console/login" in console.page.url
    assert "The e-mail or password is wrong." in console.page.locator(".error").inner_text()
    console.go("/console/keys")
    assert "/console/login" in console.page.url


def test_accepting_a_held_tool_stops_the_agent_chat_holding_it(console, gateway):
    gateway.agent("held-agent", tool_contract=["known"])
    _, login = gateway.user()
    signed = gateway.sign_in(login, "held-agent")
    access = signed["access_token"]
    status, body, _ = http(
        "PUT",
        f"{gateway.url}/v1/agents/held-agent/manifest",
        {
            "app_name": "app",
            "app_version": "1",
            "sdk": "py",
            "tools": [
                {"name": "known", "description": "k", "parameters": {"type": "object"}, "class": "read"},
                {"name": "extra", "description": "an extra tool", "parameters": {"type": "object"}, "class": "read"},
            ],
        },
        access,
    )
    assert status == 200, body
    assert chat(gateway, "held-agent", access, ["known", "extra"]) == "extra"

    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/agents/held-agent")
    row = console.page.locator("#tools tr[data-tool=extra]")
    assert row.locator(".status").inner_text() == "held"
    shot(console, "agent")
    row.locator("button:has-text('Accept')").click()
    console.page.wait_for_load_state()
    assert console.page.locator("#tools tr[data-tool=extra] .status").inner_text() == "accepted"
    assert chat(gateway, "held-agent", access, ["known", "extra"]) is None
    assert console.errors == []


def test_an_admin_approves_and_denies_approvals_from_the_agent_page(console, gateway, stub):
    gateway.agent("approve-agent")
    _, login = gateway.user()
    access = gateway.sign_in(login, "approve-agent")["access_token"]
    # The upstream asks for two write calls; in ask mode each needs an approval.
    calls = [
        {"id": "call_a", "name": "write_note", "arguments": '{"text":"first"}'},
        {"id": "call_b", "name": "delete_note", "arguments": '{"id":7}'},
    ]
    status, body, _ = http("POST", f"{stub}/_stub/script", {"model": "up-chat", "script": {"tool_calls": calls}})
    assert status == 200, body
    try:
        status, answer, _ = http(
            "POST",
            f"{gateway.url}/v1/agents/approve-agent/chat/completions",
            {"model": "x", "messages": [{"role": "user", "content": "go"}],
             "tools": [{"type": "function", "function": {"name": c["name"], "parameters": {"type": "object"}}} for c in calls]},
            access,
            headers={"X-Service-Tool-Mode": "ask"},
        )
    finally:
        http("POST", f"{stub}/_stub/script", {"model": "up-chat", "script": None})
    assert status == 200, answer
    ids = {a["tool"]: a["id"] for a in answer["approvals"]}

    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/agents/approve-agent")
    first = console.page.locator(f"tr[data-approval={ids['write_note']}]")
    assert first.locator(".status").inner_text() == "pending"
    assert first.locator(".source").inner_text() == "chat"
    assert '{"text":"first"}' in first.inner_text()
    first.locator("button:has-text('Approve')").click()
    console.page.wait_for_load_state()
    assert "Approved" in console.page.locator(".note").inner_text()
    row = console.page.locator(f"tr[data-approval={ids['write_note']}]")
    assert row.locator(".status").inner_text() == "approved"
    assert row.locator("button").count() == 0, "a decided approval has no buttons"
    console.page.locator(f"tr[data-approval={ids['delete_note']}] button:has-text('Deny')").click()
    console.page.wait_for_load_state()
    assert console.page.locator(f"tr[data-approval={ids['delete_note']}] .status").inner_text() == "denied"

    # The API agrees: decided by the admin, for the user's calls.
    status, listed, _ = http("GET", f"{gateway.url}/api/admin/agents/approve-agent/approvals", token=gateway.admin)
    assert status == 200, listed
    assert {a["tool"]: a["status"] for a in listed} == {"write_note": "approved", "delete_note": "denied"}
    assert console.errors == []


def test_ending_a_sign_in_refuses_its_token(console, gateway):
    gateway.agent("end-agent")
    email, login = gateway.user()
    signed = gateway.sign_in(login, "end-agent", label="device-to-end")
    profile = f"{gateway.url}/v1/agents/end-agent/profile"
    assert http("GET", profile, token=signed["access_token"])[0] == 200

    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/sign-ins?user=" + urllib.parse.quote(email))
    row = console.page.locator("tr", has_text="device-to-end")
    row.locator("button:has-text('End')").click()
    console.page.wait_for_load_state()
    assert "Sign-in ended." in console.page.locator(".note").inner_text()
    status, body, _ = http("GET", profile, token=signed["access_token"])
    assert status == 401 and body["error"]["code"] == "sign_in_ended", body
    assert console.errors == []


def test_a_user_ends_their_own_sign_in(console, gateway):
    gateway.agent("own-agent")
    email, login = gateway.user()
    signed = gateway.sign_in(login, "own-agent", label="my-phone")
    console.sign_in(email, USER_PASSWORD)
    console.go("/console/sign-ins")
    console.page.locator("tr", has_text="my-phone").locator("button:has-text('End')").click()
    console.page.wait_for_load_state()
    status, body, _ = http("GET", f"{gateway.url}/v1/agents/own-agent/profile", token=signed["access_token"])
    assert status == 401 and body["error"]["code"] == "sign_in_ended", body


def test_a_non_admin_is_kept_out_of_admin_pages(console, gateway):
    email, _ = gateway.user()
    console.sign_in(email, USER_PASSWORD)
    assert console.page.url.endswith("/console/keys")
    assert console.page.locator("header nav a:has-text('Users')").count() == 0
    for path in ["/console/admin/users", "/console/admin/agents", "/console/admin/usage"]:
        resp = console.go(path)
        assert resp.status == 403, path
        assert "administrators only" in console.page.content()


def test_api_key_is_shown_once_and_can_be_deleted(console, gateway):
    email, _ = gateway.user()
    console.sign_in(email, USER_PASSWORD)
    console.page.fill("input[name=name]", "my backend")
    console.page.click("button:has-text('Create key')")
    console.page.wait_for_load_state()
    key = console.page.locator("#new-key").inner_text()
    assert key.startswith("gtk_")
    assert http("GET", f"{gateway.url}/v1/models", token=key)[0] == 200
    shot(console, "new-key")
    console.go("/console/keys")
    assert key not in console.page.content()
    console.page.locator("tr", has_text="my backend").locator("button:has-text('Delete')").click()
    console.page.wait_for_load_state()
    assert http("GET", f"{gateway.url}/v1/models", token=key)[0] == 401
    assert console.errors == []


def test_a_manifest_full_of_markup_runs_nothing(console, gateway):
    gateway.agent("evil-agent", tool_contract=["known"])
    _, login = gateway.user()
    signed = gateway.sign_in(login, "evil-agent", label=EVIL)
    access = signed["access_token"]
    status, body, _ = http(
        "PUT",
        f"{gateway.url}/v1/agents/evil-agent/manifest",
        {
            "app_name": EVIL,
            "app_version": EVIL,
            "sdk": EVIL,
            "greeting": EVIL,
            "context": [{"name": EVIL, "value": EVIL}],
            "tools": [
                {"name": "evil_tool", "description": EVIL, "parameters": {"type": "object", "description": EVIL}, "class": "write"}
            ],
        },
        access,
    )
    assert status == 200, body
    status, body, _ = http(
        "POST",
        f"{gateway.url}/v1/agents/evil-agent/events",
        {"events": [{"type": "<b>bold</b>", "conversation_id": "c1", "data": {"html": EVIL}}]},
        access,
    )
    assert status == 202, body

    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    for path in [
        "/console/admin/agents/evil-agent",
        "/console/admin/agents/evil-agent/events",
        "/console/admin/sign-ins",
    ]:
        console.go(path)
        assert console.page.evaluate("window.__pwned") is None, path
        assert "<script>window.__pwned" in console.page.locator("main").inner_text(), path
        assert console.page.locator("main script").count() == 0, path
    assert console.dialogs == []
    # The only failed load may be the device's <img src=x>, which is text, so none.
    assert console.errors == []


class _EvilSite(httpserver.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self):
        page = f"""<!doctype html><html><body>
<form id="f" method="post" action="{self.target}/console/admin/users">
<input name="email" value="eve@example.com"><input name="password" value="eve-password-1">
<input name="is_admin" value="true"><input name="csrf" value="guess"></form>
<script>document.getElementById('f').submit()</script></body></html>"""
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(page.encode())

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_a_cross_site_post_is_refused(console, gateway, host):
    """From another site (localhost), and from another origin of the same
    site (127.0.0.1 on another port), where SameSite=Lax still sends the
    cookie and only the origin check and the CSRF token stop the form."""
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    port = free_port()
    _EvilSite.target = gateway.url
    server = httpserver.HTTPServer(("127.0.0.1", port), _EvilSite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # Another origin (another port) whose page posts a form to the console
        # with the admin's cookie attached.
        with console.page.expect_response(lambda r: r.url.endswith("/console/admin/users")) as info:
            console.page.goto(f"http://{host}:{port}/")
        assert info.value.status == 403
    finally:
        server.shutdown()
    status, users, _ = http("GET", f"{gateway.url}/api/admin/users", token=gateway.admin)
    assert status == 200
    assert all(u["email"] != "eve@example.com" for u in users)


def test_a_key_limit_set_in_the_console_is_enforced_by_the_api(console, gateway):
    email, _ = gateway.user()
    console.sign_in(email, USER_PASSWORD)
    console.page.fill("input[name=name]", "limited backend")
    console.page.click("button:has-text('Create key')")
    console.page.wait_for_load_state()
    key = console.page.locator("#new-key").inner_text()
    console.go("/console/keys")
    console.page.locator("tr", has_text="limited backend").locator("a:has-text('limits and use')").click()
    console.page.wait_for_load_state()
    # A bad value: the API's own message, nothing saved.
    console.page.fill("input[name=requests_per_minute]", "0")
    console.page.click("button:has-text('Save limits')")
    console.page.wait_for_load_state()
    assert "'limits.requests_per_minute' must be a positive whole number" in console.page.locator(".error").inner_text()
    console.page.fill("input[name=requests_per_minute]", "1")
    console.page.click("button:has-text('Save limits')")
    console.page.wait_for_load_state()
    assert console.page.url.endswith("/console/keys?done=updated")
    assert "1 requests/min" in console.page.locator("tr", has_text="limited backend").inner_text()
    body = {"model": "console-chat", "messages": [{"role": "user", "content": "hi"}]}
    status, answer, _ = http("POST", f"{gateway.url}/v1/chat/completions", body, key)
    assert status == 200, answer
    status, answer, headers = http("POST", f"{gateway.url}/v1/chat/completions", body, key)
    assert status == 429 and answer["error"]["code"] == "rate_limited", answer
    assert int(headers["Retry-After"]) >= 1
    console.page.locator("a:has-text('limits and use')").first.click()
    console.page.wait_for_load_state()
    used = console.page.locator("tr[data-limit=requests_per_minute] td.used").inner_text()
    assert used.startswith("1 of 1"), used
    shot(console, "key-limits")
    assert console.errors == [], console.errors


def test_a_target_shows_resting_after_its_upstream_fails(console, gateway):
    admin = gateway.admin
    status, body, _ = http(
        "POST", f"{gateway.url}/api/admin/providers",
        {"name": "down", "type": "openai", "base_url": "http://127.0.0.1:9/v1", "timeout_s": 5}, admin,
    )
    assert status == 201, body
    status, body, _ = http(
        "POST", f"{gateway.url}/api/admin/models",
        {"id": "flaky", "kind": "chat", "targets": [{"provider": "down", "upstream_model": "m"}], "max_attempts": 1},
        admin,
    )
    assert status == 201, body
    status, body, _ = http("POST", f"{gateway.url}/api/api-keys", {"name": "flaky"}, admin)
    key = body["key"]
    for _ in range(3):
        status, _, _ = http("POST", f"{gateway.url}/v1/chat/completions",
                            {"model": "flaky", "messages": [{"role": "user", "content": "hi"}]}, key)
        assert status >= 500
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/models")
    state = console.page.locator("section[data-model=flaky] .state").inner_text()
    assert state.startswith("resting until "), state
    assert "down" in console.page.locator("tr[data-provider=down]").inner_text()
    # Give it a second target and a fallback, in the console.
    console.page.click("section[data-model=flaky] h3 a")
    console.page.wait_for_load_state()
    console.page.select_option("select[name=provider_1]", "stub")
    console.page.fill("input[name=upstream_model_1]", "up-chat")
    console.page.fill("input[name=fallbacks]", "console-chat")
    console.page.click("button:has-text('Save model')")
    console.page.wait_for_load_state()
    assert "Saved." in console.page.locator(".note").inner_text()
    states = console.page.locator("table.targets .state").all_inner_texts()
    assert len(states) == 2 and states[0].startswith("resting until") and states[1] == "healthy", states
    status, model, _ = http("GET", f"{gateway.url}/api/admin/models/flaky", token=admin)
    assert model["fallbacks"] == ["console-chat"] and len(model["targets"]) == 2, model
    shot(console, "model")
    assert console.errors == [], console.errors


class _Issuer(httpserver.BaseHTTPRequestHandler):
    """A minimal OpenID Connect issuer: discovery document and key set."""

    issuer = ""
    N = (
        "wwECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZ"
        "WltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn-AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq-wsbKz"
        "tLW2t7i5uru8vb6_wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t_g4eLj5OXm5-jp6uvs7e7v8PHy8_T19vf4-fr7_P3-_w"
    )

    def do_GET(self):
        import json

        if self.path == "/.well-known/openid-configuration":
            body = {
                "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/auth",
                "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        elif self.path == "/jwks":
            body = {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "e": "AQAB", "n": self.N}]}
        else:
            self.send_response(404)
            self.end_headers()
            return
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


def test_sso_providers_are_added_and_deleted_in_the_console(console, gateway):
    port = free_port()
    _Issuer.issuer = f"http://127.0.0.1:{port}"
    server = httpserver.HTTPServer(("127.0.0.1", port), _Issuer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
        console.go("/console/admin/sso")
        console.page.fill("input[name=name]", "corp")
        console.page.fill("input[name=display_name]", "Corp SSO")
        console.page.fill("input[name=issuer]", _Issuer.issuer)
        console.page.fill("input[name=client_id]", "gatehouse")
        console.page.fill("input[name=client_secret]", "a-client-secret")
        console.page.fill("input[name=allowed_domains]", "example.com")
        console.page.click("button:has-text('Add provider')")
        console.page.wait_for_load_state()
        row = console.page.locator("tr[data-sso=corp]")
        assert f"{gateway.url}/api/auth/sso/corp/callback" in row.inner_text()
        assert "a-client-secret" not in console.page.content()
        shot(console, "sso")
        # A label full of markup is shown as text, here and on the sign-in page.
        status, body, _ = http("PATCH", f"{gateway.url}/api/admin/sso/corp", {"display_name": "Corp " + EVIL}, gateway.admin)
        assert status == 200, body
        console.go("/console/admin/sso")
        assert "Corp <script>" in row.inner_text()
        assert console.page.evaluate("window.__pwned") is None
        # The sign-in page offers it (as text).
        ctx = console.page.context.browser.new_context()
        other = ctx.new_page()
        other.goto(gateway.url + "/console/login")
        assert "Corp <script>" in other.locator("section.sso a").inner_text()
        assert other.evaluate("window.__pwned") is None
        ctx.close()
        row.locator("button:has-text('Delete')").click()
        console.page.wait_for_load_state()
        assert console.page.locator("tr[data-sso=corp]").count() == 0
        status, providers, _ = http("GET", f"{gateway.url}/api/admin/sso", token=gateway.admin)
        assert providers == []
        assert console.dialogs == [] and console.errors == [], console.errors
    finally:
        server.shutdown()


def test_no_browser_console_errors_on_any_page(console, gateway):
    gateway.agent("tour-agent", tool_contract=["known"])
    _, login = gateway.user()
    signed = gateway.sign_in(login, "tour-agent", label="tour laptop")
    access = signed["access_token"]
    http(
        "PUT",
        f"{gateway.url}/v1/agents/tour-agent/manifest",
        {"app_name": "a", "app_version": "1", "sdk": "s", "tools": [
            {"name": "search", "description": "Search the docs", "parameters": {"type": "object"}, "class": "read"},
            {"name": "send_mail", "description": "Send an e-mail", "parameters": {"type": "object"}, "class": "write"},
        ]},
        access,
    )
    http("POST", f"{gateway.url}/v1/agents/tour-agent/events",
         {"events": [{"type": "app.started", "data": {"n": i}} for i in range(60)]}, access)
    for _ in range(3):
        chat(gateway, "tour-agent", access, ["known", "search"])

    status, users, _ = http("GET", f"{gateway.url}/api/admin/users", token=gateway.admin)
    user_id = users[0]["id"]
    console.go("/console/login")
    shot(console, "sign-in")
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    pages = {
        "/console/": "overview",
        "/console/admin/users": "users",
        "/console/admin/models": "models",
        "/console/admin/agents": "agents",
        "/console/admin/agents/tour-agent": None,
        "/console/admin/agents/tour-agent/events": "events",
        "/console/admin/sign-ins": "sign-ins",
        "/console/admin/usage?group_by=agent": "usage",
        "/console/admin/sso": None,
        "/console/admin/prices": "prices",
        "/console/admin/mcp": "mcp-servers",
        "/console/admin/models/console-chat": None,
        "/console/admin/agents/tour-agent/limits": "agent-limits",
        f"/console/admin/users/{user_id}/limits": None,
        "/console/keys": "keys",
        "/console/sign-ins": None,
    }
    for path, name in pages.items():
        resp = console.go(path)
        assert resp.status == 200, path
        assert len(resp.body()) < 100 * 1024, path
        # Compiles every input's pattern: a bad one logs a console error.
        console.page.evaluate("document.querySelectorAll('input[pattern]').forEach(i => { i.value = 'a'; i.checkValidity() })")
        if name:
            # Long lists: the first screenful is enough.
            shot(console, name, full_page=name not in ("events", "sign-ins"))
    # Paging: the events page links to the next page, and it loads.
    console.go("/console/admin/agents/tour-agent/events")
    console.page.click("a:has-text('Next page')")
    console.page.wait_for_load_state()
    assert console.page.locator("#events tbody tr").count() == 10
    assert console.errors == [], console.errors


def test_mcp_servers_are_managed_in_the_console_without_showing_header_values(console, gateway):
    secret = "Bearer mcp-up-secret-77"
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/mcp")
    console.page.fill("input[name=name]", "alpha")
    console.page.fill("input[name=url]", "http://127.0.0.1:9/mcp")
    console.page.fill("input[name=timeout_s]", "30")
    console.page.fill("input[name=tools]", "get_*, add")
    console.page.fill("textarea[name=tool_classes]", "write_note = write")
    console.page.fill("textarea[name=headers]", f"Authorization: {secret}")
    console.page.click("button:has-text('Add server')")
    console.page.wait_for_load_state()
    assert console.page.url.endswith("/console/admin/mcp?done=created")
    row = console.page.locator("tr[data-mcp-server=alpha]")
    text = row.inner_text()
    assert "http://127.0.0.1:9/mcp" in text and "30 s" in text and "get_*, add" in text, text
    assert "Authorization" in row.locator("td.header-names").inner_text()
    assert "mcp-up-secret" not in console.page.content()
    status, servers, _ = http("GET", f"{gateway.url}/api/admin/mcp-servers", token=gateway.admin)
    assert status == 200 and servers[0]["header_names"] == ["Authorization"], servers
    assert servers[0]["tool_classes"] == {"write_note": "write"}
    shot(console, "mcp-servers")

    # The API's rules and messages: a name taken, a timeout out of range.
    console.page.fill("input[name=name]", "alpha")
    console.page.fill("input[name=url]", "http://127.0.0.1:9/mcp")
    console.page.click("button:has-text('Add server')")
    console.page.wait_for_load_state()
    assert "already exists" in console.page.content()
    console.go("/console/admin/mcp/alpha")
    assert "mcp-up-secret" not in console.page.content()
    console.page.fill("input[name=timeout_s]", "3601")
    console.page.click("button:has-text('Save server')")
    console.page.wait_for_load_state()
    assert "'timeout_s' must be a whole number of seconds from 1 to 3600" in console.page.content()
    # The two refusals above are error pages (409, 400): Chromium logs their status.
    console.errors.clear()
    console.go("/console/admin/mcp/alpha")
    console.page.fill("input[name=timeout_s]", "3600")
    console.page.click("button:has-text('Save server')")
    console.page.wait_for_load_state()
    assert console.page.url.endswith("/console/admin/mcp/alpha?done=updated")
    status, server, _ = http("GET", f"{gateway.url}/api/admin/mcp-servers/alpha", token=gateway.admin)
    assert server["timeout_s"] == 3600 and server["header_names"] == ["Authorization"], server

    # A key's MCP access, set by its owner: an unknown server is refused with the API's message.
    email, token = gateway.user()
    console.page.context.clear_cookies()
    console.sign_in(email, USER_PASSWORD)
    console.go("/console/keys")
    console.page.fill("input[name=name]", "mcp backend")
    console.page.click("button:has-text('Create key')")
    console.page.wait_for_load_state()
    console.go("/console/keys")
    console.page.locator("tr", has_text="mcp backend").locator("a:has-text('MCP access')").click()
    console.page.wait_for_load_state()
    console.page.check("input[name=access][value=granted]")
    console.page.fill("input[name=servers]", "nowhere")
    console.page.click("button:has-text('Save MCP access')")
    console.page.wait_for_load_state()
    assert "There is no MCP server 'nowhere'" in console.page.locator(".error").inner_text()
    console.page.check("input[name=access][value=granted]")
    console.page.fill("input[name=servers]", "alpha")
    console.page.fill("textarea[name=tools]", "alpha: get_*")
    console.page.click("button:has-text('Save MCP access')")
    console.page.wait_for_load_state()
    assert console.page.url.endswith("/console/keys?done=updated")
    status, keys, _ = http("GET", f"{gateway.url}/api/api-keys", token=token)
    key = [k for k in keys if k["name"] == "mcp backend"][0]
    assert key["mcp"] == {"servers": ["alpha"], "tools": {"alpha": ["get_*"]}}, key

    # Back as the admin: the user's MCP access, then the server is deleted.
    console.page.context.clear_cookies()
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    status, users, _ = http("GET", f"{gateway.url}/api/admin/users", token=gateway.admin)
    uid = [u for u in users if u["email"] == email][0]["id"]
    console.go(f"/console/admin/users/{uid}/mcp")
    console.page.check("input[name=access][value=granted]")
    console.page.fill("input[name=servers]", "*")
    console.page.click("button:has-text('Save MCP access')")
    console.page.wait_for_load_state()
    status, users, _ = http("GET", f"{gateway.url}/api/admin/users", token=gateway.admin)
    assert [u for u in users if u["id"] == uid][0]["mcp"] == {"servers": ["*"]}
    # The call audit: its filters and an empty first page.
    console.go("/console/admin/mcp?decision=denied&from_day=2026-01-01&to_day=2026-01-02")
    assert console.page.locator("select[name=decision]").input_value() == "denied"
    assert "No calls." in console.page.content()
    console.go("/console/admin/mcp")
    console.page.locator("tr[data-mcp-server=alpha]").locator("button:has-text('Delete')").click()
    console.page.wait_for_load_state()
    assert console.page.locator("tr[data-mcp-server=alpha]").count() == 0
    status, servers, _ = http("GET", f"{gateway.url}/api/admin/mcp-servers", token=gateway.admin)
    assert servers == []
    assert console.errors == [], console.errors
