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


SMALL_INTS = tuple(b"%d" % n for n in range(4096))     # their JSON, by value


def decimal(n: int) -> bytes:
    """`n` in decimal (an integer's JSON), from a table below 4,096: header values such as
    content-length and token counts, written with every answer."""
    return SMALL_INTS[n] if 0 <= n < 4096 else b"%d" % n
