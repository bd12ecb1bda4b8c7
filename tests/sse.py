"""Parse SSE bytes into (event, data) pairs, as a strict client would."""
from __future__ import annotations

import json


def parse(text: str) -> list[tuple[str | None, object]]:
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if not data:
            continue
        raw = "\n".join(data)
        events.append((name, raw if raw == "[DONE]" else json.loads(raw)))
    return events
