"""The Gemini API on the wire, in process: a synchronous httpx client on an app of its own
(`client_of(**settings)`) and the requests and stream chunks the Gemini tests share."""
from __future__ import annotations

import json

import httpx

from llmsim.app import create_app
from llmsim.settings import Settings

MODEL = "gemini-2.5-flash"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello."}]}]}


def client_of(**settings) -> httpx.Client:
    app = create_app(Settings(**{"profile": "instant", "target_tokens": 12, **settings}))
    return httpx.Client(transport=_Sync(app), base_url="http://sim")


class _Sync(httpx.BaseTransport):
    """httpx's ASGI transport, driven from synchronous tests."""

    def __init__(self, app):
        import asyncio
        self.loop = asyncio.new_event_loop()
        self.transport = httpx.ASGITransport(app=app)

    def handle_request(self, request):
        async def send():
            response = await self.transport.handle_async_request(request)
            body = b"".join([chunk async for chunk in response.stream])
            return httpx.Response(response.status_code, headers=response.headers, content=body)
        return self.loop.run_until_complete(send())


def generate(client, body=HELLO, prefix="/v1beta", method="generateContent", **kwargs):
    return client.post(f"{prefix}/models/{MODEL}:{method}", json=body, **kwargs)


def chunks(response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
