"""The official `anthropic` Python SDK through Gatehouse (issue 31), on
`/v1/messages` translated to the stub's OpenAI chat completions: create,
stream with text and tool use assembled by the SDK, count_tokens, the model
list, and the SDK's error classes (retries off, so each status is seen once)."""

import json

import anthropic
import pytest

from agent_clis import new_agent, new_key, new_model

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
}


def sdk(gateway, key=None, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key or gateway.key, max_retries=0, timeout=30, **kw)


@pytest.fixture
def client(gateway):
    return sdk(gateway)


def test_messages_create_returns_the_upstream_answer_as_an_anthropic_message(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk")
    stub.script(upstream, {"content": "Hello from the stub upstream.", "usage": [12, 6]})

    raw = client.messages.with_raw_response.create(
        model=model, max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": "hi there"}]
    )
    msg = raw.parse()

    assert isinstance(msg, anthropic.types.Message)
    assert msg.id.startswith("msg_")
    assert msg.model == model
    assert msg.role == "assistant"
    assert [(b.type, b.text) for b in msg.content] == [("text", "Hello from the stub upstream.")]
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (12, 6)
    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    sent = stub.requests(upstream)[-1]["body"]
    assert sent["model"] == upstream
    assert sent["max_tokens"] == 64
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]


def test_messages_create_works_with_an_auth_token_as_well(gateway, stub):
    model, upstream = new_model(gateway, prefix="sdk-token")
    stub.script(upstream, {"content": "token accepted"})
    client = anthropic.Anthropic(base_url=gateway.url, auth_token=gateway.key, max_retries=0, timeout=30)

    msg = client.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": "hi"}])

    assert msg.content[0].text == "token accepted"


def test_messages_stream_assembles_text_and_get_final_message(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-stream")
    text = "one two three four five six"
    stub.script(upstream, {"content": text, "chunk_size": 3, "usage": [20, 6]})

    with client.messages.stream(
        model=model, max_tokens=64, messages=[{"role": "user", "content": "count to six"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()

    assert len(pieces) == 9
    assert "".join(pieces) == text
    assert [(b.type, b.text) for b in final.content] == [("text", text)]
    assert final.stop_reason == "end_turn"
    assert final.model == model
    assert final.usage.output_tokens == 6
    assert final.usage.input_tokens == 20
    sent = stub.requests(upstream)[-1]["body"]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_a_stream_starts_with_a_real_input_token_estimate(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-start")
    stub.script(upstream, {"content": "ok"})

    with client.messages.stream(
        model=model, max_tokens=8, messages=[{"role": "user", "content": "x" * 400}]
    ) as stream:
        events = list(stream)

    assert events[0].type == "message_start"
    # Claude Code reads its context size from here: an estimate, never 0.
    assert events[0].message.usage.input_tokens >= 100
    assert events[0].message.usage.output_tokens == 0
    assert events[-1].type == "message_stop"


def test_messages_stream_assembles_a_tool_use_block_from_argument_pieces(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-tool")
    args = {"city": "Paris", "unit": "celsius"}
    stub.script(
        upstream,
        {"tool_calls": [{"id": "call_weather_1", "name": "get_weather", "arguments": json.dumps(args)}], "chunk_size": 4},
    )

    with client.messages.stream(
        model=model,
        max_tokens=64,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as stream:
        final = stream.get_final_message()

    assert final.stop_reason == "tool_use"
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(u.id, u.name, u.input) for u in uses] == [("call_weather_1", "get_weather", args)]
    sent = stub.requests(upstream)[-1]["body"]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]


def test_a_tool_result_goes_upstream_as_a_tool_message_before_the_user_text(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-result")
    stub.script(upstream, {"content": "It is 22 degrees in Paris."})

    msg = client.messages.create(
        model=model,
        max_tokens=64,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Answer in one line."},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 degrees"},
                ],
            },
        ],
    )

    assert msg.content[0].text == "It is 22 degrees in Paris."
    sent = stub.requests(upstream)[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    ]
    assert sent[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "22 degrees"}


def test_count_tokens_estimates_and_is_never_zero(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-count")

    # Four characters a token: 4000 characters are 1000 tokens, 4001 are 1001.
    at = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "x" * 4000}])
    past = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "x" * 4001}])
    empty = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": ""}])

    assert (at.input_tokens, past.input_tokens) == (1000, 1001)
    # Claude Code never compacts a conversation counted as 0.
    assert empty.input_tokens == 1
    assert stub.requests(upstream) == []


def test_count_tokens_counts_the_system_text_and_tools(gateway, client):
    model, _ = new_model(gateway, prefix="sdk-count-tools")
    bare = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])
    more = client.messages.count_tokens(
        model=model, system="s" * 400, tools=[WEATHER_TOOL], messages=[{"role": "user", "content": "hi"}]
    )
    assert more.input_tokens >= bare.input_tokens + 100


def test_models_list_in_anthropic_shape_names_chat_models(gateway, client):
    model, _ = new_model(gateway, prefix="sdk-models")
    raw = client.models.with_raw_response.list(limit=1000).http_response.json()
    assert {"data", "has_more", "first_id", "last_id"} <= raw.keys()
    models = list(client.models.list(limit=1000))
    ids = [m.id for m in models]
    assert model in ids
    assert "py-emb" not in ids  # embeddings models are not Messages models
    assert ids == sorted(ids)
    mine = models[ids.index(model)]
    assert (mine.type, mine.display_name) == ("model", model)


def assert_anthropic_error(err: anthropic.APIStatusError, status: int, type_: str, code: str):
    assert err.status_code == status
    assert err.type == type_
    assert err.body["type"] == "error"
    assert err.body["error"]["type"] == type_
    assert err.body["error"]["code"] == code
    assert err.request_id == err.response.headers["x-request-id"] == err.body["request_id"]


def test_a_wrong_key_raises_authentication_error(gateway):
    with pytest.raises(anthropic.AuthenticationError) as e:
        sdk(gateway, key="gh-not-a-key").messages.create(
            model="py-chat", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert_anthropic_error(e.value, 401, "authentication_error", "invalid_api_key")


def test_an_unknown_model_raises_not_found_error(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert_anthropic_error(e.value, 404, "not_found_error", "model_not_found")


def test_max_tokens_one_is_accepted_and_zero_raises_bad_request_error(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-400")
    stub.script(upstream, {"content": "x"})
    client.messages.create(model=model, max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=model, max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert_anthropic_error(e.value, 400, "invalid_request_error", "validation_error")
    assert e.value.body["error"]["param"] == "max_tokens"
    assert len(stub.requests(upstream)) == 1


def test_a_model_outside_the_keys_list_raises_permission_denied_error(gateway):
    key = new_key(gateway, models=["py-chat"])
    model, _ = new_model(gateway, prefix="sdk-403")
    with pytest.raises(anthropic.PermissionDeniedError) as e:
        sdk(gateway, key=key).messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert_anthropic_error(e.value, 403, "permission_error", "model_not_allowed")


def test_over_requests_per_minute_raises_rate_limit_error(gateway, stub):
    model, upstream = new_model(gateway, prefix="sdk-429")
    stub.script(upstream, {"content": "first"})
    client = sdk(gateway, key=new_key(gateway, limits={"requests_per_minute": 1}))
    client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.RateLimitError) as e:
        client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert_anthropic_error(e.value, 429, "rate_limit_error", "rate_limited")
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 61
    assert len(stub.requests(upstream)) == 1


def test_an_upstream_503_raises_service_unavailable_error(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-503")
    stub.script(upstream, {"status": 503, "error_message": "stub is down"})
    with pytest.raises(anthropic.ServiceUnavailableError) as e:
        client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert_anthropic_error(e.value, 503, "api_error", "upstream_error")
    assert "stub is down" in e.value.body["error"]["message"]


def test_a_stream_cut_after_it_began_raises_an_api_error_event(gateway, stub, client):
    model, upstream = new_model(gateway, prefix="sdk-cut")
    stub.script(upstream, {"content": "a long answer that never ends", "chunk_size": 2, "close_after_chunks": 3})
    with pytest.raises(anthropic.APIStatusError) as e:
        with client.messages.stream(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "talk"}]
        ) as stream:
            for _ in stream:
                pass
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "api_error"


def test_a_body_over_the_limit_raises_content_too_large_error(gateway, client):
    # GATEHOUSE_MAX_BODY_BYTES is 16 MiB by default (the test gateway's); the
    # byte-exact limit is tested in tests/api.
    with pytest.raises(anthropic.ContentTooLargeError) as e:
        client.messages.create(model="py-chat", max_tokens=8, messages=[{"role": "user", "content": "x" * (16 << 20)}])
    assert_anthropic_error(e.value, 413, "request_too_large", "payload_too_large")



def test_an_sdk_pointed_at_an_agent_gets_the_agents_model_and_instructions(gateway, stub):
    # base_url {gw}/v1/agents/{agent}: the SDK posts to .../v1/messages there.
    model, upstream = new_model(gateway, prefix="sdk-agent")
    address, token = new_agent(gateway, model, instructions="Agent rules first.")
    stub.script(upstream, {"content": "Answered for the agent."})
    client = anthropic.Anthropic(
        base_url=f"{gateway.url}/v1/agents/{address}", auth_token=token, max_retries=0, timeout=30
    )

    msg = client.messages.create(
        model="ignored-on-agent-routes", max_tokens=32, system="Be brief.", messages=[{"role": "user", "content": "hi"}]
    )

    assert msg.content[0].text == "Answered for the agent."
    assert msg.model == model
    sent = stub.requests(upstream)[-1]["body"]["messages"]
    assert sent[0] == {"role": "system", "content": "Agent rules first.\n\nBe brief."}
    # The agent's instructions are counted too.
    counted = client.messages.count_tokens(model="ignored-on-agent-routes", messages=[{"role": "user", "content": "hi"}])
    bare = sdk(gateway).messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens > bare.input_tokens
