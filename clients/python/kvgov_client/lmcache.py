"""Report an LMCache-style KV offload backend's chunk movements to kvgov.

An LMCache storage backend moves KV chunks between the GPU and its tiers:
it *offloads* a chunk (GPU to CPU, disk or a remote store), *restores* it
(retrieves it back into GPU memory) and *evicts* it from a tier. kvgov's
``LMCacheOperation`` vocabulary lowers those as ``kv_transfer`` directions
(src/core/transport_ops.h); :class:`LMCacheReporter` sends them as such,
with the residency fields that move kvgov's index:

===========  =============  ==============  ===========  =======================
operation    direction      from_tier       to_tier      residency on ``worker``
===========  =============  ==============  ===========  =======================
offload      ``offload``    ``hbm``         the backend  placed in the backend tier
restore      ``restore``    the backend     ``hbm``      placed in ``hbm``
evict        ``evict``      the backend     (absent)     removed from that tier
===========  =============  ==============  ===========  =======================

The span is named by ``token_ids`` from the start of the prompt through the
chunk's end (kvgov computes its own block keys, under the tenant's
``cache_salt``), so a report covers every full block of that prefix, as
LMCache's own prefix lookup does. kvgov indexes ``hbm``, ``dram`` and
``disk``; ``remote`` and other tiers count as ``unknown`` and earn no route
credit.

kvgov moves residency only for an owner the operator admits: start it with
``--admit lmcache=fleet`` (or the ``owner`` you give). Reports from any
other owner come back rejected and are counted in
:attr:`EmitterStats.rejected`.

The reporter sits in the backend's data path, so it never raises: events
go through a :class:`BufferedEmitter`, which batches them on a background
thread, drops them when its queue is full and counts every failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .client import Client
from .events import digest_token_ids, kv_transfer

__all__ = ["BACKEND_TIERS", "BufferedEmitter", "EmitterStats", "LMCacheReporter"]

_log = logging.getLogger("kvgov_client")

# LMCache backend class names and the kvgov tier each stores in. A name not
# listed is passed through as a kvgov tier spelling (``dram``, ``disk``, ...).
BACKEND_TIERS: dict[str, str] = {
    "LocalCPUBackend": "dram",
    "LocalDiskBackend": "disk",
    "GdsBackend": "disk",
    "RemoteBackend": "remote",
    "NixlBackend": "remote",
    "P2PBackend": "remote",
    "cpu": "dram",
    "gpu": "hbm",
}


@dataclass(frozen=True)
class EmitterStats:
    """Counters of a :class:`BufferedEmitter` (events, not batches)."""

    submitted: int
    accepted: int
    rejected: int
    failed: int  # in batches kvgov did not answer, or refused whole
    dropped: int  # the queue was full, or the emitter closed
    pending: int
    last_error: str


class BufferedEmitter:
    """Batches events to ``POST /v1/events`` on a background thread.

    :meth:`submit` never blocks on the network and never raises. A batch is
    sent when it reaches ``max_batch`` events or ``flush_interval`` seconds
    after its first event. Nothing is retried: a transfer report is a fact
    at one moment, and the element results are final. Call :meth:`close`
    (or use it as a context manager) to send what is queued.
    """

    def __init__(self, client: Client, *, max_batch: int = 256, flush_interval: float = 0.05,
                 max_queue: int = 10_000) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be at least 1")
        self._client = client
        self._max_batch = max_batch
        self._flush_interval = flush_interval
        self._max_queue = max_queue
        self._queue: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._in_flight = 0
        self._flushing = 0  # flush() callers waiting: send without waiting to fill
        self._counts = {"submitted": 0, "accepted": 0, "rejected": 0, "failed": 0, "dropped": 0}
        self._last_error = ""
        self._thread = threading.Thread(target=self._run, name="kvgov-emitter", daemon=True)
        self._thread.start()

    def submit(self, event: Mapping[str, Any]) -> None:
        """Queues one event; drops it (counted) when the queue is full or closed."""
        with self._cond:
            self._counts["submitted"] += 1
            if self._closed or len(self._queue) >= self._max_queue:
                self._counts["dropped"] += 1
                self._last_error = "closed" if self._closed else "queue full"
                return
            self._queue.append(dict(event))
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Sends what is queued now; ``True`` once nothing is queued or in flight."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._queue or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float | None = 10.0) -> None:
        """Sends what is queued, then stops the thread; later submits are dropped."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def __enter__(self) -> BufferedEmitter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def stats(self) -> EmitterStats:
        with self._cond:
            return EmitterStats(pending=len(self._queue) + self._in_flight,
                                last_error=self._last_error, **self._counts)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return  # closed and drained
                # Give a batch up to flush_interval to fill.
                deadline = time.monotonic() + self._flush_interval
                while (len(self._queue) < self._max_batch and not self._closed
                       and not self._flushing and (remaining := deadline - time.monotonic()) > 0):
                    self._cond.wait(remaining)
                batch = [self._queue.popleft()
                         for _ in range(min(self._max_batch, len(self._queue)))]
                self._in_flight = len(batch)
            self._send(batch)
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()

    def _send(self, batch: list[dict[str, Any]]) -> None:
        try:
            result = self._client.emit(batch)
        except Exception as error:  # never into the caller: counted instead
            with self._cond:
                self._counts["failed"] += len(batch)
                self._last_error = str(error)
            _log.debug("kvgov: a batch of %d events failed: %s", len(batch), error)
            return
        with self._cond:
            self._counts["accepted"] += result.accepted
            self._counts["rejected"] += len(result.rejected)
            if result.rejected:
                self._last_error = result.rejected[-1].error


class LMCacheReporter:
    """What an LMCache-like backend calls when a chunk moves.

    One reporter per engine worker (kvgov's worker id). Each call queues one
    ``kv_transfer`` event and returns at once; none of them raises. The
    chunk is ``token_ids[start:end]``; ``end`` defaults to the whole
    sequence and ``start`` to 0. ``tier`` is a kvgov tier (``dram``,
    ``disk``, ``remote``, ...) or an LMCache backend name from
    :data:`BACKEND_TIERS`. ``cache_salt`` is the tenant salt the engine
    request carried (the one ``/v1/route`` handed out).
    """

    def __init__(self, emitter: BufferedEmitter, worker: str, *, owner: str = "lmcache",
                 model_id: str | None = None, lora_name: str | None = None) -> None:
        self._emitter = emitter
        self.worker = worker
        self.owner = owner
        self.model_id = model_id
        self.lora_name = lora_name
        self.errors = 0  # reports that could not even be built (bad arguments)

    def on_offload(self, token_ids: Sequence[int], tier: str, *, start: int = 0,
                   end: int | None = None, cache_salt: str | None = None,
                   bytes_moved: int | None = None, chunk_hash: str | None = None,
                   ok: bool = True) -> None:
        """A chunk was stored from GPU memory into ``tier``."""
        self._report("offload", "hbm", tier, token_ids, start, end, cache_salt, bytes_moved,
                     chunk_hash, ok)

    def on_restore(self, token_ids: Sequence[int], tier: str, *, start: int = 0,
                   end: int | None = None, cache_salt: str | None = None,
                   bytes_moved: int | None = None, chunk_hash: str | None = None,
                   ok: bool = True) -> None:
        """A chunk was retrieved from ``tier`` back into GPU memory
        (``ok=False``: the lookup missed)."""
        self._report("restore", tier, "hbm", token_ids, start, end, cache_salt, bytes_moved,
                     chunk_hash, ok)

    def on_evict(self, token_ids: Sequence[int], tier: str, *, start: int = 0,
                 end: int | None = None, cache_salt: str | None = None,
                 chunk_hash: str | None = None) -> None:
        """A chunk was evicted from ``tier``."""
        self._report("evict", tier, None, token_ids, start, end, cache_salt, None,
                     chunk_hash, True)

    def _report(self, direction: str, from_tier: str, to_tier: str | None,
                token_ids: Sequence[int], start: int, end: int | None,
                cache_salt: str | None, bytes_moved: int | None, chunk_hash: str | None,
                ok: bool) -> None:
        try:
            prefix = list(token_ids if end is None else token_ids[:end])
            if not 0 <= start <= len(prefix):
                raise ValueError(f"start {start} is outside the chunk [0, {len(prefix)}]")
            event = kv_transfer(
                direction,
                chunk_hash if chunk_hash is not None else digest_token_ids(prefix),
                tokens=len(prefix) - start,
                model_id=self.model_id,
                from_tier=BACKEND_TIERS.get(from_tier, from_tier),
                to_tier=None if to_tier is None else BACKEND_TIERS.get(to_tier, to_tier),
                owner=self.owner,
                outcome="ok" if ok else "missed",
                bytes_moved=bytes_moved,
                worker=self.worker,
                token_ids=prefix,
                cache_salt=cache_salt or None,
                lora_name=self.lora_name,
            )
        except Exception as error:  # a bad call from the backend must not break it
            self.errors += 1
            _log.debug("kvgov: dropped an LMCache %s report: %s", direction, error)
            return
        self._emitter.submit(event)
