"""The exception tree. Every error a client can see is an `APIError` (status, type, code, param,
message, headers); one renderer (the `error` template, used by `llmsim.app`) turns any of them
into the provider's JSON envelope. `ConfigError` stops start-up, naming the file and path;
`ConnectionDrop` (a BaseException, so no handler turns it into a response) closes the
connection without a complete answer. Each subclass's status and code are its class
attributes; the tree at a glance: docs/internals.md#errors.
"""
from __future__ import annotations


class ConnectionDrop(BaseException):
    """Close the client's connection abruptly (an injected `stream_drop` fault). A BaseException,
    so no error handler turns it into a response; `llmsim.api.guard` ends the exchange unfinished."""


class LLMSimError(Exception):
    """Base of everything llmsim raises on purpose."""


class ConfigError(LLMSimError):
    """A setting, data file or template is wrong; raised at start-up, never per request."""


class APIError(LLMSimError):
    status = 500
    type = "server_error"
    code: str | None = None
    retry_delay: str | None = None      # when a retry may succeed ("17s"), for envelopes that say it
    details: dict | None = None     # machine-readable details, where the envelope has them (Anthropic's)

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int | None = None, type: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.headers = headers or {}


class InvalidRequestError(APIError):
    status = 400
    type = "invalid_request_error"


class ContextLengthError(InvalidRequestError):
    code = "context_length_exceeded"


class ThreadUnsupportedError(InvalidRequestError):
    """Anthropic's answer to a request with `thread` (the message-threads beta) that it cannot
    thread: the SDKs' thread helpers then send the full conversation without `thread`."""
    details = {"error_code": "thread_unsupported_request"}


class PreviousResponseNotFoundError(InvalidRequestError):
    code = "previous_response_not_found"

    def __init__(self, response_id: str):
        super().__init__(f"Previous response with id '{response_id}' not found.",
                         param="previous_response_id")


class AuthenticationError(APIError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class NotFoundError(APIError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFoundError(NotFoundError):
    code = "model_not_found"

    def __init__(self, model: str):
        super().__init__(f"The model '{model}' does not exist or you do not have access to it.",
                         param="model")


class MethodNotAllowedError(APIError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class RequestTimeoutError(APIError):
    """The request's body did not all arrive in time (`body_timeout_s`); the connection closes."""
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"

    def __init__(self, message: str, **kwargs):
        super().__init__(message, headers={"connection": "close"}, **kwargs)


class PayloadTooLargeError(APIError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaTypeError(APIError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class ServerError(APIError):
    status = 500
    type = "server_error"
    code = "server_error"
    UNEXPECTED = "The server had an error while processing your request."   # OpenAI's words

    @classmethod
    def unexpected(cls) -> "ServerError":
        """What a client is told of a bug (an exception nobody raised on purpose)."""
        return cls(cls.UNEXPECTED)


class ServiceUnavailableError(APIError):
    """Something the request needs is out of reach for now (the state store); retry later."""
    status = 503
    type = "server_error"
    code = "service_unavailable"

    def __init__(self, message: str, *, retry_after: int = 1, **kwargs):
        super().__init__(message, headers={"retry-after": str(retry_after)}, **kwargs)
