"""The real Claude Code CLI (npm @anthropic-ai/claude-code, tests/agent-clis)
through Gatehouse (issue 31): `claude -p`, offline, with the environment of
docs/agent-clis.md.

Claude Code speaks only Anthropic Messages. To an `openai` provider Gatehouse
translates its requests to chat completions and the stub's chat answers back
to Messages streams; to an `anthropic` provider it passes them through. Either
way the CLI must answer a prompt and complete a Bash tool round trip."""

import json

import pytest

from agent_clis import (
    agent_tools,
    SHELL_COMMAND,
    SHELL_OUTPUT,
    claude_cmd,
    claude_env,
    new_agent,
    new_model,
    result_json,
    run,
    run_two_turns,
    text_of,
    tool_messages,
    unique,
    wait_usage,
)
from conftest import http

BASH_CALL = {
    "id": "call_cc_bash_1",
    "name": "Bash",
    "arguments": json.dumps({"command": SHELL_COMMAND, "description": "Print the marker"}),
}
FINAL_TEXT = "The command printed the marker."
# Gatehouse model ids the tests create start with a name Claude Code knows.
# For a name it does not know (say `qwen3-coder`) Claude Code 2.1.197 treats
# the model as a newer family and puts `role: "system"` messages into
# `messages`, which the contract refuses (400 validation_error).
CLAUDE_NAME = "claude-sonnet-4-5"


@pytest.mark.parametrize("credential", ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"])
def test_claude_code_answers_a_prompt_through_gatehouse(gateway, stub, tmp_path, credential):
    model, upstream = new_model(gateway, prefix=CLAUDE_NAME)
    stub.script(upstream, {"content": "Pong from the stub upstream."})

    done = run(
        claude_cmd(model, "Reply with pong."),
        claude_env(tmp_path / "home", gateway.url, gateway.key, credential),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["is_error"] is False, result
    assert result["result"] == "Pong from the stub upstream."
    # It reached the stub as a chat completion under the upstream name,
    # with Claude Code's own prompt translated.
    reqs = stub.requests(upstream)
    assert len(reqs) == 1
    assert reqs[0]["path"] == "/v1/chat/completions"
    body = reqs[0]["body"]
    assert body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    users = [m for m in body["messages"] if m["role"] == "user"]
    assert "Reply with pong." in text_of(users[-1]["content"])
    assert any(t["function"]["name"] == "Bash" for t in body["tools"])
    # Claude Code's credential and Anthropic headers stay at the gateway.
    assert gateway.key not in json.dumps(reqs[0]["headers"])
    assert not any(h.startswith("anthropic-") for h in reqs[0]["headers"])


def test_claude_code_runs_a_bash_tool_call_and_sends_its_output_back(gateway, stub, tmp_path):
    model, upstream = new_model(gateway, prefix=CLAUDE_NAME)

    # Text, then the call, in one streamed answer: a text block, then a tool_use block.
    done = run_two_turns(
        stub,
        upstream,
        {"content": "Running it now.", "tool_calls": [BASH_CALL]},
        {"content": FINAL_TEXT},
        claude_cmd(model, "Run the marker command.", "--allowedTools", "Bash"),
        claude_env(tmp_path / "home", gateway.url, gateway.key),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["is_error"] is False, result
    assert result["result"] == FINAL_TEXT
    assert result["num_turns"] == 2
    reqs = stub.requests(upstream)
    assert len(reqs) == 2, [r["body"]["messages"][-1] for r in reqs]
    second = reqs[1]["body"]["messages"]
    # The assistant's call went back as OpenAI tool_calls, under its id...
    assistant = [m for m in second if m["role"] == "assistant"]
    assert [text_of(m.get("content")) for m in assistant] == ["Running it now."]
    calls = [c for m in assistant for c in m.get("tool_calls") or []]
    assert [c["id"] for c in calls] == ["call_cc_bash_1"]
    assert json.loads(calls[0]["function"]["arguments"])["command"] == SHELL_COMMAND
    # ...and the tool_result Claude Code made from the command's real output
    # as a tool message answering it.
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_cc_bash_1"]
    assert SHELL_OUTPUT in text_of(tools[0]["content"])
    assert SHELL_OUTPUT not in json.dumps(reqs[0]["body"])
    # Both turns are the gateway's requests: counted, with the stub's token figures.
    usage = wait_usage(gateway, model, 2)
    assert (usage["requests"], usage["errors"], usage["prompt_tokens"]) == (2, 0, 20)


def test_claude_code_reports_a_wrong_key_as_an_authentication_failure(gateway, stub, tmp_path):
    model, upstream = new_model(gateway, prefix=CLAUDE_NAME)
    stub.script(upstream, {"content": "never sent"})

    done = run(
        claude_cmd(model, "Reply with pong."),
        claude_env(tmp_path / "home", gateway.url, "gh-not-a-key"),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode != 0
    assert result["is_error"] is True
    assert result["api_error_status"] == 401
    # Claude Code shows the message of Gatehouse's Anthropic-shaped error.
    assert "The API key is not valid." in result["result"]
    assert stub.requests(upstream) == []


def test_claude_code_reaches_a_model_by_its_claude_name_through_an_alias(gateway, stub, tmp_path):
    # Claude Code sends fixed claude-* names; an alias maps them to a model.
    alias = unique("claude-opus-4-1")
    model, upstream = new_model(gateway, prefix="cc-alias", aliases=[f"{alias}-*"])
    stub.script(upstream, {"content": "Answered by the aliased model."})

    done = run(
        claude_cmd(f"{alias}-20250805", "Reply with pong."),
        claude_env(tmp_path / "home", gateway.url, gateway.key),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["result"] == "Answered by the aliased model."
    assert len(stub.requests(upstream)) == 1
    # The CLI's own bookkeeping names the model it asked for.
    assert f"{alias}-20250805" in result["modelUsage"]


@pytest.fixture(scope="module")
def anthropic_provider(gateway, stub):
    """A provider of type `anthropic` on the stub, which speaks Messages at
    {base_url}/v1/messages: Claude Code's requests pass through."""
    name = unique("stub-anthropic")
    provider = {"name": name, "type": "anthropic", "base_url": stub.url, "api_key": "sk-ant-stub", "timeout_s": 10}
    status, body = http("POST", f"{gateway.url}/api/admin/providers", provider, gateway.admin)
    assert status == 201, body
    return name


def test_claude_code_answers_through_an_anthropic_provider(gateway, stub, tmp_path, anthropic_provider):
    model, upstream = new_model(gateway, provider=anthropic_provider, prefix=CLAUDE_NAME)
    stub.script(upstream, {"content": "Pong from the Messages stub."})

    done = run(
        claude_cmd(model, "Reply with pong."),
        claude_env(tmp_path / "home", gateway.url, gateway.key),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["result"] == "Pong from the Messages stub."
    reqs = stub.requests(upstream)
    assert len(reqs) == 1
    assert reqs[0]["path"] == "/v1/messages"
    # Passed through: Claude Code's own body, model replaced, provider's key.
    body = reqs[0]["body"]
    assert body["model"] == upstream
    assert body["stream"] is True
    assert body["max_tokens"] == 32000
    # Members a translation to chat would drop are kept.
    assert body["thinking"]["type"] == "enabled"
    assert "context_management" in body
    assert body["system"][-1].get("cache_control") or any(b.get("cache_control") for b in body["system"])
    assert any(t["name"] == "Bash" and "input_schema" in t for t in body["tools"])
    assert reqs[0]["headers"]["anthropic-version"] == "2023-06-01"
    assert reqs[0]["headers"]["x-api-key"] == "sk-ant-stub"
    assert "claude-code-20250219" in reqs[0]["headers"]["anthropic-beta"]
    assert gateway.key not in json.dumps(reqs[0]["headers"])


def test_claude_code_completes_a_bash_round_trip_through_an_anthropic_provider(
    gateway, stub, tmp_path, anthropic_provider
):
    model, upstream = new_model(gateway, provider=anthropic_provider, prefix=CLAUDE_NAME)

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [BASH_CALL]},
        {"content": FINAL_TEXT},
        claude_cmd(model, "Run the marker command.", "--allowedTools", "Bash"),
        claude_env(tmp_path / "home", gateway.url, gateway.key),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["result"] == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    last = reqs[1]["body"]["messages"][-1]
    results = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert len(results) == 1
    tool_use_ids = [
        b["id"]
        for m in reqs[1]["body"]["messages"]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    assert results[0]["tool_use_id"] in tool_use_ids
    assert SHELL_OUTPUT in json.dumps(results[0]["content"])


def test_claude_code_under_an_agent_offers_only_contract_tools_and_completes_a_round_trip(gateway, stub, tmp_path):
    # The agent route with its access token: the agent's model, instructions
    # and tool contract apply to Claude Code's requests.
    model, upstream = new_model(gateway, prefix=CLAUDE_NAME)
    address, token = new_agent(gateway, model, instructions="You are the gatehouse test agent.", tool_contract=["Bash"])

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [BASH_CALL]},
        {"content": FINAL_TEXT},
        claude_cmd("claude-sonnet-4-5", "Run the marker command.", "--allowedTools", "Bash"),
        claude_env(tmp_path / "home", f"{gateway.url}/v1/agents/{address}", token, "ANTHROPIC_AUTH_TOKEN"),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["result"] == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    first = reqs[0]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == ["Bash"]
    assert first["messages"][0]["role"] == "system"
    assert text_of(first["messages"][0]["content"]).startswith("You are the gatehouse test agent.")
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_cc_bash_1"]
    assert SHELL_OUTPUT in text_of(tools[0]["content"])
    # Claude Code's other tools were held, and the admin sees them so.
    listed = agent_tools(gateway, address)
    assert listed["Bash"] == "contract"
    assert listed["Read"] == "held"


def test_claude_code_under_an_agent_in_ask_mode_waits_for_the_approval_of_its_bash_call(gateway, stub, tmp_path):
    # Mode ask: the Bash call gets an approval. Claude Code runs the command
    # (it knows nothing of approvals), but its result cannot reach the model
    # while the approval is pending; once the user approves, the resumed
    # session's result goes through.
    model, upstream = new_model(gateway, prefix=CLAUDE_NAME)
    address, token = new_agent(gateway, model, default_tool_mode="ask")
    env = claude_env(tmp_path / "home", f"{gateway.url}/v1/agents/{address}", token, "ANTHROPIC_AUTH_TOKEN")

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [BASH_CALL]},
        {"content": FINAL_TEXT},
        claude_cmd("claude-sonnet-4-5", "Run the marker command.", "--allowedTools", "Bash"),
        env,
        tmp_path / "work",
    )

    held = result_json(done)
    assert held["is_error"] is True, held
    assert held["api_error_status"] == 409
    assert len(stub.requests(upstream)) == 1
    status, approvals = http("GET", f"{gateway.url}/api/admin/agents/{address}/approvals", token=gateway.admin)
    assert status == 200, approvals
    assert [(a["tool"], a["tool_call_id"], a["status"]) for a in approvals] == [("Bash", "call_cc_bash_1", "pending")]

    status, body = http(
        "POST", f"{gateway.url}/v1/agents/{address}/approvals/{approvals[0]['id']}", {"decision": "approve"}, token
    )
    assert status == 200, body
    resumed = run(
        claude_cmd("claude-sonnet-4-5", "Go on.", "--resume", held["session_id"], "--allowedTools", "Bash"),
        env,
        tmp_path / "work",
    )

    result = result_json(resumed)
    assert resumed.returncode == 0, (result, resumed.stderr)
    assert result["result"] == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_cc_bash_1"]
    assert SHELL_OUTPUT in text_of(tools[0]["content"])


def test_claude_code_sends_agent_headers_from_anthropic_custom_headers(gateway, stub, tmp_path):
    # Tool mode read_only for this session: Claude Code's tools are not in a
    # manifest, so they count as execute and none goes upstream.
    model, upstream = new_model(gateway, prefix=CLAUDE_NAME)
    address, token = new_agent(gateway, model)
    stub.script(upstream, {"content": "No tools today."})
    env = claude_env(tmp_path / "home", f"{gateway.url}/v1/agents/{address}", token, "ANTHROPIC_AUTH_TOKEN")
    env["ANTHROPIC_CUSTOM_HEADERS"] = "X-Service-Tool-Mode: read_only"

    done = run(claude_cmd("claude-sonnet-4-5", "Reply with pong."), env, tmp_path / "work")

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["result"] == "No tools today."
    reqs = stub.requests(upstream)
    assert len(reqs) == 1
    assert "tools" not in reqs[0]["body"] or reqs[0]["body"]["tools"] == []


def messages_stream(events: list[tuple[str, dict]]) -> list[str]:
    """A stub script's `stream_events`: whole Messages SSE frames."""
    return [f"event: {name}\ndata: {json.dumps(data)}" for name, data in events]


THINKING = "The user wants the marker; Bash prints it."


def thinking_then_bash(upstream: str) -> list[str]:
    """A Messages stream as Anthropic sends it with interleaved thinking: a
    signed thinking block, then a Bash tool_use whose input comes in pieces."""
    arguments = json.dumps({"command": SHELL_COMMAND, "description": "Print the marker"})
    start = {"id": "msg_cc_1", "type": "message", "role": "assistant", "model": upstream, "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 50, "output_tokens": 1}}
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": THINKING}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "signature_delta", "signature": "sig-cc-1"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block":
                                 {"type": "tool_use", "id": "toolu_cc_bash_1", "name": "Bash", "input": {}}}),
    ]
    for i in range(0, len(arguments), 7):
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 1,
                                               "delta": {"type": "input_json_delta",
                                                         "partial_json": arguments[i:i + 7]}}))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 20}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return messages_stream(events)


def test_claude_code_under_an_agent_on_an_anthropic_provider_keeps_thinking_and_restores_pii(
    gateway, stub, tmp_path, anthropic_provider
):
    # The agent route passes through to an anthropic provider: Claude Code's
    # own body under the agent's rules (instructions, contract tools, the
    # email tokenized), the answer's signed thinking block reaches Claude
    # Code intact (it sends it back with its tool result), and the token in
    # the final answer comes back as the email.
    model, upstream = new_model(gateway, provider=anthropic_provider, prefix=CLAUDE_NAME)
    pii = {"mode": "tokenize_reversible", "user_choosable": False, "terms": []}
    address, token = new_agent(
        gateway, model, instructions="You are the gatehouse test agent.", tool_contract=["Bash"], pii=pii
    )
    email = "jane.doe@example.com"

    done = run_two_turns(
        stub,
        upstream,
        {"stream_events": thinking_then_bash(upstream)},
        {"content": "Printed the marker for [EMAIL_1]."},
        # The answer names the agent's model; Claude Code keeps a thinking
        # block in its history only when that is the model it asked for.
        claude_cmd(model, f"Run the marker command for {email}.", "--allowedTools", "Bash"),
        claude_env(tmp_path / "home", f"{gateway.url}/v1/agents/{address}", token, "ANTHROPIC_AUTH_TOKEN"),
        tmp_path / "work",
    )

    result = result_json(done)
    assert done.returncode == 0, (result, done.stderr)
    assert result["result"] == f"Printed the marker for {email}."
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    assert all(r["path"] == "/v1/messages" for r in reqs)
    first = reqs[0]["body"]
    assert first["thinking"]["type"] == "enabled"
    assert [t["name"] for t in first["tools"]] == ["Bash"]
    assert first["system"][0]["text"] == "You are the gatehouse test agent."
    assert any(b.get("cache_control") for b in first["system"]), first["system"]
    for r in reqs:
        assert email not in json.dumps(r["body"])
    assert "[EMAIL_1]" in json.dumps(first["messages"])
    # The second turn carries the thinking block as Claude Code received it.
    second = reqs[1]["body"]["messages"]
    blocks = [b for m in second if m["role"] == "assistant" and isinstance(m["content"], list) for b in m["content"]]
    assert {"type": "thinking", "thinking": THINKING, "signature": "sig-cc-1"} in blocks, blocks
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    assert [(u["id"], u["input"]["command"]) for u in uses] == [("toolu_cc_bash_1", SHELL_COMMAND)]
    results = [b for b in second[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_cc_bash_1"]
    assert SHELL_OUTPUT in json.dumps(results[0]["content"])
