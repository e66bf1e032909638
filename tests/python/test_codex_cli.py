"""The real Codex CLI (npm @openai/codex, tests/agent-clis) through Gatehouse
(issue 32): `codex exec`, offline, with a CODEX_HOME whose config.toml has a
`model_providers` entry for Gatehouse (`wire_api = "responses"`), as
docs/agent-clis.md tells users.

Codex speaks only the Responses API, as streams. To an `openai` provider in
the default `bridge` mode Gatehouse translates it to chat completions and the
stub's chat answers back into the Responses event grammar; Codex must answer a
prompt and complete a shell-command round trip."""

import json
import re

import pytest

from agent_clis import (
    agent_tools,
    SHELL_COMMAND,
    SHELL_OUTPUT,
    codex_cmd,
    codex_env,
    new_agent,
    new_model,
    run,
    run_two_turns,
    text_of,
    tool_messages,
    unique,
    wait_usage,
)
from conftest import http

EXEC_CALL = {"id": "call_codex_exec_1", "name": "exec_command", "arguments": json.dumps({"cmd": SHELL_COMMAND})}
FINAL_TEXT = "The command printed the marker."


def test_codex_exec_answers_a_prompt_through_gatehouse(gateway, stub, tmp_path):
    model, upstream = new_model(gateway, prefix="codex")
    stub.script(upstream, {"content": "Pong from the stub upstream."})
    last = tmp_path / "last.txt"

    done = run(
        codex_cmd("Reply with pong.", last),
        codex_env(tmp_path / "home", gateway.v1, model, gateway.key),
        tmp_path / "work",
    )

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == "Pong from the stub upstream."
    reqs = stub.requests(upstream)
    assert len(reqs) == 1
    assert reqs[0]["path"] == "/v1/chat/completions"
    body = reqs[0]["body"]
    assert body["stream"] is True
    # Codex's developer messages become system messages; its prompt the last user text.
    assert body["messages"][0]["role"] == "system"
    assert "developer" not in [m["role"] for m in body["messages"]]
    users = [m for m in body["messages"] if m["role"] == "user"]
    assert text_of(users[-1]["content"]) == "Reply with pong."
    assert any(t["function"]["name"] == "exec_command" for t in body["tools"])
    assert gateway.key not in json.dumps(reqs[0]["headers"])


def test_codex_exec_runs_a_shell_command_and_sends_its_output_back(gateway, stub, tmp_path):
    model, upstream = new_model(gateway, prefix="codex-tool")
    last = tmp_path / "last.txt"

    # Text, then the call, in one streamed answer: a message item, then a function_call item.
    done = run_two_turns(
        stub,
        upstream,
        {"content": "Running it now.", "tool_calls": [EXEC_CALL]},
        {"content": FINAL_TEXT},
        codex_cmd("Run the marker command.", last),
        codex_env(tmp_path / "home", gateway.v1, model, gateway.key),
        tmp_path / "work",
    )

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2, [r["body"]["messages"][-1] for r in reqs]
    second = reqs[1]["body"]["messages"]
    # Codex echoed the message and function_call items; the bridge made them
    # one assistant message with its text and tool_calls again...
    assistant = [m for m in second if m["role"] == "assistant"]
    assert [text_of(m.get("content")) for m in assistant] == ["Running it now."]
    calls = [c for m in assistant for c in m.get("tool_calls") or []]
    assert [c["id"] for c in calls] == ["call_codex_exec_1"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"cmd": SHELL_COMMAND}
    # ...and its function_call_output, holding the command's real output, a tool message.
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_codex_exec_1"]
    assert SHELL_OUTPUT in text_of(tools[0]["content"])
    assert SHELL_OUTPUT not in json.dumps(reqs[0]["body"])
    # Both turns are the gateway's requests: counted, with the stub's token figures.
    usage = wait_usage(gateway, model, 2)
    assert (usage["requests"], usage["errors"], usage["prompt_tokens"]) == (2, 0, 20)


def test_codex_exec_fails_on_a_wrong_key_without_reaching_the_upstream(gateway, stub, tmp_path):
    model, upstream = new_model(gateway, prefix="codex-401")
    stub.script(upstream, {"content": "never sent"})
    last = tmp_path / "last.txt"

    done = run(
        codex_cmd("Reply with pong.", last),
        codex_env(tmp_path / "home", gateway.v1, model, "gh-not-a-key"),
        tmp_path / "work",
    )

    assert done.returncode != 0
    assert "status 401 Unauthorized" in done.stdout + done.stderr
    assert stub.requests(upstream) == []


@pytest.fixture(scope="module")
def native_provider(gateway, stub):
    """An `openai` provider in `native` mode: Responses bodies go to the
    stub's own /v1/responses unchanged but for `model`."""
    name = unique("stub-native")
    provider = {"name": name, "type": "openai", "base_url": f"{stub.url}/v1", "timeout_s": 10, "responses": "native"}
    status, body = http("POST", f"{gateway.url}/api/admin/providers", provider, gateway.admin)
    assert status == 201, body
    return name


def test_codex_exec_answers_through_a_native_responses_provider(gateway, stub, tmp_path, native_provider):
    model, upstream = new_model(gateway, provider=native_provider, prefix="codex-native")
    stub.script(upstream, {"content": "Pong from the Responses stub."})
    last = tmp_path / "last.txt"

    done = run(
        codex_cmd("Reply with pong.", last),
        codex_env(tmp_path / "home", gateway.v1, model, gateway.key),
        tmp_path / "work",
    )

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == "Pong from the Responses stub."
    reqs = stub.requests(upstream)
    assert len(reqs) == 1
    assert reqs[0]["path"] == "/v1/responses"
    # Codex's own body, only the model replaced.
    body = reqs[0]["body"]
    assert body["model"] == upstream
    assert body["store"] is False
    assert body["stream"] is True
    assert any(t.get("name") == "exec_command" for t in body["tools"])


def test_codex_exec_completes_a_shell_round_trip_through_a_native_responses_provider(
    gateway, stub, tmp_path, native_provider
):
    model, upstream = new_model(gateway, provider=native_provider, prefix="codex-native-tool")
    last = tmp_path / "last.txt"

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [EXEC_CALL]},
        {"content": FINAL_TEXT},
        codex_cmd("Run the marker command.", last),
        codex_env(tmp_path / "home", gateway.v1, model, gateway.key),
        tmp_path / "work",
    )

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    outputs = [i for i in reqs[1]["body"]["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_codex_exec_1"]
    assert SHELL_OUTPUT in json.dumps(outputs[0]["output"])


def test_codex_under_an_agent_offers_only_contract_tools_and_completes_a_round_trip(gateway, stub, tmp_path):
    # base_url is the agent's path and the access token is the key: the
    # agent's model, instructions and tool contract apply to Codex.
    model, upstream = new_model(gateway, prefix="codex-agent")
    address, token = new_agent(
        gateway, model, instructions="You are the gatehouse test agent.", tool_contract=["exec_command"]
    )
    last = tmp_path / "last.txt"

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [EXEC_CALL]},
        {"content": FINAL_TEXT},
        codex_cmd("Run the marker command.", last),
        codex_env(tmp_path / "home", f"{gateway.url}/v1/agents/{address}", "gpt-5-codex", token),
        tmp_path / "work",
    )

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    first = reqs[0]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == ["exec_command"]
    assert first["messages"][0] == {"role": "system", "content": "You are the gatehouse test agent."}
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_codex_exec_1"]
    assert SHELL_OUTPUT in text_of(tools[0]["content"])
    listed = agent_tools(gateway, address)
    assert listed["exec_command"] == "contract"
    assert listed["write_stdin"] == "held"


def test_codex_applies_a_patch_through_the_bridge_with_its_custom_apply_patch_tool(gateway, stub, tmp_path):
    # For a model it knows (gpt-5.5...) Codex offers `apply_patch` as a custom
    # (freeform) tool; the bridge offers it upstream as a function taking
    # {"input"} and turns the call back into a custom_tool_call Codex applies.
    model, upstream = new_model(gateway, prefix="gpt-5.5")
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+patched through gatehouse\n*** End Patch\n"
    call = {"id": "call_codex_patch_1", "name": "apply_patch", "arguments": json.dumps({"input": patch})}
    last = tmp_path / "last.txt"
    work = tmp_path / "work"

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [call]},
        {"content": "Added hello.txt."},
        codex_cmd("Add hello.txt.", last),
        codex_env(tmp_path / "home", gateway.v1, model, gateway.key),
        work,
    )

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == "Added hello.txt."
    assert (work / "hello.txt").read_text() == "patched through gatehouse\n"
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    offered = {t["function"]["name"]: t["function"] for t in reqs[0]["body"]["tools"]}
    assert offered["apply_patch"]["parameters"] == {
        "type": "object",
        "properties": {"input": {"type": "string"}},
        "required": ["input"],
    }
    # Built-in tools have no chat form: dropped, never sent.
    assert "web_search" not in offered and "tool_search" not in offered
    assert all(t["type"] == "function" for t in reqs[0]["body"]["tools"])
    second = reqs[1]["body"]["messages"]
    calls = [c for m in second if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert [c["id"] for c in calls] == ["call_codex_patch_1"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"input": patch}
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_codex_patch_1"]
    assert "hello.txt" in text_of(tools[0]["content"])


def test_codex_under_an_agent_in_ask_mode_waits_for_the_approval_of_its_command(gateway, stub, tmp_path):
    # Mode ask: the exec_command call gets an approval; Codex runs it, but its
    # output cannot reach the model while the approval is pending. Once the
    # user approves, the resumed session's output goes through.
    model, upstream = new_model(gateway, prefix="codex-ask")
    address, token = new_agent(gateway, model, default_tool_mode="ask")
    env = codex_env(tmp_path / "home", f"{gateway.url}/v1/agents/{address}", "gpt-5-codex", token)
    last = tmp_path / "last.txt"

    done = run_two_turns(
        stub,
        upstream,
        {"tool_calls": [EXEC_CALL]},
        {"content": FINAL_TEXT},
        codex_cmd("Run the marker command.", last),
        env,
        tmp_path / "work",
    )

    assert done.returncode != 0, done.stderr
    assert "status 409 Conflict" in done.stdout + done.stderr
    assert len(stub.requests(upstream)) == 1
    status, approvals = http("GET", f"{gateway.url}/api/admin/agents/{address}/approvals", token=gateway.admin)
    assert status == 200, approvals
    assert [(a["tool"], a["tool_call_id"], a["status"]) for a in approvals] == [
        ("exec_command", "call_codex_exec_1", "pending")
    ]
    session = re.search(r"session id: (\S+)", done.stderr + done.stdout)
    assert session, done.stderr

    status, body = http(
        "POST", f"{gateway.url}/v1/agents/{address}/approvals/{approvals[0]['id']}", {"decision": "approve"}, token
    )
    assert status == 200, body
    # `exec`'s options go before its `resume` subcommand.
    resumed = run(codex_cmd("Go on.", last)[:-1] + ["resume", session.group(1), "Go on."], env, tmp_path / "work")

    assert resumed.returncode == 0, f"stdout: {resumed.stdout}\nstderr: {resumed.stderr}"
    assert last.read_text().strip() == FINAL_TEXT
    reqs = stub.requests(upstream)
    assert len(reqs) == 2
    tools = tool_messages(reqs[1])
    assert [t["tool_call_id"] for t in tools] == ["call_codex_exec_1"]
    assert SHELL_OUTPUT in text_of(tools[0]["content"])


def test_codex_sends_agent_headers_from_the_providers_http_headers(gateway, stub, tmp_path):
    # Tool mode read_only for this session: Codex's tools are not in a
    # manifest, so they count as execute and none goes upstream.
    model, upstream = new_model(gateway, prefix="codex-headers")
    address, token = new_agent(gateway, model)
    stub.script(upstream, {"content": "No tools today."})
    last = tmp_path / "last.txt"
    env = codex_env(
        tmp_path / "home",
        f"{gateway.url}/v1/agents/{address}",
        "gpt-5-codex",
        token,
        extra_toml='http_headers = { "X-Service-Tool-Mode" = "read_only" }\n',
    )

    done = run(codex_cmd("Reply with pong.", last), env, tmp_path / "work")

    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert last.read_text().strip() == "No tools today."
    reqs = stub.requests(upstream)
    assert len(reqs) == 1
    assert "tools" not in reqs[0]["body"] or reqs[0]["body"]["tools"] == []
