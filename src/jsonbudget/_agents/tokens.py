"""Token budgets on top of byte budgets.

Limits stay in bytes. A token budget is met by encoding with a byte budget, counting the
final output's tokens with the caller's counter, and tightening the byte budget until
the count fits. The only token count ever reported is one that was measured.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import math
import operator
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, Unpack, runtime_checkable

from .._encode.encoder import (
    Encoded,
    EncodeOptions,
    Encoder,
    Stream,
    Truncation,
    encode_replaying,
)
from .._limits import MAX_LIMIT, MIN_BYTES, Limits, check_int
from ..errors import LimitError, TokenizerUnavailable

__all__ = [
    "DEFAULT_BYTES_PER_TOKEN",
    "MAX_FIT_ROUNDS",
    "EstimatedTokenCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenFitted",
    "TokenFitter",
    "fit_tokens",
]

#: English prose averages about four UTF-8 bytes per token in OpenAI's and Anthropic's
#: tokenizers. JSON punctuation, digits and non-Latin scripts run denser (2-3), so an
#: estimate from this figure is an estimate, never a measurement.
DEFAULT_BYTES_PER_TOKEN: Final = 4.0
#: The range `EstimatedTokenCounter` takes its bytes per token from.
_MIN_BYTES_PER_TOKEN: Final = 0.25
_MAX_BYTES_PER_TOKEN: Final = 64
#: The most encodes one `fit_tokens` call performs.
MAX_FIT_ROUNDS: Final = 16
#: Without a byte cap, the first try allows this many bytes per token of budget: more
#: than any common tokenizer averages, so the first output rarely under-fills the budget.
_START_BYTES_PER_TOKEN: Final = 8
#: Aim a little under the ratio's prediction so the next try usually fits.
_RATIO_MARGIN: Final = 0.97
#: Stop refining once the fitting and the failing byte budgets are this close.
_CLOSE_ENOUGH: Final = 0.02
#: A count at or past this is written as "over" it in a message.
_SHOWN_COUNT_MAX: Final = 10**15
#: The keywords `TokenFitter` passes on to `encode`.
_ENCODE_OPTIONS: Final = frozenset(EncodeOptions.__annotations__)


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts the tokens of a text."""

    def count(self, text: str) -> int: ...


class EstimatedTokenCounter:
    """An estimate: ``ceil(utf8_bytes / bytes_per_token)``. Not a tokenizer.

    Use it where no tokenizer is at hand and a rough budget will do; the default of 4
    bytes per token suits English prose and overestimates nothing else reliably.
    """

    __slots__ = ("bytes_per_token",)

    def __init__(self, *, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN) -> None:
        if (
            type(bytes_per_token) not in (int, float)
            or not math.isfinite(bytes_per_token)
            or not _MIN_BYTES_PER_TOKEN <= bytes_per_token <= _MAX_BYTES_PER_TOKEN
        ):
            raise LimitError(
                "bytes_per_token",
                bytes_per_token,
                f"must be a number in [{_MIN_BYTES_PER_TOKEN}, {_MAX_BYTES_PER_TOKEN}]",
            )
        self.bytes_per_token = float(bytes_per_token)

    def count(self, text: str) -> int:
        """Estimated tokens of *text* (0 for the empty string).

        A lone surrogate, which has no UTF-8 form, counts as 3 bytes: the U+FFFD the
        encoder writes in its place takes as many.
        """
        return math.ceil(len(text.encode("utf-8", "surrogatepass")) / self.bytes_per_token)


# tiktoken caches each BPE file under the sha1 of its URL; these are the public ones.
_TIKTOKEN_URLS: Final = {
    name: f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    for name in ("o200k_base", "cl100k_base", "p50k_base", "r50k_base")
}
#: The sha256 tiktoken expects of each file (``expected_hash`` in
#: ``tiktoken_ext/openai_public.py``, unchanged from 0.6 to 0.14). tiktoken deletes a
#: cached file that does not match and downloads it again, so jsonbudget checks first.
_TIKTOKEN_SHA256: Final = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
}


def _tiktoken_cache_file(name: str) -> Path | None:
    """Where tiktoken would find *name* offline, or None if it would have to download."""
    url = _TIKTOKEN_URLS.get(name)
    if url is None:
        return None
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        directory = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        directory = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        directory = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not directory:  # an empty cache dir disables tiktoken's cache: it would download
        return None
    path = Path(directory) / hashlib.sha1(url.encode()).hexdigest()
    return path if path.is_file() else None


def _tiktoken_expected_hashes() -> dict[str, str]:
    """The sha256 the installed tiktoken checks each public file against, by URL.

    Read from its ``openai_public`` plugin's source (the hashes are literals in the
    calls to ``load_tiktoken_bpe``, not module attributes), never by running it: its
    functions load the files. Where the plugin cannot be read (no tiktoken, no source
    shipped), the hashes of tiktoken 0.14 are used.
    """
    hashes = {_TIKTOKEN_URLS[name]: sha256 for name, sha256 in _TIKTOKEN_SHA256.items()}
    try:
        spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    except ImportError:  # no tiktoken_ext package at all
        return hashes
    if spec is None or spec.origin is None:
        return hashes
    try:
        tree = ast.parse(Path(spec.origin).read_bytes())
    except (OSError, SyntaxError, ValueError):
        # A compiled-only install, or a source this Python cannot read: the constants.
        return hashes
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        url = node.args[0]
        for keyword in node.keywords:
            if (
                keyword.arg == "expected_hash"
                and isinstance(url, ast.Constant)
                and isinstance(url.value, str)
                and isinstance(keyword.value, ast.Constant)
                and isinstance(keyword.value.value, str)
            ):
                hashes[url.value] = keyword.value.value
    return hashes


def _check_tiktoken_file(name: str, path: Path, expected: Mapping[str, str]) -> None:
    """Raise `TokenizerUnavailable` naming *path* unless its sha256 is the one tiktoken
    expects for *name*: tiktoken would delete it and download the file again."""
    sha256 = expected.get(_TIKTOKEN_URLS[name])
    if sha256 is None:
        return  # no hash for it: tiktoken checks none either, and reads the file as is
    try:
        with path.open("rb") as file:
            actual = hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as exc:
        raise TokenizerUnavailable(
            f"tiktoken encoding {name!r}: its cached file {str(path)!r} cannot be read ({exc})"
        ) from exc
    if actual != sha256:
        raise TokenizerUnavailable(
            f"tiktoken encoding {name!r}: its cached file {str(path)!r} is corrupt or partial "
            f"(sha256 {actual}, expected {sha256}); tiktoken would delete it and download it "
            "again, and jsonbudget never downloads: replace the file, or load the encoding "
            "yourself and pass the object"
        )


class TiktokenCounter:
    """Exact counts with tiktoken, loaded lazily and only from its offline cache.

    *encoding* is a tiktoken encoding name (``"o200k_base"``, ``"cl100k_base"``, ...) or
    an encoding object already loaded by the caller. Nothing is ever downloaded: if
    tiktoken is not installed, or the named encoding is not in tiktoken's local cache,
    the first `count` raises `TokenizerUnavailable` saying which.
    """

    __slots__ = ("_encoding", "_options", "name")

    def __init__(self, encoding: str | Any = "o200k_base") -> None:
        self._options: dict[str, Any] = {}
        if isinstance(encoding, str):
            self.name = encoding
            self._encoding: Any = None
        elif callable(getattr(encoding, "encode", None)):
            self.name = str(getattr(encoding, "name", type(encoding).__name__))
            self._encoding = encoding
            self._options = _encode_options(encoding)
        else:
            raise LimitError(
                "encoding",
                encoding,
                f"must be a name or an encoding, not {type(encoding).__name__}",
            )

    def _load(self) -> Any:
        try:
            # An optional dependency, imported on first use only.
            tiktoken = importlib.import_module("tiktoken")
        except ImportError as exc:
            raise TokenizerUnavailable(
                "tiktoken is not installed; install it, or pass a TokenCounter of your own"
            ) from exc
        path = _tiktoken_cache_file(self.name)
        if path is None:
            raise TokenizerUnavailable(
                f"tiktoken encoding {self.name!r} is not in tiktoken's local cache and "
                "jsonbudget never downloads; load it yourself and pass the encoding object"
            )
        _check_tiktoken_file(self.name, path, _tiktoken_expected_hashes())
        return tiktoken.get_encoding(self.name)

    def count(self, text: str) -> int:
        """The exact token count of *text* under this encoding."""
        if self._encoding is None:
            encoding = self._load()
            self._options = _encode_options(encoding)
            self._encoding = encoding
        return len(self._encoding.encode(text, **self._options))


def _encode_options(encoding: Any) -> dict[str, Any]:
    """The keywords *encoding*'s ``encode`` is called with: tiktoken's, if it takes them.

    tiktoken raises on special-token text (``<|endoftext|>``) unless told otherwise; in
    data it is data, not a control token, so it is counted as text. Other tokenizers'
    ``encode(text)`` takes no such keyword and is called with the text alone.
    """
    try:
        parameters = inspect.signature(encoding.encode).parameters
    except (TypeError, ValueError):
        # No signature to read (some C extensions): called with the text alone.
        return {}
    return {"disallowed_special": ()} if "disallowed_special" in parameters else {}


@dataclass(frozen=True, slots=True)
class TokenFitted:
    """Bounded JSON that meets a token budget, with the token count as measured."""

    data: bytes
    tokens: int
    max_bytes: int
    complete: bool
    truncations: tuple[Truncation, ...]
    rounds: int


class _Search:
    """Per-call state of the byte-budget search."""

    __slots__ = (
        "best",
        "best_bytes",
        "failed_bytes",
        "failed_output",
        "failed_tokens",
        "rounds",
        "streams",
    )

    def __init__(self) -> None:
        self.streams: dict[int, Stream] = {}  # the value's iterators, read once for all rounds
        self.best: tuple[Encoded, int] | None = None
        self.best_bytes = 0
        self.failed_bytes: int | None = None  # the smallest budget that counted too many
        self.failed_output = 0  # the bytes that budget gave, often far fewer
        self.failed_tokens = 0
        self.rounds = 0


def _check_keywords(caller: str, encode_options: Mapping[str, object]) -> None:
    """Refuse a keyword `encode` does not take, naming *caller*, not `encode`: raised at
    the first fit, it would read as a bug in jsonbudget's own call."""
    unknown = sorted(set(encode_options) - _ENCODE_OPTIONS)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")


def _check_counter(caller: str, counter: object) -> None:
    """Refuse a counter class: ``count`` is then an unbound function, which passes the
    ``callable`` check and fails only at the first count, after an encode."""
    if isinstance(counter, type):
        raise TypeError(
            f"{caller}() counter must be a counter instance, not the class "
            f"{counter.__name__}: pass {counter.__name__}()"
        )


def _integral_count(tokens: object) -> int:
    """A counter's count that is not an ``int`` as one: any integer (an int subclass,
    NumPy's ``int64``: what has ``__index__``) counts; a bool, a float or None is no count."""
    wrong = f"must be an integer, not {type(tokens).__name__}"
    if isinstance(tokens, bool):  # an int subclass, but True as a count is a mistake
        raise LimitError("token count", tokens, wrong)
    try:
        return operator.index(tokens)  # type: ignore[arg-type]
    except TypeError:
        raise LimitError("token count", tokens, wrong) from None


def _check_counts(counter: object) -> None:
    """Refuse a counter without a usable ``count`` method."""
    if isinstance(counter, str):
        # Its count(x) counts occurrences of x: every budget would "fit" at 0 tokens.
        raise LimitError(
            "counter",
            counter,
            "must be a token counter, not an encoding's name: TiktokenCounter('o200k_base')",
        )
    if isinstance(counter, bytes | bytearray | list | tuple):
        # The same count(x) as a str's, but the hint to name an encoding would not fit.
        raise LimitError(
            "counter",
            counter,
            f"must be a token counter, not {type(counter).__name__}: its count(x) counts "
            "occurrences of x",
        )
    if not callable(getattr(counter, "count", None)):
        raise LimitError("counter", counter, "must have a count(text) method")


def _shown_count(count: int) -> str:
    """A counter's count for a message, bounded: a counter may return any int, and past
    4,300 digits Python refuses to write one (a `ValueError` of its own)."""
    return str(count) if count < _SHOWN_COUNT_MAX else f"over {_SHOWN_COUNT_MAX:,}"


class TokenFitter:
    """A configured token budget: encode within bytes, count, tighten until it fits."""

    __slots__ = ("counter", "encode_options", "limits", "max_tokens")

    def __init__(
        self,
        *,
        max_tokens: int,
        counter: TokenCounter,
        limits: Limits | None = None,
        **encode_options: Unpack[EncodeOptions],
    ) -> None:
        _check_keywords("TokenFitter", encode_options)
        self.max_tokens = check_int("max_tokens", max_tokens, minimum=1)
        _check_counter("TokenFitter", counter)
        _check_counts(counter)
        if limits is not None and not isinstance(limits, Limits):
            raise LimitError("limits", limits, f"must be a Limits, not {type(limits).__name__}")
        cap = encode_options.get("max_bytes")
        if cap is not None:
            check_int("max_bytes", cap, minimum=MIN_BYTES)
        # Every round encodes with these options at its own byte budget: an encoder made
        # now refuses a bad mode, cap or `default` before any work (guarantee 6).
        probe: EncodeOptions = {**encode_options}
        if limits is None and cap is None:
            probe["max_bytes"] = MIN_BYTES
        Encoder(limits, **probe)
        self.counter = counter
        self.limits = limits
        self.encode_options = encode_options

    def _cap(self) -> int | None:
        # max_bytes= overrides limits.max_bytes, as every keyword cap overrides its field
        # of limits in encode, whose options these are: the fitter searches below the
        # budget encode(obj, limits, **encode_options) would use.
        cap = self.encode_options.get("max_bytes")
        if cap is not None:
            return int(cap)
        return None if self.limits is None else self.limits.max_bytes

    def _try(self, obj: Any, budget: int, search: _Search) -> bool:
        search.rounds += 1
        options: EncodeOptions = {**self.encode_options, "max_bytes": budget}
        # One value encoded at several budgets: an iterator in it is read once, and what
        # each round pulls is given again to the next (`encode_replaying`).
        out = encode_replaying(Encoder(self.limits, **options), obj, search.streams)
        tokens = self.counter.count(out.data.decode("utf-8"))
        if type(tokens) is not int:
            tokens = _integral_count(tokens)
        if tokens < 0:
            check_int("token count", tokens, minimum=0)  # raises: what is wrong with it
        # Any count past max_tokens, however large, is text that does not fit.
        if tokens <= self.max_tokens:
            if search.best is None or budget > search.best_bytes:
                search.best = (out, tokens)
                search.best_bytes = budget
            return True
        if search.failed_bytes is None or budget < search.failed_bytes:
            search.failed_bytes = budget
            search.failed_output = len(out.data)
            search.failed_tokens = tokens
        return False

    def fit(self, obj: Any) -> TokenFitted:
        """Encode *obj* so its output counts at most ``max_tokens`` tokens.

        Raises `LimitError` when even the smallest valid output counts too many tokens.
        """
        # `counter` and `max_tokens` are plain attributes: ones set after construction are
        # checked here, before any encode, as the constructor checks them.
        check_int("max_tokens", self.max_tokens, minimum=1)
        _check_counter("TokenFitter.fit", self.counter)
        _check_counts(self.counter)
        cap = self._cap()
        start = cap if cap is not None else self.max_tokens * _START_BYTES_PER_TOKEN
        start = min(max(start, MIN_BYTES), MAX_LIMIT)
        search = _Search()
        if not self._try(obj, start, search):
            self._tighten(obj, search)
        if search.best is None and search.failed_bytes != MIN_BYTES:
            self._try(obj, MIN_BYTES, search)  # out of rounds: the last resort
        if search.best is None:
            raise LimitError(
                "max_tokens",
                self.max_tokens,
                f"even a {MIN_BYTES}-byte output counts {_shown_count(search.failed_tokens)} "
                "tokens",
            )
        out, tokens = search.best
        return TokenFitted(
            data=out.data,
            tokens=tokens,
            max_bytes=search.best_bytes,
            complete=out.complete,
            truncations=out.truncations,
            rounds=search.rounds,
        )

    def _tighten(self, obj: Any, search: _Search) -> None:
        # First by the measured ratio (usually one or two rounds), then by bisection
        # between the largest budget that fitted and the smallest that did not.
        while search.rounds < MAX_FIT_ROUNDS:
            failed = search.failed_bytes
            assert failed is not None
            if failed <= MIN_BYTES:
                return
            if search.best is None:
                # Scale what the budget gave, not the budget: a whole object a little
                # over the tokens may be far smaller than the budget that held it.
                out = search.failed_output
                guess = int(out * self.max_tokens / search.failed_tokens * _RATIO_MARGIN)
                budget = max(MIN_BYTES, min(guess, failed - 1))
            else:
                low = search.best_bytes
                if failed - low <= max(1, int(failed * _CLOSE_ENOUGH)):
                    return
                budget = (low + failed) // 2
            self._try(obj, budget, search)


def fit_tokens(
    obj: Any,
    *,
    max_tokens: int,
    counter: TokenCounter,
    limits: Limits | None = None,
    **encode_options: Unpack[EncodeOptions],
) -> TokenFitted:
    """One-call form of `TokenFitter.fit`; *encode_options* go to `encode`."""
    _check_keywords("fit_tokens", encode_options)
    _check_counter("fit_tokens", counter)
    fitter = TokenFitter(max_tokens=max_tokens, counter=counter, limits=limits, **encode_options)
    return fitter.fit(obj)
