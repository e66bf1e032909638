"""The official openai Python SDK against the gateway: chat (plain and
streamed), embeddings (float, and the SDK's default base64), and errors."""

import math

import openai
import pytest

from conftest import http


def test_chat_plain_answer_names_the_alias(client, stub):
    resp = client.chat.completions.create(
        model="py-chat",
        messages=[{"role": "user", "content": "hello sdk"}],
        temperature=0.5,
    )
    assert resp.model == "py-chat"
    assert resp.choices[0].message.content == "echo: hello sdk"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 10
    sent = stub.requests("py-up-chat")[-1]
    assert sent["body"]["model"] == "py-up-chat"
    assert sent["body"]["temperature"] == 0.5


def test_chat_stream_assembles_to_the_echo(client):
    stream = client.chat.completions.create(
        model="py-chat",
        messages=[{"role": "user", "content": "hello stream, in pieces"}],
        stream=True,
    )
    chunks = list(stream)
    assert len(chunks) > 3
    assert all(c.model == "py-chat" for c in chunks)
    assert all(c.usage is None for c in chunks), "usage was not asked for"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: hello stream, in pieces"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_stream_reports_usage_when_asked(client):
    chunks = list(
        client.chat.completions.create(
            model="py-chat",
            messages=[{"role": "user", "content": "count me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.prompt_tokens == 10
    assert last.usage.completion_tokens == 3


def scripted_model(gateway, stub, alias: str, upstream: str, script: dict) -> str:
    """A chat model whose upstream behaves as `script` says."""
    stub.script(upstream, script)
    status, body = http(
        "POST",
        f"{gateway.url}/api/admin/models",
        {"id": alias, "kind": "chat", "provider": "stub-openai", "upstream_model": upstream},
        gateway.admin,
    )
    assert status in (201, 409), body
    return alias


def test_embeddings_float(client):
    resp = client.embeddings.create(
        model="py-emb", input=["first text", "second text"], encoding_format="float"
    )
    assert resp.model == "py-emb"
    assert [d.index for d in resp.data] == [0, 1]
    assert all(len(d.embedding) == 8 for d in resp.data)
    norm = math.sqrt(sum(x * x for x in resp.data[0].embedding))
    assert norm == pytest.approx(1.0, rel=1e-5)
    assert resp.usage.prompt_tokens == 4


@pytest.mark.parametrize("model", ["py-emb", "py-emb-tei"])
def test_embeddings_default_base64_decodes_to_the_float_answer(client, stub, model):
    floats = client.embeddings.create(model=model, input="same text", encoding_format="float")
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    default = client.embeddings.create(model=model, input="same text")
    assert default.model == model
    assert len(default.data[0].embedding) == len(floats.data[0].embedding) == 8
    assert default.data[0].embedding == pytest.approx(floats.data[0].embedding, rel=1e-6, abs=1e-7)


def test_errors_are_openai_errors(client, gateway, stub):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "model_not_found"

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="py-emb", messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "model_kind_mismatch"
    assert "send it to /v1/embeddings" in e.value.message

    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="py-emb", input=[])
    assert e.value.code == "validation_error"

    bad = openai.OpenAI(base_url=gateway.v1, api_key="gtk_not_a_key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.code == "invalid_api_key"

    busy = scripted_model(
        gateway, stub, "py-busy", "py-up-busy", {"status": 429, "error_message": "slow down"}
    )
    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model=busy, messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "upstream_error"
    assert e.value.body["message"] == "slow down"

    # A stream the upstream cuts off ends with an error message the SDK raises.
    cut = scripted_model(
        gateway,
        stub,
        "py-cut",
        "py-up-cut",
        {"content": "this answer will be cut", "close_after_chunks": 2},
    )
    stream = client.chat.completions.create(
        model=cut, messages=[{"role": "user", "content": "x"}], stream=True
    )
    with pytest.raises(openai.APIError) as e:
        for _ in stream:
            pass
    assert "closed the stream" in e.value.message


@pytest.mark.parametrize("interval_ms", [0, 200])
def test_a_stream_cut_with_its_last_chunks_yields_them_before_the_error(
    client, gateway, stub, interval_ms
):
    # The upstream sends the role chunk, "one " and "two " and drops the
    # connection: with no pause, all in one read; with 0.2 s between them,
    # "two " and the drop together.
    cut = scripted_model(
        gateway,
        stub,
        f"py-cut-together-{interval_ms}",
        f"py-up-cut-together-{interval_ms}",
        {
            "content": "one two three",
            "close_after_chunks": 2,
            "close_with_last_chunk": True,
            "chunk_interval_ms": interval_ms,
        },
    )
    stream = client.chat.completions.create(
        model=cut, messages=[{"role": "user", "content": "x"}], stream=True
    )
    text = []
    with pytest.raises(openai.APIError) as e:
        for chunk in stream:
            text.append(chunk.choices[0].delta.content or "")
    assert "".join(text) == "one two "
    assert "closed the stream" in e.value.message
