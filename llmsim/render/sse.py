"""The bytes of one server-sent event: `event: <name>` (when it has one), `data: <json>`, a
blank line. Used by the transports and, at start-up, by llmsim.render.stepcodegen, whose SSE
stream functions write each step's frame head as a constant. A WebSocket message is a frame's
data alone (`payload`)."""
from __future__ import annotations

from typing import Iterable, Iterator

END = b"\n\n"
_HEADS: dict[str | None, bytes] = {None: b"data: ", "": b"data: "}     # event name -> its lines' start


def head(name: str | None) -> bytes:
    """What an event called `name` (None: unnamed) writes before its data."""
    found = _HEADS.get(name)
    if found is None:
        found = _HEADS[name] = b"event: " + name.encode() + b"\ndata: "
    return found


def frame(event) -> bytes:
    """An event's frame (a templates.Event: its JSON, or a raw line's text)."""
    data = event._json          # set by every generated stream step: no property call
    if data is None:
        data = event.data.encode() if event.raw else event.json
    return head(event.name) + data + END


def framed(events: Iterable) -> Iterator[tuple[float, bytes]]:
    """(due time, frame) of each event: what `transport.Paced` sends."""
    for event in events:
        yield event.at, frame(event)


def payload(frame: bytes) -> bytes:
    """A frame's data without its envelope (`event:` line, `data: `, blank line): what a
    WebSocket sends as one message."""
    if frame.startswith(b"event: "):
        frame = frame[frame.index(b"\n") + 1:]
    return frame[len(b"data: "):-len(END)]
