"""Fixtures for the client tests with the official openai Python SDK.

Starts the stub upstream (`stub-upstream --listen 127.0.0.1:0`) and the
gateway (`gatehouse serve` on a free port with a fresh SQLite database),
then sets up providers, models and an API key through the gateway's HTTP API.
The binaries come from `$CARGO_TARGET_DIR/debug` (default `target/debug`);
build them first with `cargo build -p gatehouse -p gatehouse-stub-upstream --bins`.
"""

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
ADMIN_PASSWORD = "py-admin-password-1"


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


def http(method: str, url: str, body=None, token=None, form=None):
    """A small JSON HTTP client for setup: returns (status, parsed body)."""
    headers = {}
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
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


def served(gateway, route: str, status: int, method: str = "POST") -> int:
    """How many requests the gateway answered on `route` with `status`
    (its `gatehouse_http_requests_total` counter)."""
    with urllib.request.urlopen(f"{gateway.url}/metrics", timeout=30) as r:
        text = r.read().decode()
    line = f'gatehouse_http_requests_total{{method="{method}",route="{route}",status="{status}"}} '
    for l in text.splitlines():
        if l.startswith(line):
            return int(l[len(line):])
    return 0


class Stub:
    def __init__(self, url: str):
        self.url = url

    def script(self, model: str, script: dict | None) -> None:
        status, _ = http("POST", f"{self.url}/_stub/script", {"model": model, "script": script})
        assert status == 200

    def requests(self, model: str) -> list:
        q = urllib.parse.urlencode({"model": model})
        status, body = http("GET", f"{self.url}/_stub/requests?{q}")
        assert status == 200
        return body


class Gateway:
    def __init__(self, url: str, key: str, admin: str):
        self.url = url
        self.key = key
        self.admin = admin

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"


@pytest.fixture(scope="session")
def stub():
    proc = subprocess.Popen(
        [str(binary("stub-upstream")), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        assert m, f"stub-upstream said {line!r}"
        yield Stub(m.group(1))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def gateway(stub, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gatehouse")
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
    proc = subprocess.Popen(
        [str(binary("gatehouse")), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
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

        status, body = http(
            "POST",
            f"{url}/api/auth/jwt/login",
            form={"username": ADMIN_EMAIL, "password": ADMIN_PASSWORD},
        )
        assert status == 200, body
        admin = body["access_token"]
        for provider in [
            {"name": "stub-openai", "type": "openai", "base_url": f"{stub.url}/v1", "timeout_s": 10},
            {"name": "stub-tei", "type": "tei", "base_url": stub.url, "timeout_s": 10},
        ]:
            status, body = http("POST", f"{url}/api/admin/providers", provider, admin)
            assert status == 201, body
        for model in [
            {"id": "py-chat", "kind": "chat", "provider": "stub-openai", "upstream_model": "py-up-chat"},
            {"id": "py-emb", "kind": "embeddings", "provider": "stub-openai", "upstream_model": "py-up-emb"},
            {"id": "py-emb-tei", "kind": "embeddings", "provider": "stub-tei", "upstream_model": "bge"},
        ]:
            status, body = http("POST", f"{url}/api/admin/models", model, admin)
            assert status == 201, body
        status, body = http("POST", f"{url}/api/api-keys", {"name": "python-sdk"}, admin)
        assert status == 201, body
        yield Gateway(url, body["key"], admin)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def client(gateway):
    import openai

    return openai.OpenAI(base_url=gateway.v1, api_key=gateway.key, max_retries=0, timeout=30)
