"""Domain errors; each carries the HTTP status a front door should answer with."""


class EngramError(Exception):
    """Base class: a message for people and a status for HTTP. A subclass names its own in its class line
    (`class NotFound(EngramError, status=404, code="not_found")`)."""

    status: int = 500
    code: str = "internal"

    def __init_subclass__(cls, status: int | None = None, code: str | None = None) -> None:
        super().__init_subclass__()
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(EngramError, status=400, code="invalid"):
    """The caller sent something engram cannot accept."""


class NotFound(EngramError, status=404, code="not_found"):
    """The thing named does not exist in this bot."""


class Unauthorized(EngramError, status=401, code="unauthorized"):
    """Missing or wrong credentials."""


class Unavailable(EngramError, status=503, code="unavailable"):
    """A dependency is down and the operation could not be done safely; nothing was changed."""


class EmbedderUnavailable(Unavailable, code="embedder_unavailable"):
    """The embedder did not answer or answered nonsense."""


class IndexUnavailable(Unavailable, code="index_unavailable"):
    """The vector index (Qdrant) did not answer."""


class Forgotten(EngramError, status=409, code="forgotten"):
    """The user was forgotten after this was written, asked for or queued: it is dropped, never stored."""
