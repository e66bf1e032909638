"""Helpers for the client tests that drive real agent CLIs and the `anthropic`
SDK through Gatehouse to the stub upstream (test_claude_code.py,
test_codex_cli.py, test_anthropic_sdk.py).

The CLIs come from tests/agent-clis (`npm ci` there; scripts/test.sh does it).
Each run gets an empty environment but for PATH, a temporary HOME and the
variables docs/agent-clis.md names, so nothing of the developer's own set-up
(keys, config, proxies) leaks in, and nothing but loopback is needed.
"""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, http

BIN = ROOT / "tests" / "agent-clis" / "node_modules" / ".bin"

# Long enough for a cold start of either CLI on a loaded CI machine.
CLI_TIMEOUT_S = 180

# The command the scripted model asks the CLI to run. Its output
# (gatehouse-42) is not in the command's text, so finding it in the next
# upstream request proves the CLI really ran it and sent the result back.
SHELL_COMMAND = "echo gatehouse-$((40+2))"
SHELL_OUTPUT = "gatehouse-42"


def cli(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `npm ci` in tests/agent-clis (scripts/test.sh does)")
    return path


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_model(gateway, provider: str = "stub-openai", prefix: str = "cli", **extra) -> tuple[str, str]:
    """Creates a chat model on `provider` with an upstream model name of its
    own (stub scripts are per upstream model, so tests never share one).
    Returns (Gatehouse model id, upstream model)."""
    model_id = unique(prefix)
    upstream = f"{model_id}-up"
    body = {"id": model_id, "kind": "chat", "provider": provider, "upstream_model": upstream, **extra}
    status, answer = http("POST", f"{gateway.url}/api/admin/models", body, gateway.admin)
    assert status == 201, answer
    return model_id, upstream


def new_key(gateway, **extra) -> str:
    status, body = http("POST", f"{gateway.url}/api/api-keys", {"name": unique("cli-key"), **extra}, gateway.admin)
    assert status == 201, body
    return body["key"]


def new_agent(gateway, model: str, **extra) -> tuple[str, str]:
    """An agent on `model` and a signed-in device of the admin: returns
    (agent address, access token)."""
    address = unique("cli-agent")
    body = {"address": address, "name": address, "model": model, "default_tool_mode": "auto", **extra}
    status, answer = http("POST", f"{gateway.url}/api/admin/agents", body, gateway.admin)
    assert status == 201, answer
    status, answer = http(
        "POST", f"{gateway.url}/api/agent-tokens", {"agent": address, "device_label": "agent-cli-test"}, gateway.admin
    )
    assert status == 201, answer
    return address, answer["access_token"]


def agent_tools(gateway, address: str) -> dict:
    """The agent's tool list as the admin sees it: name -> status."""
    status, body = http("GET", f"{gateway.url}/api/admin/agents/{address}/tools", token=gateway.admin)
    assert status == 200, body
    return {t["name"]: t["status"] for t in body}


def base_env(home: Path) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


def claude_env(home: Path, gateway_url: str, key: str, credential: str = "ANTHROPIC_API_KEY") -> dict:
    """What Claude Code needs to go through Gatehouse (docs/agent-clis.md)."""
    env = base_env(home)
    env.update(
        {
            "ANTHROPIC_BASE_URL": gateway_url,
            credential: key,
            # No telemetry, error reports, update checks or model list: only
            # the Messages calls, so it runs with nothing but loopback.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # Tests only: Claude Code retries even a 401 for minutes; a failure
            # must show at once, not be retried away.
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
    )
    return env


def claude_cmd(model: str, prompt: str, *extra: str) -> list[str]:
    return [str(cli("claude")), "-p", prompt, "--model", model, "--output-format", "json", *extra]


def codex_home(home: Path, base_url: str, model: str, key_var: str = "GATEHOUSE_API_KEY", extra_toml: str = "") -> Path:
    """A CODEX_HOME whose config.toml routes Codex through Gatehouse
    (docs/agent-clis.md), plus the tests' own settings: no retries, so a
    broken stream fails the test instead of being retried away."""
    codex = home / "codex"
    codex.mkdir(parents=True, exist_ok=True)
    (codex / "config.toml").write_text(
        f"""model = "{model}"
model_provider = "gatehouse"

[model_providers.gatehouse]
name = "Gatehouse"
base_url = "{base_url}"
env_key = "{key_var}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
{extra_toml}"""
    )
    return codex


def codex_env(home: Path, base_url: str, model: str, key: str, extra_toml: str = "") -> dict:
    env = base_env(home)
    env["CODEX_HOME"] = str(codex_home(home, base_url, model, extra_toml=extra_toml))
    env["GATEHOUSE_API_KEY"] = key
    return env


def codex_cmd(prompt: str, last_message: Path, *extra: str) -> list[str]:
    # danger-full-access: the tests run in a throwaway directory, and a
    # container may not allow the bubblewrap sandbox.
    return [
        str(cli("codex")),
        "exec",
        "--skip-git-repo-check",
        "--sandbox",
        "danger-full-access",
        "--color",
        "never",
        "--output-last-message",
        str(last_message),
        *extra,
        prompt,
    ]


def run(cmd: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )


def run_two_turns(stub, upstream: str, first: dict, then: dict, cmd: list[str], env: dict, cwd: Path):
    """Runs `cmd` while the stub answers its first request for `upstream`
    with `first` and every later one with `then`.

    The stub's scripts are fixed per model, so the test swaps them: `first`
    is held back for a while (`delay_ms`; the stub reads a request's script
    when the request arrives), the test sees the request recorded and sets
    `then` meanwhile, so the CLI's next request gets `then` whatever its
    timing."""
    stub.script(upstream, dict(first, delay_ms=2000))
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not stub.requests(upstream):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        stub.script(upstream, then)
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def result_json(done: subprocess.CompletedProcess) -> dict:
    """Claude Code's `--output-format json` result object."""
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    assert lines, f"no JSON result; exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return json.loads(lines[-1])


def tool_messages(chat_request: dict) -> list[dict]:
    return [m for m in chat_request["body"]["messages"] if m.get("role") == "tool"]


def text_of(content) -> str:
    """A chat message's content as text (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def usage_of(gateway, model: str) -> dict:
    """The gateway's usage totals for one model (`GET /api/admin/usage`)."""
    status, body = http("GET", f"{gateway.url}/api/admin/usage?group_by=model", token=gateway.admin)
    assert status == 200, body
    rows = [r for r in body if r["key"] == model]
    return rows[0] if rows else {"requests": 0, "errors": 0, "prompt_tokens": 0, "completion_tokens": 0}


def wait_usage(gateway, model: str, requests: int) -> dict:
    """The usage totals once `requests` are recorded (records are written
    when an answer ends, just after the client has it)."""
    deadline = time.monotonic() + 10
    while True:
        usage = usage_of(gateway, model)
        if usage["requests"] >= requests or time.monotonic() > deadline:
            return usage
        time.sleep(0.05)
