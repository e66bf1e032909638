"""The official openai Python SDK meets the limits (issue 14): over a limit
it raises RateLimitError carrying our code, Retry-After and OpenAI's
x-ratelimit-* headers, and its own retry logic, unchanged, waits for
Retry-After and gets through."""

import threading
import time

import openai
import pytest

from conftest import http, served

MESSAGES = [{"role": "user", "content": "hello limits"}]


def limited_client(gateway, limits: dict, max_retries: int = 0) -> openai.OpenAI:
    status, body = http(
        "POST", f"{gateway.url}/api/api-keys", {"name": "limited", "limits": limits}, gateway.admin
    )
    assert status == 201, body
    return openai.OpenAI(
        base_url=gateway.v1, api_key=body["key"], max_retries=max_retries, timeout=30
    )


def test_over_requests_per_minute_the_sdk_raises_rate_limit_error(gateway):
    client = limited_client(gateway, {"requests_per_minute": 1})
    raw = client.chat.completions.with_raw_response.create(model="py-chat", messages=MESSAGES)
    assert raw.headers["x-ratelimit-limit-requests"] == "1"
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"
    assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
    assert raw.parse().choices[0].message.content == "echo: hello limits"

    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="py-chat", messages=MESSAGES)
    err = e.value
    assert err.status_code == 429
    assert err.code == "rate_limited"
    assert 1 <= int(err.response.headers["retry-after"]) <= 61
    assert err.response.headers["x-ratelimit-remaining-requests"] == "0"


def test_a_used_up_day_budget_is_a_rate_limit_error_with_budget_exhausted(gateway):
    client = limited_client(gateway, {"tokens_per_day": 5})
    client.chat.completions.create(model="py-chat", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as e:
        client.embeddings.create(model="py-emb", input="more", encoding_format="float")
    assert e.value.code == "budget_exhausted"
    assert int(e.value.response.headers["retry-after"]) >= 1


def test_the_sdk_does_not_retry_a_used_up_budget(gateway):
    # The SDK's own retries are on: x-should-retry: false stops them.
    client = limited_client(gateway, {"tokens_per_day": 5}, max_retries=2)
    client.chat.completions.create(model="py-chat", messages=MESSAGES)
    before = served(gateway, "/v1/chat/completions", 429)
    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="py-chat", messages=MESSAGES)
    assert e.value.code == "budget_exhausted"
    assert served(gateway, "/v1/chat/completions", 429) == before + 1
    assert e.value.response.headers.get("x-should-retry") == "false"


def test_a_rate_limit_leaves_the_sdk_free_to_retry(gateway):
    client = limited_client(gateway, {"requests_per_minute": 1})
    client.chat.completions.create(model="py-chat", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="py-chat", messages=MESSAGES)
    assert e.value.code == "rate_limited"
    assert "x-should-retry" not in e.value.response.headers


def test_the_sdks_own_retry_waits_for_retry_after_and_gets_through(gateway, stub):
    stub.script("py-up-slow", {"delay_ms": 1500})
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/models",
        {"id": "py-slow", "kind": "chat", "provider": "stub-openai", "upstream_model": "py-up-slow"},
        gateway.admin,
    )
    assert status in (201, 409), body
    status, body = http(
        "POST", f"{gateway.url}/api/api-keys", {"name": "one-at-a-time", "limits": {"max_parallel": 1}}, gateway.admin
    )
    assert status == 201, body
    key = body["key"]
    patient = openai.OpenAI(base_url=gateway.v1, api_key=key, max_retries=3, timeout=30)
    first = openai.OpenAI(base_url=gateway.v1, api_key=key, max_retries=0, timeout=30)

    slow = threading.Thread(
        target=lambda: first.chat.completions.create(model="py-slow", messages=MESSAGES)
    )
    slow.start()
    time.sleep(0.4)
    started = time.monotonic()
    # Refused with Retry-After: 1 while the slow one runs; the SDK retries.
    resp = patient.chat.completions.create(model="py-chat", messages=MESSAGES)
    waited = time.monotonic() - started
    slow.join()
    assert resp.choices[0].message.content == "echo: hello limits"
    assert waited >= 0.9, f"answered after {waited:.2f}s: no retry happened"
