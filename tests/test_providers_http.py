"""The remote providers against a real HTTP server on 127.0.0.1: retries, timeouts, refusals,
wrong sizes, concurrency and the splitting of over-long texts."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kernel.providers import ProviderError
from kernel.providers.base import normalize_rows
from kernel.providers.http import HttpSettings, retry_after_seconds, split_long_texts
from kernel.providers.local import load_tokenizer
from kernel.providers.ollama import OllamaProvider, ollama_url
from kernel.providers.openai import CustomProvider, OpenAIProvider, embeddings_url
from tests.fake_embeddings import Action, FakeEmbeddingServer, text_hash, vector_for

KEY = "sk-test-9f8e7d6c5b4a39281706"
FAST = HttpSettings(timeout=5, max_retries=3, retry_delay=0.01, retry_max_delay=0.05)


def expected(texts: list[str], dims: int = 64) -> np.ndarray:
    return normalize_rows(np.array([vector_for(t, dims) for t in texts]))


def openai(server: FakeEmbeddingServer, settings: HttpSettings = FAST, **kw) -> OpenAIProvider:
    return OpenAIProvider(
        "text-embedding-3-small", 64, embeddings_url(server.url), settings, api_key=KEY, **kw
    )


TEXTS = ["extract a tar archive", "git rebase onto main", "boil the pasta"]


def test_500_twice_then_ok_retries_and_returns_the_right_vectors():
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.fail_next(Action("status", 500), Action("status", 503))
        vectors = openai(server).embed(TEXTS)
        assert [r.outcome for r in server.log] == ["500", "503", "ok"]
    np.testing.assert_allclose(vectors, expected(TEXTS), atol=1e-6)


def test_429_honours_retry_after_seconds():
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.fail_next(Action("status", 429, {"Retry-After": "1"}))
        vectors = openai(server).embed(TEXTS)
        first, second = server.log
        assert (first.outcome, second.outcome) == ("429", "ok")
        # The backoff alone would wait at most 0.01 s; the server asked for 1 s.
        assert second.at - first.at >= 0.95
    np.testing.assert_allclose(vectors, expected(TEXTS), atol=1e-6)


def test_retry_after_forms():
    import httpx  # here: every xdist worker imports every test module (~0.2 CPU-s)

    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry_after_seconds(httpx.Headers({"Retry-After": "3"})) == 3.0
    date = httpx.Headers({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry_after_seconds(date) == 0.0  # in the past: retry now
    assert retry_after_seconds(httpx.Headers({})) is None


def test_a_hang_past_the_timeout_is_retried():
    settings = HttpSettings(timeout=0.3, max_retries=2, retry_delay=0.01, retry_max_delay=0.01)
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.fail_next(Action("hang", seconds=5))
        started = time.monotonic()
        vectors = openai(server, settings).embed(TEXTS)
        assert time.monotonic() - started < 2
        assert [r.outcome for r in server.log] == ["hang", "ok"]
    np.testing.assert_allclose(vectors, expected(TEXTS), atol=1e-6)


def test_a_refused_key_stops_at_once_with_one_line_and_no_key():
    with FakeEmbeddingServer(api_key="sk-the-right-one") as server:
        provider = openai(server)
        with pytest.raises(ProviderError) as caught:
            provider.embed(TEXTS)
        assert len(server.log) == 1  # 401 is not retried
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("openai: HTTP 401")
    assert f"{server.url}/v1/embeddings" in message
    assert "OPENAI_API_KEY" in message
    # The server echoed the key it was given; the message masks it.
    assert KEY not in message and "***" in message
    assert KEY not in repr(provider)


@pytest.mark.parametrize("status", [400, 403, 404])
def test_client_errors_are_not_retried(status):
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.fail_next(Action("status", status))
        with pytest.raises(ProviderError, match=f"HTTP {status}"):
            openai(server).embed(TEXTS)
        assert len(server.log) == 1


def test_retries_run_out_with_a_message_that_says_how_to_resume():
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.fail_next(*[Action("status", 502)] * 10)
        with pytest.raises(ProviderError) as caught:
            openai(server).embed(TEXTS)
        assert len(server.log) == FAST.max_retries + 1
    assert "(4 attempts)" in str(caught.value)
    assert "resume" in str(caught.value)


def test_a_dropped_connection_is_retried():
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.fail_next(Action("drop"))
        openai(server).embed(TEXTS)
        assert [r.outcome for r in server.log] == ["drop", "ok"]


def test_nothing_listening_is_a_clear_error():
    with FakeEmbeddingServer() as server:
        url = server.url
    provider = OllamaProvider("nomic-embed-text", 64, ollama_url(url), FAST)
    with pytest.raises(
        ProviderError, match=r"ollama: cannot connect at http://127\.0\.0\.1.*OLLAMA_HOST"
    ):
        provider.embed(TEXTS)


def test_wrong_dimension_is_an_error_naming_the_setting():
    with FakeEmbeddingServer(api_key=KEY) as server:
        server.answer_dims = 32
        with pytest.raises(ProviderError, match="MDVDB_EMBEDDING_DIMENSIONS=32"):
            openai(server).embed(TEXTS)


def test_dimensions_zero_takes_what_the_endpoint_returns():
    with FakeEmbeddingServer(dims=48) as server:
        provider = CustomProvider("any", 0, embeddings_url(server.url), FAST)
        assert provider.embed(TEXTS).shape == (3, 48)
        assert provider.dimensions == 48
        server.answer_dims = 40  # the model behind the endpoint changed mid-run
        with pytest.raises(ProviderError, match="40-dimensional"):
            provider.embed(TEXTS)


def test_ollama_model_not_found_says_to_pull_it():
    with FakeEmbeddingServer(models=("nomic-embed-text",)) as server:
        provider = OllamaProvider("mxbai-embed-large", 64, ollama_url(server.url), FAST)
        with pytest.raises(ProviderError, match="ollama pull mxbai-embed-large"):
            provider.embed(TEXTS)
        good = OllamaProvider("nomic-embed-text", 64, ollama_url(server.url), FAST)
        np.testing.assert_allclose(good.embed(TEXTS), expected(TEXTS), atol=1e-6)


def test_batches_run_concurrently_within_the_bound():
    settings = HttpSettings(timeout=5, max_retries=0, concurrency=4)
    batches = [[f"text number {i} of batch {b}" for i in range(3)] for b in range(12)]
    with FakeEmbeddingServer(api_key=KEY, latency=0.1) as server:
        started = time.monotonic()
        got = dict(openai(server, settings).embed_batches(batches))
        elapsed = time.monotonic() - started
        assert server.max_in_flight == 4
    assert sorted(got) == list(range(12))
    for b, vectors in got.items():
        np.testing.assert_allclose(vectors, expected(batches[b]), atol=1e-6)
    assert elapsed < 12 * 0.1 / 2  # sequential would take 1.2 s


def test_a_fatal_error_still_hands_over_the_batches_that_came_back():
    settings = HttpSettings(timeout=5, max_retries=0, concurrency=3)
    batches = [[f"text {b}"] for b in range(20)]
    with FakeEmbeddingServer(api_key=KEY, latency=0.05) as server:
        server.down_after = 5
        server.down_action = Action("status", 400)
        got: dict[int, np.ndarray] = {}
        with pytest.raises(ProviderError, match="HTTP 400"):
            for i, vectors in openai(server, settings).embed_batches(batches):
                got[i] = vectors
        served = {text_hash(t) for r in server.requests("ok") for t in r.texts}
    # Every batch the server answered reached the caller (none lost), and no more started.
    assert {text_hash(batches[i][0]) for i in got} == served
    assert len(got) >= 5 and len(server.log) < 20


def test_over_long_texts_are_split_and_averaged():
    tokenizer = load_tokenizer()
    long_text = " ".join(f"word{i}" for i in range(400))
    texts = ["short one", long_text]
    with FakeEmbeddingServer(api_key=KEY) as server:
        vectors = openai(server, max_input_tokens=100).embed(texts)
        sent = server.log[0].texts
    assert len(sent) > 2 and sent[0] == "short one"
    for piece in sent:
        assert len(tokenizer.encode(piece, add_special_tokens=False).ids) <= 100
    assert "".join(sent[1:]).replace(" ", "") == long_text.replace(" ", "")
    pieces, owners, weights = split_long_texts(texts, 100)
    mean = (
        normalize_rows(np.array([vector_for(p, 64) for p in pieces[1:]]))
        * np.array(weights[1:], dtype=np.float32)[:, None]
    ).sum(axis=0)
    np.testing.assert_allclose(vectors[1], normalize_rows(mean[None])[0], atol=1e-5)
    np.testing.assert_allclose(vectors[0], expected(["short one"])[0], atol=1e-6)


def test_urls():
    assert embeddings_url("https://api.openai.com") == "https://api.openai.com/v1/embeddings"
    assert embeddings_url("https://api.openai.com/v1/") == "https://api.openai.com/v1/embeddings"
    assert (
        embeddings_url("https://x.openai.azure.com/openai/deployments/emb?api-version=2024-02-01")
        == "https://x.openai.azure.com/openai/deployments/emb/embeddings?api-version=2024-02-01"
    )
    assert embeddings_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/v1/embeddings"
    with pytest.raises(ProviderError, match="not an http"):
        embeddings_url("ftp://example.com")
    with pytest.raises(ProviderError, match="not an http"):
        embeddings_url("localhost:8080")
    assert ollama_url(None) == "http://127.0.0.1:11434/api/embed"
    assert ollama_url("0.0.0.0") == "http://127.0.0.1:11434/api/embed"
    assert ollama_url("gpu-box:9999") == "http://gpu-box:9999/api/embed"
    assert ollama_url("https://ollama.example.com/") == "https://ollama.example.com/api/embed"


def test_the_public_url_hides_credentials_in_the_url():
    provider = CustomProvider(
        "m", 8, embeddings_url("https://user:pw@example.com/v1?key=abc"), FAST, api_key="k"
    )
    assert provider.public_url == "https://example.com/v1/embeddings"
