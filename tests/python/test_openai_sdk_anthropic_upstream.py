"""The official openai Python SDK through the gateway to an Anthropic-shaped
upstream (the stub's `/v1/messages`): chat plain, streamed, and a tool call,
translated to Messages and back."""

import json

import pytest

from conftest import http


@pytest.fixture(scope="module")
def claude(gateway, stub):
    """A chat model `py-claude` (alias `claude-py-*`) on an anthropic provider."""
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/providers",
        {"name": "stub-anthropic", "type": "anthropic", "base_url": stub.url,
         "api_key": "sk-ant-py", "timeout_s": 10},
        gateway.admin,
    )
    assert status in (201, 409), body
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/models",
        {"id": "py-claude", "kind": "chat", "provider": "stub-anthropic",
         "upstream_model": "py-up-claude", "aliases": ["claude-py-*"]},
        gateway.admin,
    )
    assert status in (201, 409), body
    return "py-claude"


def test_plain_chat_reaches_the_messages_upstream_and_reads_as_chat(client, stub, claude):
    stub.script("py-up-claude", None)
    resp = client.chat.completions.create(
        model="claude-py-sonnet",
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "hello claude"}],
        max_tokens=64,
    )
    assert resp.model == "claude-py-sonnet", "the answer names what the client sent"
    assert resp.choices[0].message.content == "echo: hello claude"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 10
    sent = stub.requests("py-up-claude")[-1]
    assert sent["path"] == "/v1/messages"
    assert sent["body"]["system"] == "be brief"
    assert sent["body"]["max_tokens"] == 64
    assert sent["headers"]["x-api-key"] == "sk-ant-py"
    assert "authorization" not in sent["headers"]


def test_streamed_chat_assembles_and_reports_usage(client, stub, claude):
    stub.script("py-up-claude", {"content": "streamed through Messages", "usage": [6, 4],
                                 "cache_tokens": [2, 1]})
    chunks = list(client.chat.completions.create(
        model="py-claude",
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed through Messages"
    assert all(c.model == "py-claude" for c in chunks)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == 9, "input + cache read + cache creation"
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 2
    assert chunks[-1].usage.completion_tokens == 4


def test_a_tool_call_round_trip(client, stub, claude):
    stub.script("py-up-claude", {"tool_calls": [
        {"id": "toolu_py1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}]})
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "weather in Oslo?"}]
    resp = client.chat.completions.create(model="py-claude", messages=messages, tools=tools)
    call = resp.choices[0].message.tool_calls[0]
    assert resp.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "toolu_py1", "get_weather", {"city": "Oslo"})

    # Streamed, the SDK's chunks carry the same call.
    chunks = list(client.chat.completions.create(
        model="py-claude", messages=messages, tools=tools, stream=True))
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert pieces[0].id == "toolu_py1" and pieces[0].function.name == "get_weather"
    assert json.loads("".join(p.function.arguments or "" for p in pieces)) == {"city": "Oslo"}

    # The answer goes back as a tool result, first in the next user turn.
    stub.script("py-up-claude", {"content": "It rains."})
    resp = client.chat.completions.create(model="py-claude", tools=tools, messages=messages + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "rain"},
    ])
    assert resp.choices[0].message.content == "It rains."
    sent = stub.requests("py-up-claude")[-1]["body"]["messages"]
    assert sent[1]["content"][0] == {"type": "tool_use", "id": "toolu_py1",
                                     "name": "get_weather", "input": {"city": "Oslo"}}
    assert sent[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_py1", "content": "rain"}]}
