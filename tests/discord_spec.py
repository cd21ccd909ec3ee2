"""Discord's own OpenAPI document (v10, MIT: discord/discord-api-spec), read from ../shared where CI keeps it
(never copied into this repository), as a validator of what the fake Discord answers: its routes must be
Discord's, and each JSON answer must match the schema Discord publishes for that route and status."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC = Path(__file__).resolve().parents[2] / "shared" / "reference" / "discord-openapi" / "openapi.json"
URI = "urn:discord-openapi"


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # the spec's path, "/channels/{channel_id}/messages"
    pattern: re.Pattern


@lru_cache(maxsize=1)
def _spec() -> tuple[dict, Registry, list[Route]]:
    if not SPEC.exists():
        raise FileNotFoundError(
            f"Discord's OpenAPI document is not at {SPEC}: the fake is checked against it "
            "(../shared/reference, beside the repository)"
        )
    spec = json.loads(SPEC.read_text())
    registry = Registry().with_resource(URI, Resource.from_contents(spec, default_specification=DRAFT202012))
    routes = []
    for template, item in spec["paths"].items():
        regex = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        for method in item:
            if method in ("get", "post", "put", "patch", "delete"):
                routes.append(Route(method.upper(), template, re.compile(regex)))
    # a literal segment beats a parameter: /users/@me/channels before /users/{user_id}/...
    routes.sort(key=lambda r: r.template.count("{"))
    return spec, registry, routes


def spec_document() -> dict:
    """Discord's OpenAPI document, read once (FileNotFoundError naming where it was looked for)."""
    return _spec()[0]


def route_of(method: str, path: str) -> Route | None:
    """The spec's route for a request path (after the API base), or None when Discord has no such route."""
    _, _, routes = _spec()
    return next((r for r in routes if r.method == method and r.pattern.match(path)), None)


def _pointer(*parts: str) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _response(spec: dict, route: Route, status: int) -> tuple[str, dict] | None:
    """(JSON pointer, response object) for a status: the exact code, then its class ("4XX")."""
    responses = spec["paths"][route.template][route.method.lower()]["responses"]
    for key in (str(status), f"{str(status)[0]}XX"):
        if key in responses:
            response, pointer = (
                responses[key],
                _pointer("paths", route.template, route.method.lower(), "responses", key),
            )
            if "$ref" in response:  # a shared response: #/components/responses/...
                pointer = response["$ref"].lstrip("#/")
                response = spec
                for part in pointer.split("/"):
                    response = response[part.replace("~1", "/").replace("~0", "~")]
            return pointer, response
    return None


def problems(method: str, path: str, status: int, body: object) -> list[str]:
    """What is wrong with an answer by Discord's spec: an unknown route, an undocumented status, or a body
    that does not match the documented schema (empty when it all holds)."""
    if status >= 500:  # Discord's server errors are not in the document (topics/opcodes-and-status-codes.mdx)
        return []
    spec, registry, _ = _spec()
    route = route_of(method, path)
    if route is None:
        return [f"{method} {path}: no such route in Discord's API"]
    found = _response(spec, route, status)
    if found is None:
        return [f"{method} {route.template}: status {status} is not documented"]
    pointer, response = found
    if "application/json" not in (response.get("content") or {}):
        return (
            [] if body in (None, b"", "") else [f"{method} {route.template} {status}: a body where none is"]
        )
    schema = {"$ref": f"{URI}#/{pointer}/content/application~1json/schema"}
    validator = Draft202012Validator(schema, registry=registry)
    where = f"{method} {route.template} {status}"
    return [
        f"{where}: {'/'.join(map(str, e.absolute_path)) or 'body'}: {e.message[:300]}"
        for e in validator.iter_errors(body)
    ]
