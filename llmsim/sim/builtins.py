"""Built-in tools of the Responses API (web_search, file_search, code_interpreter,
image_generation, mcp): whether the model uses one (`choose`, beside toolcalls' function
tools), and what the use holds.

Invariants: an answer that uses one holds the tool's item(s) first, then the message; items
are plain data (their wire shapes are in templates/responses.yaml); every draw comes from the
request's rng (--seed fixes it). The decision table and timing:
docs/internals.md#simbuiltins.
"""
from __future__ import annotations

import base64
import random
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from llmsim.errors import InvalidRequestError
from llmsim.ids import Ids
from llmsim.sim import jsonvalues, latency, textgen
from llmsim.sim.toolcalls import ToolRequest, dumps

WEB_SEARCH_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26",
                    "web_search_preview_2025_03_11")
TYPES = (*WEB_SEARCH_TYPES, "file_search", "code_interpreter", "image_generation", "mcp")
DOMAINS = ("example.com", "example.org", "example.net", "docs.example.com", "news.example.org")
MAX_PARTIAL_IMAGES = 3
IMAGE_SIDE = 8
MCP_TOOLS = (       # what an MCP server lists when the tool names no allowed_tools
    ("search", "Search the server's documents.",
     {"type": "object", "properties": {"query": {"type": "string", "minLength": 3, "maxLength": 40}},
      "required": ["query"], "additionalProperties": False}),
    ("fetch", "Fetch one document by its id.",
     {"type": "object", "properties": {"id": {"type": "string", "pattern": "^doc-[0-9]{4}$"}},
      "required": ["id"], "additionalProperties": False}),
)


@dataclass(slots=True)
class Timed:
    text: str
    at: float


@dataclass(slots=True)
class Citation:
    """A url_citation: the message text's characters [start, end) cite `url`."""
    url: str
    title: str
    start: int
    end: int


@dataclass(slots=True)
class WebSearchCall:
    id: str
    query: str
    sources: list[str] | None           # None: not included (include web_search_call.action.sources)
    urls: list[tuple[str, str]]         # (url, title) the message cites
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"
    kind: str = "web_search_call"


@dataclass(slots=True)
class FileResult:
    file_id: str
    filename: str
    score: float
    text: str


@dataclass(slots=True)
class FileSearchCall:
    id: str
    queries: list[str]
    results: list[FileResult] | None    # None: not included (include file_search_call.results)
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"
    kind: str = "file_search_call"


@dataclass(slots=True)
class CodeInterpreterCall:
    id: str
    container_id: str
    code: str
    logs: str | None                    # None: not included (include code_interpreter_call.outputs)
    deltas: list[Timed] = field(default_factory=list)
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"
    kind: str = "code_interpreter_call"


@dataclass(slots=True)
class ImageGenerationCall:
    id: str
    result: str                         # a PNG, base64
    partials: list[Timed] = field(default_factory=list)   # partial images (base64 PNGs)
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"
    kind: str = "image_generation_call"


@dataclass(slots=True)
class McpTool:
    name: str
    description: str
    input_schema: dict


@dataclass(slots=True)
class McpListTools:
    id: str
    server_label: str
    tools: list[McpTool]
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"
    kind: str = "mcp_list_tools"


@dataclass(slots=True)
class McpCall:
    id: str
    server_label: str
    name: str
    arguments: str
    output: str
    deltas: list[Timed] = field(default_factory=list)
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"
    kind: str = "mcp_call"


def offered(body: dict) -> list[dict]:
    """The built-in tools of the request, in order."""
    return [t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") in TYPES]


def _family(kind: str) -> str:
    return "web_search" if kind.startswith("web_search") else kind


TEXT = "text"             # choose's answers besides a tool: answer in text,
FUNCTION = "function"     # call a function (the function path picks which)


def choose(body: dict, tool_req: ToolRequest, rng: random.Random, probability: float,
           last_role: str | None) -> dict | str | None:
    """The built-in tool the model uses, TEXT, FUNCTION, or None: no built-in tool is in
    play and the function path decides as it would without them."""
    tools = offered(body)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in TYPES:
            for tool in tools:
                if _family(tool["type"]) == _family(kind) and (
                        kind != "mcp" or choice.get("server_label") in (None, tool.get("server_label"))):
                    return tool
            raise InvalidRequestError(f"Tool choice '{kind}' not found in 'tools' parameter.",
                                      param="tool_choice", code="invalid_value")
        if kind == "allowed_tools":
            allowed = {_family(t.get("type", "")) for t in choice.get("tools") or () if isinstance(t, dict)}
            tools = [t for t in tools if _family(t["type"]) in allowed]
            choice = choice.get("mode", "auto")
        else:
            return None
    if not tools or choice == "none":
        return None
    if choice != "required" and (last_role == "tool" or rng.random() >= probability):
        return TEXT
    pick = rng.randrange(len(tools) + len(tool_req.allowed))
    return tools[pick] if pick < len(tools) else FUNCTION


def make(tool: dict, body: dict, ctx: Any, query_source: str, start: float) -> list[Any]:
    """The item(s) of one use of `tool`, starting at `start`; each item's start_at/end_at set."""
    rng, ids = ctx.rng, ctx.ids
    include = body.get("include") or ()
    kind = _family(tool["type"])
    query = _query(query_source, rng)
    tbt = ctx.profile.tbt
    if kind == "web_search":
        urls = _urls(query, rng)
        sources = [url for url, _ in urls] if "web_search_call.action.sources" in include else None
        items = [WebSearchCall(_id(ids, "web_search_call", rng), query, sources, urls)]
    elif kind == "file_search":
        results = _file_results(tool, query, rng, ids) if "file_search_call.results" in include else None
        items = [FileSearchCall(_id(ids, "file_search_call", rng), [query], results)]
    elif kind == "code_interpreter":
        code, logs = _program(rng)
        container = tool.get("container")
        container_id = container if isinstance(container, str) else _id(ids, "container", rng)
        call = CodeInterpreterCall(_id(ids, "code_interpreter_call", rng), container_id, code,
                                   logs if "code_interpreter_call.outputs" in include else None)
        call.deltas = [Timed(p, 0.0) for p in textgen.split(code, ctx.model.encoding)]
        items = [call]
    elif kind == "image_generation":
        n = max(0, min(MAX_PARTIAL_IMAGES, int(tool.get("partial_images") or 0)))
        colour = rng.randbytes(3)
        partials = [Timed(png_base64(bytes(c * (i + 1) // (n + 1) for c in colour)), 0.0) for i in range(n)]
        items = [ImageGenerationCall(_id(ids, "image_generation_call", rng), png_base64(colour), partials)]
    else:
        listed = _mcp_tools(tool)
        chosen = body.get("tool_choice") if isinstance(body.get("tool_choice"), dict) else {}
        named = [t for t in listed if t.name == chosen.get("name")]
        target = named[0] if named else rng.choice(listed)
        value = jsonvalues.value(target.input_schema, rng)
        arguments = dumps(value if isinstance(value, dict) else {})
        label = tool.get("server_label") or ""
        call = McpCall(_id(ids, "mcp_call", rng), label, target.name, arguments, textgen.words_text(12, rng))
        call.deltas = [Timed(p, 0.0) for p in textgen.split(arguments, ctx.model.encoding)]
        items = [McpListTools(_id(ids, "mcp_list_tools", rng), label, listed), call]
    at = start
    for item in items:
        item.start_at = at
        steps = getattr(item, "deltas", None) or []
        if steps:       # generated by the model: one gap per token
            end = at + tbt.sample_sum(len(steps), rng)
            for step, due in zip(steps, latency.spread(at, end, len(steps))):
                step.at = due
            at = end
        partials = getattr(item, "partials", None) or []
        work = ctx.profile.ttft.sample(rng)      # the tool's own work
        for step, due in zip(partials, latency.spread(at, at + work, len(partials) + 1)):
            step.at = due
        at = item.end_at = at + work
    return items


def _id(ids: Ids, kind: str, rng: random.Random) -> str:
    return ids.make(kind if kind in ids.formats else "item", rng)


_WORD = re.compile(r"[\w'-]+")


def _query(source: str, rng: random.Random) -> str:
    """A search query: the first words of the user's last message, else generated words."""
    words = _WORD.findall(source or "")[:8]
    return " ".join(words) if words else textgen.words_text(4, rng)


def _urls(query: str, rng: random.Random) -> list[tuple[str, str]]:
    slug = "-".join(query.lower().split()[:5]) or "result"
    slug = re.sub(r"[^a-z0-9-]", "", slug) or "result"
    domains = rng.sample(DOMAINS, rng.randint(1, 3))
    return [(f"https://{d}/{slug}-{rng.randrange(100, 1000)}", f"{query.title()} - {d}") for d in domains]


def citations(urls: list[tuple[str, str]], text: str) -> list[Citation]:
    """One citation per url, each over its own run of whole words of `text`, in order."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    if not spans or not urls:
        return []
    n = min(len(urls), len(spans))
    out = []
    for i in range(n):
        words = spans[i * len(spans) // n:(i + 1) * len(spans) // n]
        url, title = urls[i]
        out.append(Citation(url, title, words[0][0], words[-1][1]))
    return out


def _file_results(tool: dict, query: str, rng: random.Random, ids: Ids) -> list[FileResult]:
    n = max(1, min(3, int(tool.get("max_num_results") or 3)))
    results = []
    for _ in range(n):
        file_id = "file-" + rng.getrandbits(88).to_bytes(11, "big").hex()
        results.append(FileResult(file_id, f"{textgen.words_text(2, rng).rstrip('.').replace(' ', '_').lower()}.txt",
                                  round(rng.uniform(0.5, 1.0), 4), f"{query}: {textgen.words_text(15, rng)}"))
    results.sort(key=lambda r: -r.score)
    return results


def _program(rng: random.Random) -> tuple[str, str]:
    """A short Python program and what it prints."""
    values = [rng.randint(1, 99) for _ in range(rng.randint(3, 6))]
    code = (f"values = {values}\n"
            "total = sum(values)\n"
            "print(total, total / len(values))\n")
    total = sum(values)
    return code, f"{total} {total / len(values)}\n"


def _mcp_tools(tool: dict) -> list[McpTool]:
    allowed = tool.get("allowed_tools")
    names = allowed if isinstance(allowed, list) else (allowed or {}).get("tool_names") if isinstance(allowed, dict) else None
    names = [name for name in names or () if isinstance(name, str)]
    if names:
        known = {name: (description, schema) for name, description, schema in MCP_TOOLS}
        return [McpTool(name, *known.get(name, (f"The {name} tool.", MCP_TOOLS[0][2]))) for name in names]
    return [McpTool(*t) for t in MCP_TOOLS]


def png(rgb: bytes, side: int = IMAGE_SIDE) -> bytes:
    """A side x side PNG of one RGB colour."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = (b"\x00" + rgb * side) * side
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def png_base64(rgb: bytes) -> str:
    return base64.b64encode(png(rgb)).decode()
