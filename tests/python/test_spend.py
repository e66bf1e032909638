"""Spend through the official openai Python SDK: the cost headers of a plain
answer (read with `with_raw_response`), and the cost in the streamed usage
object when the client asks for usage (docs/spend.md)."""

from conftest import http


def price(gateway, model: str, body: dict) -> None:
    status, answer = http("PUT", f"{gateway.url}/api/admin/prices/stub-openai/{model}", body, gateway.admin)
    assert status == 200, answer


def add_model(gateway, model_id: str, upstream: str) -> None:
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/models",
        {"id": model_id, "kind": "chat", "provider": "stub-openai", "upstream_model": upstream},
        gateway.admin,
    )
    assert status in (201, 409), body


def test_a_plain_answer_carries_its_cost_in_headers(client, gateway, stub):
    add_model(gateway, "py-priced", "py-up-priced")
    price(gateway, "py-up-priced", {"input": "1.00", "output": "2.00", "cache_read": "0.10"})
    stub.script("py-up-priced", {"usage": [1000, 500]})
    raw = client.chat.completions.with_raw_response.create(
        model="py-priced", messages=[{"role": "user", "content": "what does this cost?"}]
    )
    assert raw.headers["x-gatehouse-cost-status"] == "exact"
    # 1000 prompt tokens at 1.00 and 500 completion tokens at 2.00 per million.
    assert raw.headers["x-gatehouse-cost"] == "0.002000000"
    assert raw.headers["x-gatehouse-currency"] == "USD"
    completion = raw.parse()
    assert completion.usage.prompt_tokens == 1000


def test_the_streamed_usage_object_carries_the_cost(client, gateway, stub):
    add_model(gateway, "py-priced-stream", "py-up-priced-stream")
    price(gateway, "py-up-priced-stream", {"input": "1", "output": "2", "request": "0.5"})
    stub.script("py-up-priced-stream", {"content": "a streamed answer", "usage": [1000, 500]})
    stream = client.chat.completions.create(
        model="py-priced-stream",
        messages=[{"role": "user", "content": "stream it"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1
    extra = usage[0].model_extra or {}
    assert extra.get("cost") == "0.502000000"
    assert extra.get("cost_status") == "exact"


def test_an_unpriced_answer_says_so_without_a_cost(client, gateway, stub):
    add_model(gateway, "py-unpriced", "py-up-unpriced")
    raw = client.chat.completions.with_raw_response.create(
        model="py-unpriced", messages=[{"role": "user", "content": "free?"}]
    )
    assert raw.headers["x-gatehouse-cost-status"] == "unpriced"
    assert "x-gatehouse-cost" not in raw.headers
