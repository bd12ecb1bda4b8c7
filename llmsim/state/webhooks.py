"""Webhooks: each background response that ends sends OpenAI's webhook event to each
`webhook_urls` URL, signed as Standard Webhooks sign (`openai`'s `webhooks.unwrap` checks it).

Invariants: a delivery is kept in the store's outbox before it is first sent and leaves it
once a 2xx answers or its attempts are used up, so an event is delivered at least once (a
restarted server sends what the outbox holds); retries keep the webhook-id, back off
doubling and are signed again; no request waits for a delivery. Body and headers are
templates/webhooks.yaml's. The story: docs/internals.md#statewebhooks.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import random
import time

import httpx
import orjson

from llmsim.errors import ConfigError
from llmsim.state.store import ACTIVE, Store

log = logging.getLogger("llmsim")
SECRET_PREFIX = "whsec_"
MAX_BACKOFF_S = 60.0       # the longest wait between two tries of a delivery
TIMEOUT_S = 10.0           # an attempt not answered by then failed


def signing_key(secret: str | None) -> bytes:
    """The HMAC key of a secret: the base64 key after `whsec_`, else the secret's bytes (as
    the openai SDK reads it)."""
    if not secret:
        raise ConfigError("webhook_secret: webhook_urls need a signing secret (--webhook-secret "
                          "whsec_<base64 key>)")
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    try:
        return base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"webhook_secret: the key after {SECRET_PREFIX} is not valid base64") from None


def signature(key: bytes, webhook_id: str, timestamp: str, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class Webhooks:
    """The webhook deliveries of one process (nothing at all without `webhook_urls`)."""

    def __init__(self, simulator, store: Store):
        settings = simulator.settings
        self.urls = tuple(settings.webhook_urls or ())
        self.store, self.stats, self.ids = store, simulator.stats, simulator.ids
        self.tasks: set[asyncio.Task] = set()
        self.client: httpx.AsyncClient | None = None
        if not self.urls:
            return
        self.key = signing_key(settings.webhook_secret)
        if "webhooks" not in simulator.templates.templates:
            raise ConfigError(f"templates: {simulator.templates.directory} has no webhooks.yaml (webhook_urls need it)")
        missing = [kind for kind in ("event", "webhook") if kind not in simulator.ids.formats]
        if missing:
            raise ConfigError(f"ids.yaml: webhook_urls need the id formats {' and '.join(missing)}")
        self.template = simulator.templates["webhooks"]
        self.attempts, self.backoff_s = settings.webhook_attempts, settings.webhook_backoff_s
        faults = settings.webhook_faults or {}
        self.delay_s = faults.get("delay_ms", 0) / 1000.0
        self.duplicate = faults.get("duplicate", 0)
        self.rng = random.Random(None if settings.seed is None else f"webhooks:{settings.seed}")
        self.wall = simulator.clock.wall

    # ---- what starts deliveries ----------------------------------------------------------
    async def notify_ended(self, response: dict) -> None:
        """A background response ended: its event for every URL, kept in the outbox, then sent."""
        if not self.urls or response.get("status") in ACTIVE:
            return
        body = self.template.body_json(shape="webhook_event", id=self.ids.make("event", self.rng),
                                       created_at=int(self.wall()), response=response)
        for url in self.urls:
            entry = {"id": self.ids.make("webhook", self.rng), "url": url, "body": body.decode()}
            await self.store.outbox_put(entry["id"], orjson.dumps(entry))
            self.stats.webhook("queued")
            self._spawn(entry, self.delay_s)

    def serving(self) -> None:
        """The server started: send what the outbox still holds."""
        if self.urls:
            self._track(asyncio.create_task(self._resume()))

    async def _resume(self) -> None:
        try:
            pending = await self.store.outbox()
        except Exception:
            log.exception("webhooks: could not read the pending deliveries")
            return
        for raw in pending:
            entry = orjson.loads(raw)
            self.stats.webhook("queued")
            self._spawn(entry, 0.0)

    async def stopped(self) -> None:
        """The server stops: deliveries under way stop (those kept in a persistent store's
        outbox are sent by the next server on it)."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    def _spawn(self, entry: dict, delay_s: float) -> None:
        self._track(asyncio.create_task(self._deliver(entry, delay_s)))

    def _track(self, task: asyncio.Task) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ---- one delivery --------------------------------------------------------------------
    async def _deliver(self, entry: dict, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S))
                if await self._post(entry):
                    self.stats.webhook("delivered")
                    await self.store.outbox_delete(entry["id"])
                    if self.duplicate and self.rng.random() < self.duplicate:
                        await self._post(entry)
                    return
            self.stats.webhook("dropped")
            log.warning("webhook %s to %s dropped after %d attempts", entry["id"], entry["url"], self.attempts)
            await self.store.outbox_delete(entry["id"])
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("webhook %s to %s failed", entry["id"], entry["url"])

    async def _post(self, entry: dict) -> bool:
        """One attempt, signed now; whether a 2xx answered."""
        if self.client is None:     # direct: no proxy from the environment
            self.client = httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, follow_redirects=False)
        body = entry["body"].encode()
        timestamp = str(int(time.time()))
        headers = self.template.body(shape="webhook_headers", webhook_id=entry["id"], timestamp=timestamp,
                                     signature=signature(self.key, entry["id"], timestamp, body))
        self.stats.webhook("sent")
        try:
            answer = await self.client.post(entry["url"], content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.info("webhook %s to %s: no answer (%s)", entry["id"], entry["url"], exc.__class__.__name__)
            self.stats.webhook("failed")
            return False
        if 200 <= answer.status_code < 300:
            return True
        log.info("webhook %s to %s: answered %d", entry["id"], entry["url"], answer.status_code)
        self.stats.webhook("failed")
        return False
