"""JSON bytes for everything llmsim writes (bodies, events, stored records).

orjson, with the standard library for the values orjson refuses: integers beyond 64 bits,
which clients may put in free-form objects (tool parameter schemas, extra item fields) that
we echo back or store. Without it such a request would end in a 500.
"""
from __future__ import annotations

import json

import orjson


def dumps(value) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()
