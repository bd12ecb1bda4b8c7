"""Two apps in one process (two `create_app` on one event loop, as tests and in-process servers
run them) share no state: a graceful shutdown of one ends its own streams with the shutdown
error and leaves the other's running whole, and the streams one app paces are on its own
timer, never on the other's (llmsim.pacing.draining, llmsim.pacing.pacer)."""
from __future__ import annotations

import asyncio
import contextlib

import httpx
import openai
import pytest

from llmsim.app import create_app
from llmsim.settings import Settings

TOKENS = 100        # 20 ms apart: a stream runs for about 2 s
SETTINGS = dict(ttft_ms=10, tbt_ms=20, target_tokens=TOKENS, graceful_timeout_s=0.3, metrics=False)


@contextlib.asynccontextmanager
async def serving(app):
    """`app`'s lifespan as a server runs it: started on entering, shut down on leaving."""
    messages: asyncio.Queue = asyncio.Queue()
    started = asyncio.get_running_loop().create_future()

    async def send(message):
        if message["type"].startswith("lifespan.startup") and not started.done():
            started.set_result(message["type"])
    await messages.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                   messages.get, send))
    assert await asyncio.wait_for(started, 30) == "lifespan.startup.complete"
    try:
        yield app
    finally:
        await messages.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, 30)


def client(app) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://sim/v1", api_key="sk-test", max_retries=0,
                              http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)))


async def chat(app, **kwargs) -> list:
    """A streamed Chat answer's chunks (the SDK raises a stream's error chunk)."""
    stream = await client(app).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Go on."}], stream=True, **kwargs)
    return [chunk async for chunk in stream]


def paced(app) -> int:
    """How many streams wait on `app`'s timer."""
    return sum(1 for pacer in app.drain.pacers.by_loop.values() for slot in pacer.slots.values()
               for stream in slot if not stream.closed)


async def until(condition, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def text(chunks: list) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def test_a_shutdown_of_one_app_leaves_the_other_apps_streams_running_whole():
    one, other = create_app(Settings(**SETTINGS)), create_app(Settings(**SETTINGS))
    async with serving(one), serving(other):
        ending = asyncio.create_task(chat(one))
        await until(lambda: paced(one) == 1)
        assert paced(other) == 0            # one's stream is on one's timer only
        running = asyncio.create_task(chat(other))
        await until(lambda: paced(other) == 1)
        assert paced(one) == 1

        one.drain.begin()                   # one's server heard its shutdown signal
        with pytest.raises(openai.APIError, match="shutting down"):
            await ending                    # ended at one's graceful timeout, with the error chunk
        chunks = await running
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == TOKENS
        # and a stream the other app starts afterwards runs whole too
        later = await chat(other, max_tokens=5)
        assert later[-1].choices[0].finish_reason == "length" and text(later)
