"""Agent chat with the official openai Python SDK: the app signs in over HTTP,
then points the SDK at /v1/agents/<address> with its access token. Without
the AG-UI header the stream is plain OpenAI SSE the SDK reads as usual."""

import openai
import pytest

from conftest import ADMIN_EMAIL, ADMIN_PASSWORD, http, served

AGENT = "py-helper"
UPSTREAM = "py-up-agent"


@pytest.fixture(scope="module")
def agent_client(gateway):
    """An agent on the stub, a signed-in device, and an SDK client for it."""
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/models",
        {"id": "py-agent-chat", "kind": "chat", "provider": "stub-openai", "upstream_model": UPSTREAM},
        gateway.admin,
    )
    assert status == 201, body
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/agents",
        {"address": AGENT, "name": "Python helper", "model": "py-agent-chat", "default_tool_mode": "auto"},
        gateway.admin,
    )
    assert status == 201, body
    status, body = http(
        "POST",
        f"{gateway.url}/api/auth/jwt/login",
        form={"username": ADMIN_EMAIL, "password": ADMIN_PASSWORD},
    )
    assert status == 200, body
    status, body = http(
        "POST",
        f"{gateway.url}/api/agent-tokens",
        {"agent": AGENT, "device_label": "pytest"},
        body["access_token"],
    )
    assert status == 201, body
    assert body["refresh_token"].startswith("gtr_")
    return openai.OpenAI(
        base_url=f"{gateway.url}/v1/agents/{AGENT}",
        api_key=body["access_token"],
        max_retries=0,
        timeout=30,
    )


def test_agent_stream_assembles_to_the_echo(agent_client, stub):
    stream = agent_client.chat.completions.create(
        model="anything",
        messages=[{"role": "user", "content": "hello agent, stream in pieces"}],
        stream=True,
        extra_headers={"X-Service-Conversation-Id": "py-conv-1"},
    )
    chunks = list(stream)
    assert len(chunks) > 3
    assert all(c.model == "py-agent-chat" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: hello agent, stream in pieces"
    assert chunks[-1].choices[0].finish_reason == "stop"
    sent = stub.requests(UPSTREAM)[-1]
    assert sent["body"]["model"] == UPSTREAM
    assert sent["body"]["stream"] is True


def test_agent_plain_answer(agent_client):
    resp = agent_client.chat.completions.create(
        model="ignored",
        messages=[{"role": "user", "content": "hello agent"}],
    )
    assert resp.model == "py-agent-chat"
    assert resp.choices[0].message.content == "echo: hello agent"
    assert resp.choices[0].finish_reason == "stop"


def test_agent_stream_with_approvals_chunk_reads_as_an_extra_field(agent_client, stub):
    stub.script(
        UPSTREAM,
        {"tool_calls": [{"id": "call_1", "name": "delete_file", "arguments": '{"path":"/tmp/x"}'}]},
    )
    try:
        chunks = list(
            agent_client.chat.completions.create(
                model="x",
                messages=[{"role": "user", "content": "delete it"}],
                stream=True,
                extra_headers={"X-Service-Tool-Mode": "ask"},
            )
        )
    finally:
        stub.script(UPSTREAM, None)
    extra = chunks[-1]
    assert extra.choices == []
    approvals = extra.model_extra["approvals"]
    assert [a["tool_call_id"] for a in approvals] == ["call_1"]
    assert approvals[0]["status"] == "pending"
    args = "".join(
        tc.function.arguments or ""
        for c in chunks
        if c.choices
        for tc in (c.choices[0].delta.tool_calls or [])
    )
    assert args == '{"path":"/tmp/x"}'


def test_agent_refuses_a_bad_header_with_the_openai_error_shape(agent_client):
    with pytest.raises(openai.BadRequestError) as e:
        agent_client.chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Service-Tool-Mode": "sometimes"},
        )
    assert e.value.code == "invalid_header"


APPROVER = "py-approver"
APPROVER_UPSTREAM = "py-up-approver"
WRITE_TOOL = [{"type": "function", "function": {"name": "write_file", "description": "Writes a file",
                                                "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def approving_client(gateway, stub):
    """An agent in ask mode whose upstream calls write_file, and an SDK
    client for it with the SDK's own retries on (two, its default)."""
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/models",
        {"id": "py-approver-chat", "kind": "chat", "provider": "stub-openai", "upstream_model": APPROVER_UPSTREAM},
        gateway.admin,
    )
    assert status == 201, body
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/agents",
        {"address": APPROVER, "name": "Asks first", "model": "py-approver-chat", "default_tool_mode": "ask"},
        gateway.admin,
    )
    assert status == 201, body
    status, body = http(
        "POST", f"{gateway.url}/api/auth/jwt/login", form={"username": ADMIN_EMAIL, "password": ADMIN_PASSWORD}
    )
    assert status == 200, body
    status, body = http(
        "POST", f"{gateway.url}/api/agent-tokens", {"agent": APPROVER, "device_label": "pytest"}, body["access_token"]
    )
    assert status == 201, body
    access = body["access_token"]
    manifest = {"app_name": "app", "app_version": "1.0", "sdk": "py", "tools": [
        {"name": "write_file", "description": "Writes a file", "class": "write", "parameters": {"type": "object"}}]}
    status, body = http("PUT", f"{gateway.url}/v1/agents/{APPROVER}/manifest", manifest, access)
    assert status == 200, body
    stub.script(APPROVER_UPSTREAM, {"tool_calls": [{"id": "call_w", "name": "write_file", "arguments": "{}"}]})
    return openai.OpenAI(base_url=f"{gateway.url}/v1/agents/{APPROVER}", api_key=access, max_retries=2, timeout=30)


def test_the_sdk_does_not_retry_a_result_waiting_for_approval(approving_client, gateway):
    asked = [{"role": "user", "content": "write it"}]
    first = approving_client.chat.completions.create(model="x", messages=asked, tools=WRITE_TOOL)
    assert first.choices[0].message.tool_calls[0].id == "call_w"
    assert first.model_extra["approvals"][0]["status"] == "pending"
    answered = asked + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_w", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_w", "content": "written"},
    ]
    route = "/v1/agents/{agent}/chat/completions"
    before = served(gateway, route, 409)
    with pytest.raises(openai.ConflictError) as e:
        approving_client.chat.completions.create(model="x", messages=answered, tools=WRITE_TOOL)
    assert e.value.code == "approval_pending"
    # One request reached the server: the SDK did not try again.
    assert served(gateway, route, 409) == before + 1
    assert e.value.response.headers.get("x-should-retry") == "false"
