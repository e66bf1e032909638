"""Fixtures for the console's browser tests.

Starts the stub upstream and a real `gatehouse serve` (fresh SQLite database),
sets up a provider, a chat model and an agent through the HTTP API, and opens
Debian's Chromium (/usr/bin/chromium, or $CHROMIUM) through Playwright. No
browser is downloaded: Playwright drives the system's Chromium.
The binaries come from `$CARGO_TARGET_DIR/debug` (default `target/debug`).
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "console-admin-password-1"
USER_PASSWORD = "console-user-password-1"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def binary(name: str) -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not target.is_absolute():
        target = ROOT / target
    path = target / "debug" / name
    if not path.exists():
        pytest.fail(
            f"{path} is missing: run `cargo build -p gatehouse -p gatehouse-stub-upstream --bins` first"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, token=None, form=None, headers=None):
    """A small JSON HTTP client for setup: returns (status, parsed body, headers)."""
    headers = dict(headers or {})
    data = None
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None, r.headers
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return e.code, parsed, e.headers


class Gateway:
    def __init__(self, url: str, admin: str):
        self.url = url
        self.admin = admin
        self._n = 0

    def user(self, prefix="user"):
        """A new user: (e-mail, login token)."""
        self._n += 1
        email = f"{prefix}{self._n}-{int(time.time() * 1000)}@example.com"
        status, body, _ = http(
            "POST", f"{self.url}/api/admin/users", {"email": email, "password": USER_PASSWORD}, self.admin
        )
        assert status == 201, body
        status, body, _ = http(
            "POST", f"{self.url}/api/auth/jwt/login", form={"username": email, "password": USER_PASSWORD}
        )
        assert status == 200, body
        return email, body["access_token"]

    def agent(self, address, tool_contract=()):
        status, body, _ = http(
            "POST",
            f"{self.url}/api/admin/agents",
            {"address": address, "name": f"Agent {address}", "model": "console-chat", "tool_contract": list(tool_contract)},
            self.admin,
        )
        assert status == 201, body

    def sign_in(self, login, agent, label="laptop"):
        status, body, _ = http(
            "POST", f"{self.url}/api/agent-tokens", {"agent": agent, "device_label": label}, login
        )
        assert status == 201, body
        return body


@pytest.fixture(scope="session")
def stub():
    proc = subprocess.Popen(
        [str(binary("stub-upstream")), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        assert m, f"stub-upstream said {line!r}"
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def running_gateway(tmp):
    """A `gatehouse serve` on a free port with a fresh SQLite database in
    `tmp` and the administrator only; yields (url, admin login token)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update(
        GATEHOUSE_LISTEN=f"127.0.0.1:{port}",
        GATEHOUSE_DATABASE_URL=f"sqlite://{tmp / 'g.db'}",
        GATEHOUSE_ADMIN_EMAIL=ADMIN_EMAIL,
        GATEHOUSE_ADMIN_PASSWORD=ADMIN_PASSWORD,
        GATEHOUSE_LOG="warn",
    )
    log = open(tmp / "gatehouse.log", "w")
    proc = subprocess.Popen([str(binary("gatehouse")), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"gatehouse exited; see {tmp / 'gatehouse.log'}"
            try:
                if http("GET", f"{url}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "gatehouse did not come up"
            time.sleep(0.1)
        status, body, _ = http(
            "POST", f"{url}/api/auth/jwt/login", form={"username": ADMIN_EMAIL, "password": ADMIN_PASSWORD}
        )
        assert status == 200, body
        yield url, body["access_token"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="session")
def gateway(stub, tmp_path_factory):
    with running_gateway(tmp_path_factory.mktemp("gatehouse")) as (url, admin):
        status, body, _ = http(
            "POST",
            f"{url}/api/admin/providers",
            {"name": "stub", "type": "openai", "base_url": f"{stub}/v1", "timeout_s": 10},
            admin,
        )
        assert status == 201, body
        status, body, _ = http(
            "POST",
            f"{url}/api/admin/models",
            {"id": "console-chat", "kind": "chat", "provider": "stub", "upstream_model": "up-chat"},
            admin,
        )
        assert status == 201, body
        yield Gateway(url, admin)


@pytest.fixture
def fresh_gateway(tmp_path_factory):
    """A gateway as a fresh install leaves it: no provider, model or key."""
    with running_gateway(tmp_path_factory.mktemp("fresh")) as (url, admin):
        yield Gateway(url, admin)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class Console:
    """A browser page that records console errors and page errors."""

    def __init__(self, page, url):
        self.page = page
        self.url = url
        self.errors = []
        self.dialogs = []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

        def on_dialog(d):
            self.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", on_dialog)

    def go(self, path):
        resp = self.page.goto(self.url + path)
        return resp

    def sign_in(self, email, password):
        self.go("/console/login")
        self.page.fill("input[name=username]", email)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state()


def open_console(browser, gateway):
    ctx = browser.new_context()
    page = ctx.new_page()
    return ctx, Console(page, gateway.url)


@pytest.fixture
def console(browser, gateway):
    ctx, c = open_console(browser, gateway)
    yield c
    ctx.close()


@pytest.fixture
def fresh_console(browser, fresh_gateway):
    """The console of a fresh install, in a browser of its own."""
    ctx, c = open_console(browser, fresh_gateway)
    yield c
    ctx.close()
