"""The Responses API through the gateway with real clients: the official
openai SDK (`responses.create`, `responses.stream` with its event
accumulator and `get_final_response`, a function-call round trip) and
LangChain's `ChatOpenAI(use_responses_api=True)`. The gateway bridges to the
stub's chat completions (the provider's default mode)."""

import json

import pytest

from test_openai_sdk import scripted_model

CALL = {"id": "call_weather", "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_responses_create_answers_with_output_text(client, stub):
    resp = client.responses.create(model="py-chat", input="hello responses", instructions="Be brief.")
    assert resp.object == "response"
    assert resp.id.startswith("resp_")
    assert resp.model == "py-chat"
    assert resp.status == "completed"
    assert resp.output_text == "echo: hello responses"
    assert resp.usage.input_tokens == 10
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    sent = stub.requests("py-up-chat")[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_responses_stream_accumulates_to_the_final_response(client):
    deltas = []
    types = []
    with client.responses.stream(model="py-chat", input="stream me in pieces") as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert len(deltas) > 1
    assert "".join(deltas) == "echo: stream me in pieces"
    assert final.output_text == "echo: stream me in pieces"
    assert final.status == "completed"
    assert final.model == "py-chat"


def test_a_function_call_round_trip(client, gateway, stub):
    model = scripted_model(gateway, stub, "py-resp-tools", "py-up-resp-tools", {"tool_calls": [CALL]})
    first = client.responses.create(model=model, input="weather in Paris?", tools=[WEATHER_TOOL])
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1
    assert (calls[0].call_id, calls[0].name, json.loads(calls[0].arguments)) == (
        "call_weather",
        "get_weather",
        {"city": "Paris"},
    )
    # The same call, streamed: the accumulator assembles the arguments.
    with client.responses.stream(model=model, input="weather in Paris?", tools=[WEATHER_TOOL]) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_response()
    assert [o.type for o in streamed.output] == ["function_call"]
    assert json.loads(streamed.output[0].arguments) == {"city": "Paris"}

    stub.script("py-up-resp-tools", {"content": "It is sunny in Paris."})
    second = client.responses.create(
        model=model,
        tools=[WEATHER_TOOL],
        input=[
            {"role": "user", "content": "weather in Paris?"},
            *first.output,
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"},
        ],
    )
    assert second.output_text == "It is sunny in Paris."
    messages = stub.requests("py-up-resp-tools")[-1]["body"]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "call_weather"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_weather", "content": "sunny, 21 C"}


def test_stored_responses_are_not_found(client):
    import openai

    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve("resp_0123")
    assert e.value.body["code"] == "response_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="py-chat", input="x", previous_response_id="resp_0123")
    assert e.value.body["code"] == "previous_response_unsupported"


def _text(msg) -> str:
    # A property in langchain-core 1.x (calling it is deprecated).
    return str(msg.text)


def test_langchain_chat_openai_with_the_responses_api(gateway, stub):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="py-chat", base_url=gateway.v1, api_key=gateway.key, use_responses_api=True, max_retries=0
    )
    assert _text(llm.invoke("hello langchain")) == "echo: hello langchain"
    streamed = "".join(_text(c) for c in llm.stream("stream langchain"))
    assert streamed == "echo: stream langchain"
    assert stub.requests("py-up-chat")[-1]["body"]["stream"] is True

    @tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return "sunny"

    model = scripted_model(gateway, stub, "py-lc-tools", "py-up-lc-tools", {"tool_calls": [CALL]})
    llm = ChatOpenAI(model=model, base_url=gateway.v1, api_key=gateway.key, use_responses_api=True, max_retries=0)
    msg = llm.bind_tools([get_weather]).invoke("weather in Paris?")
    assert [(c["name"], c["args"], c["id"]) for c in msg.tool_calls] == [("get_weather", {"city": "Paris"}, "call_weather")]
