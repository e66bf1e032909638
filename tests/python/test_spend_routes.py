"""The cost on the Messages and Responses routes through their official
clients: the `anthropic` SDK reads it in a Messages stream's
`message_delta` usage, the `openai` SDK in a Responses stream's
`response.completed` usage, and both in their plain answers' headers
(docs/spend.md)."""

from test_spend import add_model, price


def test_the_anthropic_sdks_stream_reads_the_cost_in_message_delta_usage(gateway, stub):
    import anthropic

    add_model(gateway, "py-priced-messages", "py-up-priced-messages")
    price(gateway, "py-up-priced-messages", {"input": "1", "output": "2"})
    stub.script("py-up-priced-messages", {"content": "a streamed message", "usage": [1000, 500]})
    client = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30)

    raw = client.messages.with_raw_response.create(
        model="py-priced-messages", max_tokens=64, messages=[{"role": "user", "content": "price it"}]
    )
    assert raw.headers["x-gatehouse-cost"] == "0.002000000"
    assert raw.headers["x-gatehouse-cost-status"] == "exact"
    assert raw.parse().usage.output_tokens == 500

    with client.messages.stream(
        model="py-priced-messages", max_tokens=64, messages=[{"role": "user", "content": "stream it"}]
    ) as stream:
        deltas = [e for e in stream if e.type == "message_delta"]
        final = stream.get_final_message()
    assert len(deltas) == 1
    extra = deltas[0].usage.model_extra or {}
    assert extra.get("cost") == "0.002000000"
    assert extra.get("cost_status") == "exact"
    assert final.usage.output_tokens == 500


def test_the_openai_sdks_responses_stream_reads_the_cost_in_response_completed(client, gateway, stub):
    add_model(gateway, "py-priced-responses", "py-up-priced-responses")
    price(gateway, "py-up-priced-responses", {"input": "1", "output": "2", "request": "0.5"})
    stub.script("py-up-priced-responses", {"content": "a streamed response", "usage": [1000, 500]})

    raw = client.responses.with_raw_response.create(model="py-priced-responses", input="price it")
    assert raw.headers["x-gatehouse-cost"] == "0.502000000"
    assert raw.headers["x-gatehouse-cost-status"] == "exact"

    with client.responses.stream(model="py-priced-responses", input="stream it") as stream:
        completed = [e for e in stream if e.type == "response.completed"]
        final = stream.get_final_response()
    assert len(completed) == 1
    extra = completed[0].response.usage.model_extra or {}
    assert extra.get("cost") == "0.502000000"
    assert extra.get("cost_status") == "exact"
    assert final.usage.input_tokens == 1000
