"""`create_app(settings)`: the app, routed and validated from our OpenAPI document: the connexion
app behind llmsim's front door (llmsim.api.front). With `server: plain` it uses connexion's
public API only: no fast lane, handlers read the request through `connexion.request`.

No import-time side effects: everything (data, templates, spec) is loaded here, and a bad template or data file raises ConfigError before
the server accepts a connection.
"""
from __future__ import annotations

import logging
import os

from connexion import AsyncApp
from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionResponse
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from starlette.exceptions import HTTPException
from starlette.responses import Response

from llmsim import __version__, datafiles
from llmsim.api.adapters import adapters
from llmsim.api import compat
from llmsim.api.apis import Apis
from llmsim.api.front import Front
from llmsim.api.handlers.anthropic import AnthropicHandlers
from llmsim.api.handlers.chat_store import ChatStoreHandlers
from llmsim.api.handlers.config import ConfigHandlers
from llmsim.api.handlers.conversations import ConversationsHandlers
from llmsim.api.handlers.faults import FaultsHandlers
from llmsim.api.handlers.gemini import GeminiHandlers
from llmsim.api.handlers.generate import Generating
from llmsim.api.handlers.models import ModelsHandlers
from llmsim.api.handlers.response_store import ResponseStoreHandlers
from llmsim.api.handlers.stats import StatsHandlers
from llmsim.api.handlers.vllm import VllmHandlers
from llmsim.api.methods import AllowedMethods
from llmsim.api.pipeline import Pipeline
from llmsim.api.validation import BodyValidator, unsupported_media_type
from llmsim.api.websocket import ResponsesSocket
from llmsim.clock import Clock
from llmsim.errors import (APIError, InvalidRequestError, MethodNotAllowedError, NotFoundError,
                           PayloadTooLargeError, ServerError, UnsupportedMediaTypeError)
from llmsim.pacing import transport
from llmsim.settings import Settings
from llmsim.simulator import Simulator

log = logging.getLogger("llmsim")
ADMIN_SPEC = datafiles.OPENAPI_DIR / "admin.yaml"     # llmsim's own routes, under /llmsim
# connexion problems by status, turned into our exception tree.
PROBLEMS = {400: InvalidRequestError, 404: NotFoundError, 405: MethodNotAllowedError,
            413: PayloadTooLargeError, 415: UnsupportedMediaTypeError}


def starlette_response(response: ConnexionResponse) -> Response:
    return Response(response.body, response.status_code, response.headers, response.mimetype)


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> Front:
    settings = settings or Settings()
    simulator = Simulator.load(settings, clock)
    tuned = settings.server == "tuned"
    if tuned:       # connexion's private context, set by the fast lane for its requests too
        from llmsim.server import context as current
    else:
        from llmsim.api import current
    pipeline = Pipeline(simulator)        # every generating operation: its adapter through the pipeline
    generating = {name: Generating(pipeline, adapter, current) for name, adapter in adapters(simulator).items()}
    groups = {"responses": generating["responses"], "chat": generating["chat"],
              "completions": generating["completions"], "embeddings": generating["embeddings"],
              "moderations": generating["moderations"], "compaction": generating["compact"],
              "anthropic": AnthropicHandlers(simulator, generating["anthropic"]),
              "gemini": GeminiHandlers(simulator, generating["gemini"], generating["gemini_embed"]),
              "models": ModelsHandlers(simulator), "stats": StatsHandlers(simulator),
              "faults": FaultsHandlers(simulator),
              "config": ConfigHandlers(simulator), "response_store": ResponseStoreHandlers(simulator),
              "conversations": ConversationsHandlers(simulator), "chat_store": ChatStoreHandlers(simulator)}
    groups["vllm"] = VllmHandlers(simulator)         # --compat vllm's routes (llmsim.api.compat)
    vllm_routes = compat.routes(settings)
    main_document = compat.main_document(settings)     # --compat vllm: with vLLM's extra parameters
    base_paths = tuple(settings.base_paths)     # "" mounts the routes without a prefix
    apis = Apis.load(datafiles.OPENAPI_DIR, settings.spec_path)   # other providers' documents
    error_templates = {None: simulator.templates["errors"],
                       **{doc.errors: simulator.templates[doc.errors] for doc in apis.documents}}
    allowed = AllowedMethods.load([(settings.spec_path, base_paths), (ADMIN_SPEC, ["/llmsim"]),
                                   *[(doc.path, doc.own) for doc in apis.documents],
                                   *([(vllm_routes[0], [""])] if vllm_routes else [])])  # for 405s

    def resolve(operation_id: str):
        group, _, name = operation_id.partition(".")
        return getattr(groups[group], name)

    def render_error(exc: APIError, path: str | None = None) -> ConnexionResponse:
        """`exc` in the envelope of the API `path` belongs to (llmsim.api.apis)."""
        simulator.stats.error(exc.code or exc.type, injected=getattr(exc, "injected", False))
        document = apis.of(path)
        template = error_templates[document.errors if document is not None else None]
        return ConnexionResponse(status_code=exc.status, mimetype=transport.JSON,
                                 body=template.body_json(error=exc), headers=exc.headers)

    async def on_api_error(request, exc: APIError):
        return render_error(exc, request.url.path)

    async def on_problem(request, exc: ProblemException):
        cls = PROBLEMS.get(exc.status, APIError)
        detail = exc.detail or exc.title or "Invalid request"
        if exc.status == 404:
            detail = f"Unknown request URL: {request.method} {request.url.path}."
        elif exc.status == 405:
            detail = f"Method {request.method} is not allowed for {request.url.path}."
        elif exc.status == 415:
            return render_error(unsupported_media_type(request.headers.get("content-type", "")),
                                request.url.path)
        headers = {k: v for k, v in (exc.headers or {}).items() if k.lower() != "content-type"}
        allow = allowed.allow(request.url.path) if exc.status == 405 else None
        if allow:
            headers = {**{k: v for k, v in headers.items() if k.lower() != "allow"}, "Allow": allow}
        return render_error(cls(detail, status=exc.status, headers=headers),  # e.g. Allow on 405
                            request.url.path)

    async def on_http_error(request, exc: HTTPException):
        return await on_problem(request, ProblemException(status=exc.status_code, detail=exc.detail,
                                                          headers=exc.headers))

    async def on_unexpected(request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return render_error(ServerError.unexpected(), request.url.path)

    # connexion gets each document as read by the C YAML loader (its own reader is PyYAML's
    # pure-Python one, most of the cost of building the app); documents' $refs are internal.
    # The document is served under each prefix (`/openai/v1/openapi.json`), not bare (`""`);
    # the Swagger UI is not (an extra).
    app = AsyncApp(__name__, resolver=Resolver(function_resolver=resolve),
                   swagger_ui_options=SwaggerUIOptions(swagger_ui=False))
    for base in base_paths:
        app.add_api(main_document, base_path=base, name=base or "bare",
                    validator_map={"body": {"application/json": BodyValidator}},
                    strict_validation=False, validate_responses=False,
                    swagger_ui_options=SwaggerUIOptions(swagger_ui=False, serve_spec=bool(base)))

    for doc in apis.documents:      # each on its own base paths (its `servers`)
        for base in doc.own:
            app.add_api(datafiles.read_yaml(doc.path), base_path=base, name=f"{doc.name}:{base}",
                        validator_map={"body": {"application/json": BodyValidator}},
                        strict_validation=False, validate_responses=False,
                        swagger_ui_options=SwaggerUIOptions(swagger_ui=False, serve_spec=base not in base_paths))

    if vllm_routes is not None:     # vLLM's /tokenize, /detokenize, /version: no prefix, as vLLM
        app.add_api(vllm_routes[1], base_path="", name="vllm",
                    validator_map={"body": {"application/json": BodyValidator}},
                    strict_validation=False, validate_responses=False,
                    swagger_ui_options=SwaggerUIOptions(swagger_ui=False, serve_spec=False))

    async def health(request):
        template = simulator.templates["health"]
        return transport.json_response(template.body_json(version=__version__, base_paths=base_paths, pid=os.getpid()))
    app.add_url_rule("/health", "health", health, methods=["GET"])
    app.add_api(datafiles.read_yaml(ADMIN_SPEC), base_path="/llmsim", name="/llmsim", strict_validation=False,
                validator_map={"body": {"application/json": BodyValidator}}, validate_responses=False)
    app.add_url_rule("/metrics", "metrics", groups["stats"].metrics, methods=["GET"])  # scrapers' default

    app.add_error_handler(APIError, on_api_error)
    app.add_error_handler(ProblemException, on_problem)
    app.add_error_handler(HTTPException, on_http_error)
    app.add_error_handler(Exception, on_unexpected)
    # In front of connexion: stats, checks, the WebSocket upgrades connexion cannot route and,
    # on the tuned server, the hot JSON operations (the same document, compiled once).
    operations = {}
    if tuned:
        from llmsim.api.fastpath import json_operations
        operations = json_operations(main_document, base_paths, resolve)
    socket = ResponsesSocket(simulator, pipeline, generating["websocket"].adapter)
    front = Front(app, simulator=simulator, operations=operations, websockets=socket.router(base_paths),
                  render_error=lambda exc, path=None: starlette_response(render_error(exc, path)),
                  base_paths=base_paths + apis.bases, tuned=tuned, apis=apis)
    socket.tracing = front.observer.tracing     # OpenTelemetry (None: off): a span per WebSocket turn
    return front
