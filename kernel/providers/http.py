"""What every remote embedding provider shares: one pooled httpx client, batches in flight,
retries with backoff, over-long texts split, the dimension check, errors without the API key.

Batches run on daemon threads, not asyncio: the caller commits each finished batch while the
others are on the wire, and a Ctrl-C never waits for a hung socket at exit.
"""

from __future__ import annotations

import email.utils
import queue
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel.providers.base import ProviderError, normalize_rows

if TYPE_CHECKING:
    import httpx

    from kernel.config import Config

# 408 timeout, 409 conflict (Azure uses it while scaling), 425 too early, 429 rate limit, 5xx.
RETRY_STATUSES = frozenset({408, 409, 425, 429})
# A server asking us to wait longer than this is down for maintenance, not rate limiting.
LONGEST_RETRY_AFTER = 300.0
# Texts are measured with the chunker's tokenizer and cut this much below the model's limit,
# so that a denser tokenizer still fits.
TOKEN_MARGIN = 0.9


@dataclass(frozen=True)
class HttpSettings:
    """The transport knobs, read from the MDVDB_EMBEDDING_* settings."""

    timeout: float = 60.0
    max_retries: int = 5
    retry_delay: float = 0.5
    retry_max_delay: float = 30.0
    concurrency: int = 4

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with equal jitter, so the batches in flight retry apart."""
        ceiling = min(self.retry_max_delay, self.retry_delay * (2**attempt))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class _Stopped(Exception):
    """Raised inside a worker when the run was stopped while it waited to retry."""


class _Retryable(Exception):
    def __init__(self, problem: str, retry_after: float | None = None, slow: bool = False):
        super().__init__(problem)
        self.problem = problem
        self.retry_after = retry_after
        self.slow = slow  # no answer within the timeout: the user is told at once


class HttpEmbeddingProvider(ABC):
    """Base class of the remote providers; subclasses fill in the request and the answer."""

    name = "http"
    # The variables a user sets to fix the address or the key, named in error messages.
    url_setting = "MDVDB_EMBEDDING_ENDPOINT"
    key_setting: str | None = None
    default_max_input_tokens = 512

    def __init__(
        self,
        model: str,
        dimensions: int,
        url: str,
        settings: HttpSettings,
        api_key: str | None = None,
        max_input_tokens: int = 0,
    ):
        self.model = model
        self.dimensions = dimensions  # 0: learned from the first answer
        self.url = url
        self.settings = settings
        self._api_key = api_key or None
        self.max_input_tokens = max_input_tokens or self.default_max_input_tokens
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._pause_until = 0.0  # a Retry-After pauses every batch, not just the one told
        self._slow_told: set[int] = set()  # attempts whose timeout was reported (one line each)

    @classmethod
    def for_config(cls, config: Config, url: str, api_key: str | None = None):
        """The provider of `config`'s model, dimensions and transport settings at `url`."""
        settings = HttpSettings(
            timeout=config.embedding_timeout,
            max_retries=config.embedding_max_retries,
            retry_delay=config.embedding_retry_delay,
            retry_max_delay=config.embedding_retry_max_delay,
            concurrency=config.embedding_concurrency,
        )
        model, dims = config.embedding_model, config.embedding_dimensions
        return cls(model, dims, url, settings, api_key, config.embedding_max_input_tokens)

    def __repr__(self) -> str:  # never show the key, even in a debugger or a traceback
        return f"{type(self).__name__}(model={self.model!r}, url={self.public_url!r})"

    # -- what a subclass provides -----------------------------------------------------------
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    @abstractmethod
    def payload(self, texts: list[str]) -> dict[str, Any]:
        """The JSON body of a request embedding `texts`."""

    @abstractmethod
    def vectors_of(self, body: Any) -> list[Any]:
        """The list of vectors in an answer, in input order."""

    def fix_for(self, status: int, message: str) -> str:
        """What the user should do about a refused request."""
        if status in (401, 403):
            if self.key_setting is None:
                return "this endpoint wants credentials mdvdb does not send"
            if not self._api_key:
                return f"no API key was sent: set {self.key_setting}"
            return f"check {self.key_setting}"
        if status == 404:
            return f"check {self.url_setting} and MDVDB_EMBEDDING_MODEL ({self.model!r})"
        if status in (400, 413, 422):
            return (
                "check MDVDB_EMBEDDING_MODEL and MDVDB_EMBEDDING_DIMENSIONS; if the input is "
                "too long, lower MDVDB_EMBEDDING_MAX_INPUT_TOKENS"
            )
        return f"check {self.url_setting}"

    # -- the interface ----------------------------------------------------------------------
    @property
    def public_url(self) -> str:
        """The URL without user info or query string (either may carry a secret)."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return self._embed_batch(list(texts), threading.Event())

    def embed_batches(self, batches: Sequence[Sequence[str]]) -> Iterator[tuple[int, np.ndarray]]:
        """Up to `concurrency` batches in flight, each yielded as it comes back; on the first
        failure no new batch starts, those in flight finish, then the failure is raised."""
        if not batches:
            return
        jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(batches)):
            jobs.put(i)
        results: queue.SimpleQueue[tuple[int, np.ndarray | None, BaseException | None]]
        results = queue.SimpleQueue()
        stop = threading.Event()
        workers = min(self.settings.concurrency, len(batches))

        def work() -> None:
            try:
                while not stop.is_set():
                    try:
                        i = jobs.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        results.put((i, self._embed_batch(list(batches[i]), stop), None))
                    except _Stopped:
                        return
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        results.put((i, None, exc))
            finally:
                results.put((-1, None, None))

        for _ in range(workers):
            threading.Thread(target=work, daemon=True, name=f"mdvdb-{self.name}").start()
        error: BaseException | None = None
        finished = 0
        try:
            while finished < workers:
                try:
                    i, vectors, exc = results.get(timeout=0.2)
                except queue.Empty:
                    # A timed wait, so that a Ctrl-C delivered meanwhile is raised at once.
                    continue
                if i < 0:
                    finished += 1
                elif exc is not None:
                    if error is None:
                        error = exc
                    stop.set()
                elif vectors is not None:
                    yield i, vectors
        finally:
            stop.set()  # a caller that stops early (Ctrl-C, its own error) ends the workers
        if error is not None:
            raise error

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            client.close()
        except Exception:  # noqa: BLE001 - a batch in flight (Ctrl-C): keep the exit 130
            pass

    # -- one batch --------------------------------------------------------------------------
    def _embed_batch(self, texts: list[str], stop: threading.Event) -> np.ndarray:
        pieces, owners, weights = split_long_texts(texts, self.max_input_tokens)
        rows = self._vectors(self._post(self.payload(pieces), stop), len(pieces))
        if len(pieces) != len(texts):
            rows = _weighted_means(rows, owners, weights, len(texts))
        return normalize_rows(rows)

    def _vectors(self, body: Any, expected: int) -> np.ndarray:
        try:
            raw = self.vectors_of(body)
            rows = np.array([_as_floats(v) for v in raw], dtype=np.float32)
        except (KeyError, TypeError, ValueError, IndexError):
            raise ProviderError(
                f"{self.name}: {self.public_url} did not answer with embeddings; "
                f"check {self.url_setting}"
            ) from None
        if rows.ndim != 2 or rows.shape[0] != expected:
            raise ProviderError(
                f"{self.name}: {self.public_url} returned {rows.shape[0] if rows.ndim else 0} "
                f"vectors for {expected} texts; check {self.url_setting}"
            )
        self._check_dimensions(rows.shape[1])
        return rows

    def _check_dimensions(self, got: int) -> None:
        """The configured size must match what came back (dimensions 0: the first answer
        decides)."""
        with self._lock:
            if self.dimensions == 0:
                self.dimensions = got
                return
        if got != self.dimensions:
            raise ProviderError(
                f"{self.name}: model {self.model!r} at {self.public_url} returns {got}-dimensional "
                f"vectors, {self.dimensions} expected: set MDVDB_EMBEDDING_DIMENSIONS={got} "
                "(0 takes what the model returns), or name a changed model in "
                "MDVDB_EMBEDDING_MODEL"
            )

    # -- HTTP with retries ------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                import httpx

                n = self.settings.concurrency
                # A TLS context is dear to build; a plain-http local server never needs one.
                tls = self.url.startswith("https:")
                self._client = httpx.Client(
                    verify=tls,
                    timeout=httpx.Timeout(self.settings.timeout),
                    limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                    headers={"User-Agent": "mdvdb"},
                )
            return self._client

    def _post(self, payload: dict[str, Any], stop: threading.Event) -> Any:
        attempts = self.settings.max_retries + 1
        problem = "no attempt made"
        for attempt in range(attempts):
            wait = self._pause_until - time.monotonic()
            if wait > 0 and stop.wait(wait):
                raise _Stopped
            if stop.is_set():
                raise _Stopped
            try:
                return self._post_once(payload)
            except _Retryable as exc:
                problem = exc.problem
                if attempt == attempts - 1:
                    break
                if exc.slow:
                    self._tell_slow(attempt, attempts)
                delay = self.settings.backoff(attempt)
                if exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                    with self._lock:
                        self._pause_until = max(self._pause_until, time.monotonic() + delay)
                if stop.wait(delay):
                    raise _Stopped from None
        raise ProviderError(
            f"{self.name}: {problem} at {self.public_url} ({attempts} attempts): check "
            f"{self.url_setting} or try again (an ingest resumes after the batches it kept)"
        )

    def _tell_slow(self, attempt: int, attempts: int) -> None:
        """One line on stderr as a request times out, once per attempt number: an endpoint
        that never answers is named while the run waits."""
        import sys

        with self._lock:
            if attempt in self._slow_told:
                return
            self._slow_told.add(attempt)
        # the process's own stderr: a stage runs with doit capturing sys.stderr
        stream = sys.__stderr__ or sys.stderr
        stream.write(
            f"mdvdb: {self.name}: {self.public_url} gave no answer within "
            f"{self.settings.timeout:g} s ({self.url_setting}); trying again "
            f"({attempt + 2} of {attempts} attempts)\n"
        )
        stream.flush()

    def _post_once(self, payload: dict[str, Any]) -> Any:
        import httpx

        client = self._http()
        try:
            response = client.post(self.url, json=payload, headers=self.headers())
        except (httpx.InvalidURL, httpx.UnsupportedProtocol):
            raise ProviderError(
                f"{self.name}: {self.public_url} is not a usable URL: check {self.url_setting}"
            ) from None
        except httpx.TimeoutException:
            raise _Retryable(f"no answer within {self.settings.timeout:g} s", slow=True) from None
        except httpx.ConnectError:
            raise _Retryable("cannot connect") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"connection lost ({type(exc).__name__})") from None
        status = response.status_code
        if 200 <= status < 300:
            try:
                return response.json()
            except ValueError:
                raise _Retryable("an answer that is not JSON") from None
        message = self._server_message(response)
        if status in RETRY_STATUSES or status >= 500:
            retry_after = retry_after_seconds(response.headers)
            if retry_after is not None and retry_after > LONGEST_RETRY_AFTER:
                raise ProviderError(
                    f"{self.name}: {self.public_url} asks to wait {retry_after:.0f} s "
                    f"(HTTP {status}); try again later"
                )
            raise _Retryable(f"HTTP {status}{message}", retry_after)
        raise ProviderError(
            f"{self.name}: HTTP {status}{message} from {self.public_url}: "
            f"{self.fix_for(status, message)}"
        )

    def _server_message(self, response: httpx.Response) -> str:
        """The server's own explanation, one line, short, with the key masked."""
        try:
            body = response.json()
            error = body.get("error", body) if isinstance(body, dict) else body
            if isinstance(error, dict):
                error = error.get("message") or error.get("detail") or error
            text = str(error)
        except ValueError:
            text = response.text
        text = " ".join(text.split())[:200]
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return f" ({text})" if text else ""


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """`retry-after-ms` (OpenAI), else `Retry-After` as seconds or an HTTP date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def split_long_texts(texts: list[str], max_tokens: int) -> tuple[list[str], list[int], list[int]]:
    """Pieces to send, the text each belongs to and its weight (tokens): a text over
    TOKEN_MARGIN * max_tokens tokens is cut at token boundaries, its vector the weighted mean
    of its pieces'. A text of fewer UTF-8 bytes than the budget is never tokenized."""
    budget = max(1, int(max_tokens * TOKEN_MARGIN))
    long_ones = [i for i, t in enumerate(texts) if len(t.encode("utf-8")) > budget]
    if not long_ones:
        return texts, list(range(len(texts))), [1] * len(texts)
    from kernel.providers.local import load_tokenizer

    encodings = load_tokenizer().encode_batch(
        [texts[i] for i in long_ones], add_special_tokens=False
    )
    cuts = {i: e.offsets for i, e in zip(long_ones, encodings, strict=True)}
    pieces: list[str] = []
    owners: list[int] = []
    weights: list[int] = []
    for i, text in enumerate(texts):
        offsets = cuts.get(i)
        if offsets is None or len(offsets) <= budget:
            pieces.append(text)
            owners.append(i)
            weights.append(max(1, len(offsets) if offsets else 1))
            continue
        for start in range(0, len(offsets), budget):
            window = offsets[start : start + budget]
            begin = 0 if start == 0 else window[0][0]
            end = len(text) if start + budget >= len(offsets) else offsets[start + budget][0]
            pieces.append(text[begin:end])
            owners.append(i)
            weights.append(len(window))
    return pieces, owners, weights


def _weighted_means(
    rows: np.ndarray, owners: list[int], weights: list[int], count: int
) -> np.ndarray:
    out = np.zeros((count, rows.shape[1]), dtype=np.float32)
    w = np.asarray(weights, dtype=np.float32)[:, None]
    np.add.at(out, np.asarray(owners), normalize_rows(rows) * w)
    return out


def _as_floats(value: Any) -> np.ndarray:
    """A vector given as a JSON list, or as base64 little-endian float32 (OpenAI's compact
    `encoding_format`)."""
    if isinstance(value, str):
        import base64

        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value, dtype=np.float32)
