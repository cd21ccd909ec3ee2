"""Liveness for anyone; the dependency details only for the admin key."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from ...indexing import is_warm
from ..deps import ADMIN_KEY, holds_admin_key
from ..schemas import Health

router = APIRouter(tags=["ops"])


@router.get("/livez", response_model=Health)
def livez() -> dict[str, Any]:
    """The process is up: touches no dependency (the Lambda Web Adapter's readiness check)."""
    return {"ok": True}


@router.get("/healthz", response_model=Health)
def healthz(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(ADMIN_KEY)]
) -> dict[str, Any]:
    """Liveness for anyone. With the admin key also the embedder, the last error, and (with the proxy)
    the upstream names, cache stats, MongoDB's state and per-phase call counters; strangers learn
    nothing about what engram talks to."""
    eng = request.app.state.engine_factory()
    if not holds_admin_key(credentials, eng):
        return {"ok": True}
    eng.refresh()
    service = eng.service
    out = {
        "ok": True,
        "embedder": service.dense_name,
        "embedderWarm": is_warm(service.embedder),
        "lastError": service.last_error,
        "index": eng.keeper.progress.as_json() if eng.keeper else None,
    }
    proxy_factory = request.app.state.proxy_factory
    if proxy_factory is not None:
        proxy = proxy_factory()
        out["upstreams"] = [u.name for u in proxy.settings.upstreams]
        out["cache"] = {
            "recall": proxy.memory.recall_cache.stats(),
            "settings": proxy.memory.settings_cache.stats(),
            "project": proxy.projects.cache.stats(),
        }
        out["mongo"] = {
            "configured": proxy.projects.db is not None,
            "lookups": proxy.projects.lookups,
            "errors": proxy.projects.errors,
            "lastError": proxy.projects.last_error,
        }
        out["calls"] = proxy.counters.as_json()
    return out
