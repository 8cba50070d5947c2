"""The HTTP client for kvgov's API (docs/formats/*-api.md).

Every call is one HTTP request; there is no connection state, so a
:class:`Client` may be shared between threads. A non-2xx answer raises
:class:`KvgovError` with kvgov's ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import ssl
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .events import _check_int, _check_ints, _check_str

__all__ = [
    "Certificate",
    "Client",
    "EmitResult",
    "KvgovError",
    "Rejection",
    "RouteDecision",
    "Verdict",
    "journal_row_hash",
    "metric_value",
    "parse_metrics",
    "verify_certificate_with_cli",
]


class KvgovError(Exception):
    """An answer other than 2xx, or no answer at all.

    ``status`` is the HTTP status (0 when kvgov could not be reached or
    did not answer in time: ``code`` is then ``unavailable``). ``code`` and
    ``message`` come from kvgov's error body; ``body`` is the whole parsed
    body, which for a ``503`` from ``/v1/route`` also holds the candidates
    and why each was ineligible.
    """

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


@dataclass(frozen=True)
class Rejection:
    """One element ``POST /v1/events`` rejected: its index and ``$.events[I]...`` error."""

    index: int
    error: str


@dataclass(frozen=True)
class EmitResult:
    """What ``POST /v1/events`` answered: elements are accepted or rejected one by one."""

    accepted: int
    rejected: list[Rejection] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    """A route verdict: ``hit``, or ``miss`` / ``quarantine`` / ... with a reason."""

    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.reason}" if self.reason else self.kind


@dataclass(frozen=True)
class RouteDecision:
    """The answer of ``POST /v1/route`` (docs/formats/route-api.md).

    Attach ``cache_salt`` to the engine request, and call
    :meth:`Client.done` with ``decision_id`` when the request finishes.
    """

    decision_id: str
    worker: str
    cache_salt: str
    prompt_blocks: int
    overlap_blocks: int
    verdict: Verdict
    candidates: list[dict[str, Any]]


@dataclass(frozen=True)
class Certificate:
    """A deletion certificate: the bytes kvgov served, and their parsed form."""

    text: str
    data: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.data["certificate_id"])


class Client:
    """A client of one kvgov daemon.

    ``base_url`` is e.g. ``http://127.0.0.1:8787``; ``token`` is a bearer
    secret from ``kvgov token add`` (sent as ``Authorization: Bearer``).
    Environment proxies are not used. ``ssl_context`` serves ``https``
    URLs (kvgov ``--tls-cert``).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 10.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        _check_str("base_url", base_url)
        if token is not None:
            _check_str("token", token)
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, token={'set' if self.token else None})"

    # -- transport -------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None,
                 query: Mapping[str, Any] | None = None) -> tuple[int, str]:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        # An explicit empty body on a bare POST: kvgov (cpp-httplib) answers
        # a POST without Content-Length with a 400 that has no error body.
        data: bytes | None = b"" if method == "POST" else None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            text = error.read().decode("utf-8", "replace")
            error.close()
            raise _error_from(error.code, text, error.reason) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", error)
            raise KvgovError(0, "unavailable", f"{method} {url}: {reason}") from error

    def _json(self, method: str, path: str, body: Any = None,
              query: Mapping[str, Any] | None = None) -> Any:
        status, text = self._request(method, path, body, query)
        return _parse(status, text, f"{method} {path}")

    # -- events -----------------------------------------------------------

    def emit(self, events: Iterable[Mapping[str, Any]]) -> EmitResult:
        """``POST /v1/events``. Build elements with :mod:`kvgov_client.events`.

        A rejected element does not raise: it is listed in the result. Only
        a whole-body problem (400, 413, 415) or an auth failure raises.
        """
        batch = [dict(event) for event in events]
        answer = self._json("POST", "/v1/events", {"events": batch})
        return EmitResult(
            accepted=int(answer["accepted"]),
            rejected=[Rejection(int(r["index"]), str(r["error"])) for r in answer["rejected"]],
        )

    # -- routing ----------------------------------------------------------

    def route(self, model: str, token_ids: Sequence[int], tenant: str | None = None,
              workers: Sequence[str] | None = None, *,
              lora_name: str | None = None) -> RouteDecision:
        """``POST /v1/route``: the worker for a prompt, and the tenant's cache salt.

        Raises :class:`KvgovError` ``503`` (``unavailable``) when no worker
        is eligible (``error.body["candidates"]`` says why) and ``404`` when
        no worker serves ``model``.
        """
        _check_str("model", model)
        body: dict[str, Any] = {"model": model, "token_ids": _check_ints("token_ids", token_ids)}
        if tenant is not None:
            _check_str("tenant", tenant)
            body["tenant"] = tenant
        if lora_name is not None:
            _check_str("lora_name", lora_name)
            body["lora_name"] = lora_name
        if workers is not None:
            if isinstance(workers, str):
                raise TypeError("workers: want a sequence of str, got str")
            body["workers"] = list(workers)
            for i, worker in enumerate(body["workers"]):
                _check_str(f"workers[{i}]", worker)
        answer = self._json("POST", "/v1/route", body)
        verdict = answer.get("verdict", {})
        return RouteDecision(
            decision_id=answer["decision_id"],
            worker=answer["worker"],
            cache_salt=answer["cache_salt"],
            prompt_blocks=int(answer["prompt_blocks"]),
            overlap_blocks=int(answer["overlap_blocks"]),
            verdict=Verdict(verdict.get("kind", ""), verdict.get("reason", "")),
            candidates=list(answer.get("candidates", [])),
        )

    def done(self, decision_id: str) -> bool:
        """``POST /v1/route/{id}/done``: releases the decision's load.

        Raises ``404`` when the decision is unknown or already released.
        """
        _check_str("decision_id", decision_id)
        quoted = urllib.parse.quote(decision_id, safe="")
        return bool(self._json("POST", f"/v1/route/{quoted}/done")["released"])

    # -- governance -------------------------------------------------------

    @staticmethod
    def _span(body: dict[str, Any], token_ids: Sequence[int] | None, tenant: str | None,
              lora_name: str | None, worker: str | None, block_hash: int | None,
              group_idx: int | None) -> dict[str, Any]:
        if token_ids is not None:
            body["token_ids"] = _check_ints("token_ids", token_ids)
        for name, value in (("tenant", tenant), ("lora_name", lora_name), ("worker", worker)):
            if value is not None:
                _check_str(name, value)
                body[name] = value
        if block_hash is not None:
            _check_int("block_hash", block_hash, (0, 2**64 - 1))
            body["block_hash"] = block_hash
        if group_idx is not None:
            _check_int("group_idx", group_idx)
            body["group_idx"] = group_idx
        return body

    def quarantine(self, model: str, reason: str, *, token_ids: Sequence[int] | None = None,
                   tenant: str | None = None, lora_name: str | None = None,
                   worker: str | None = None, block_hash: int | None = None,
                   group_idx: int | None = None, invalidate: bool = False) -> dict[str, Any]:
        """``POST /v1/quarantine``: name the span by ``token_ids`` (with
        ``tenant`` / ``lora_name``) or by ``worker`` + ``block_hash``.

        Returns ``{"id", "blocks", "reason"}``, plus ``"invalidation"``
        (``{"id", "state"}``) with ``invalidate=True``.
        """
        _check_str("model", model)
        _check_str("reason", reason)
        body = self._span({"model": model, "reason": reason}, token_ids, tenant, lora_name,
                          worker, block_hash, group_idx)
        if invalidate:
            body["invalidate"] = True
        return dict(self._json("POST", "/v1/quarantine", body))

    def quarantines(self) -> list[dict[str, Any]]:
        """``GET /v1/quarantines``."""
        return list(self._json("GET", "/v1/quarantines")["quarantines"])

    def invalidate(self, model: str, reason: str, *, token_ids: Sequence[int] | None = None,
                   tenant: str | None = None, lora_name: str | None = None,
                   worker: str | None = None, block_hash: int | None = None,
                   group_idx: int | None = None, scope: str | None = None,
                   flush: bool = False) -> dict[str, Any]:
        """``POST /v1/invalidations``: a deletion directive for a span
        (``token_ids``), one engine block (``worker`` + ``block_hash``), a
        ``scope`` (``"worker"`` with ``worker``, or ``"model"``), or a
        tenant revocation (``scope="tenant"`` with ``tenant``).

        A tenant revocation takes every block of the tenant's salts so far,
        of ``model``, or of every model when ``model`` is ``""``; it names
        no span, worker, LoRA or group. From the moment kvgov records it
        (``unreachable_since_ms`` in the answer) no salt kvgov forwards
        reaches those blocks; the directive is witnessed when the engines'
        own streams show the ones still resident (``residue``) gone, and
        its certificate carries both moments in ``revocation``. Without
        ``flush`` nobody is called and the residue goes by natural
        eviction; ``flush=True`` (scope ``"tenant"`` only, else kvgov
        answers 400) also resets each owner's whole prefix cache, every
        tenant's on it (docs/formats/governance-api.md).

        Returns ``{"id", "state", "owners"}`` (a revocation adds
        ``unreachable_since_ms`` and ``residue``); follow it with
        :meth:`wait_for_invalidation`.
        """
        _check_str("model", model)
        _check_str("reason", reason)
        if not isinstance(flush, bool):
            raise TypeError(f"flush: want bool, got {type(flush).__name__}")
        body = self._span({"model": model, "reason": reason}, token_ids, tenant, lora_name,
                          worker, block_hash, group_idx)
        if scope is not None:
            _check_str("scope", scope)
            body["scope"] = scope
        if flush:
            body["flush"] = True
        return dict(self._json("POST", "/v1/invalidations", body))

    def invalidation(self, invalidation_id: str) -> dict[str, Any]:
        """``GET /v1/invalidations/{id}``: the directive, its state and owners."""
        _check_str("invalidation_id", invalidation_id)
        quoted = urllib.parse.quote(invalidation_id, safe="")
        return dict(self._json("GET", f"/v1/invalidations/{quoted}"))

    def wait_for_invalidation(self, invalidation_id: str,
                              states: Sequence[str] = ("certified", "failed"),
                              timeout: float = 60.0, poll_interval: float = 0.05
                              ) -> dict[str, Any]:
        """Polls the directive until its ``state`` is one of ``states``.

        Returns the directive; raises :class:`TimeoutError` (carrying the
        last state seen) when ``timeout`` seconds pass first.
        """
        deadline = time.monotonic() + timeout
        while True:
            directive = self.invalidation(invalidation_id)
            if directive.get("state") in states:
                return directive
            if time.monotonic() >= deadline:
                raise TimeoutError(f"invalidation {invalidation_id} still "
                                   f"{directive.get('state')!r} after {timeout} s")
            time.sleep(poll_interval)

    def certificate(self, certificate_id: str) -> Certificate:
        """``GET /v1/certificates/{id}``: the signed certificate, byte for byte."""
        _check_str("certificate_id", certificate_id)
        quoted = urllib.parse.quote(certificate_id, safe="")
        status, text = self._request("GET", f"/v1/certificates/{quoted}")
        return Certificate(text=text, data=_parse(status, text, "GET /v1/certificates"))

    def issuer(self) -> dict[str, Any]:
        """``GET /v1/issuer``: ``{"algorithm", "key_id", "public_key"}``; pin the key."""
        return dict(self._json("GET", "/v1/issuer"))

    def set_draining(self, worker: str, draining: bool = True) -> dict[str, Any]:
        """``POST`` (or, with ``draining=False``, ``DELETE``) ``/v1/workers/{id}/drain``."""
        _check_str("worker", worker)
        quoted = urllib.parse.quote(worker, safe="")
        return dict(self._json("POST" if draining else "DELETE", f"/v1/workers/{quoted}/drain"))

    # -- reads ------------------------------------------------------------

    def healthy(self) -> bool:
        """``GET /healthz`` (needs no token); ``False`` when kvgov does not answer ok."""
        try:
            return bool(self._json("GET", "/healthz").get("status") == "ok")
        except KvgovError:
            return False

    def workers(self) -> list[dict[str, Any]]:
        """``GET /v1/workers``, sorted by id."""
        return list(self._json("GET", "/v1/workers")["workers"])

    def leases(self) -> list[dict[str, Any]]:
        """``GET /v1/leases``."""
        return list(self._json("GET", "/v1/leases")["leases"])

    def journal(self, since: int = 1, limit: int = 100) -> dict[str, Any]:
        """``GET /v1/journal``: ``{"rows", "head_seq"}`` plus ``"next_since"``
        while more rows follow."""
        _check_int("since", since, (1, 2**64 - 1))
        _check_int("limit", limit, (1, 1000))
        return dict(self._json("GET", "/v1/journal", query={"since": since, "limit": limit}))

    def config(self) -> dict[str, Any]:
        """``GET /v1/config`` (admin)."""
        return dict(self._json("GET", "/v1/config"))

    def metrics_text(self) -> str:
        """``GET /metrics``: Prometheus text; see :func:`metric_value`."""
        return self._request("GET", "/metrics")[1]


def _parse(status: int, text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise KvgovError(status, "bad_response",
                         f"{what}: answer is not JSON: {text[:200]!r}") from None


def _error_from(status: int, text: str, reason: Any) -> KvgovError:
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return KvgovError(status, str(error.get("code", "")), str(error.get("message", "")),
                          body)
    # Not kvgov's error shape (a proxy, or the HTTP library's own answer).
    return KvgovError(status, f"http_{status}", text[:200] or str(reason), body)


# -- Prometheus text -------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPE = re.compile(r'\\[\\"n]')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    def replace(match: re.Match[str]) -> str:
        return _UNESCAPE[match.group(0)]

    return _ESCAPE.sub(replace, value)


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: ``(name, labels, value)``."""
    samples: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = {key: _unescape(value) for key, value in _LABEL.findall(match.group(2) or "")}
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 if none).

    ``metric_value(c.metrics_text(), "kvgov_cache_events_total", source="provider")``
    """
    return sum(value for sample, sample_labels, value in parse_metrics(text)
               if sample == name and all(sample_labels.get(k) == v for k, v in labels.items()))


# -- the journal, offline -------------------------------------------------

def journal_row_hash(row: Mapping[str, Any]) -> str:
    """Recomputes a journal row's ``hash`` (docs/formats/journal.md section 3)
    from a ``GET /v1/journal`` row, so a chain can be checked client-side:
    each row's ``prev_hash`` is its predecessor's ``hash``, and
    ``payload_digest`` is the SHA-256 of ``payload``. Rows of format 2 hash
    their ``actor`` and ``origin`` too; rows of format 1 have neither.
    """
    def frame(data: bytes) -> bytes:
        return struct.pack(">Q", len(data)) + data

    version = int(row.get("format_version", 1))
    if version not in (1, 2):
        raise ValueError(f"journal row format {version} is not one this client knows (1, 2)")
    attributed = ("actor", "origin") if version == 2 else ()
    h = hashlib.sha256(frame(b"kvgov.journal.row.v%d" % version))
    h.update(frame(struct.pack(">I", version)))
    h.update(frame(struct.pack(">Q", row["seq"])))
    h.update(frame(struct.pack(">q", row["time_ms"])))
    for name in ("kind", "subject", *attributed, "payload_digest", "prev_hash"):
        h.update(frame(str(row[name]).encode()))
    return h.hexdigest()


# -- certificates, offline -------------------------------------------------

def verify_certificate_with_cli(certificate_json_text: str,
                                issuer_key_hex: str | Sequence[str],
                                kvgov_binary: str = "kvgov", *,
                                data_dir: str | None = None,
                                timeout: float = 60.0) -> tuple[bool, str]:
    """Runs ``kvgov cert verify FILE --issuer-key HEX`` on the certificate.

    Returns ``(ok, output)``: ``ok`` is the verifier's exit status 0 (every
    check that ran holds), ``output`` its report, one line per check. Pin
    ``issuer_key_hex`` out of band (``GET /v1/issuer``): the certificate's
    own key proves nothing. ``data_dir`` also checks the journal anchor
    (only while no daemon runs on it).
    """
    _check_str("certificate_json_text", certificate_json_text)
    keys = [issuer_key_hex] if isinstance(issuer_key_hex, str) else list(issuer_key_hex)
    fd, path = tempfile.mkstemp(prefix="kvgov-cert-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(certificate_json_text)
        args = [kvgov_binary, "cert", "verify", path]
        for key in keys:
            _check_str("issuer_key_hex", key)
            args += ["--issuer-key", key]
        if data_dir is not None:
            args += ["--data-dir", data_dir]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return False, f"{kvgov_binary} cert verify: {error}"
        return done.returncode == 0, done.stdout + done.stderr
    finally:
        os.unlink(path)
