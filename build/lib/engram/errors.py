"""Domain errors; each carries the HTTP status a front door should answer with."""


class EngramError(Exception):
    """Base class: a message for people and a status for HTTP."""

    status = 500
    code = "internal"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(EngramError):
    """The caller sent something engram cannot accept."""

    status = 400
    code = "invalid"


class NotFound(EngramError):
    """The thing named does not exist in this bot."""

    status = 404
    code = "not_found"


class Unauthorized(EngramError):
    """Missing or wrong credentials."""

    status = 401
    code = "unauthorized"


class Unavailable(EngramError):
    """A dependency is down and the operation could not be done safely; nothing was changed."""

    status = 503
    code = "unavailable"


class EmbedderUnavailable(Unavailable):
    """The embedder did not answer or answered nonsense."""

    code = "embedder_unavailable"


class IndexUnavailable(Unavailable):
    """The vector index (Qdrant) did not answer."""

    code = "index_unavailable"


class Forgotten(EngramError):
    """The user was forgotten after this was written, asked for or queued: it is dropped, never stored."""

    status = 409
    code = "forgotten"
