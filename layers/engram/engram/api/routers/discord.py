"""Discord's interactions webhook on the app (the same handler as the interactions function)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ..deps import SMALL_BODY

router = APIRouter(include_in_schema=False)


@router.post("/discord/interactions", max_body_size=SMALL_BODY)
async def discord_interactions(request: Request) -> JSONResponse:
    """Verify, answer PING, defer commands to the worker (a signed body is all the key there is)."""
    from ...config import get_discord_settings
    from ...discord.interactions import answer_headers, consent_status, handle_interaction, seen_once

    factory = request.app.state.discord_settings_factory or get_discord_settings
    settings = factory()
    raw = await request.body()
    engine = request.app.state.engine_factory
    status, body = await run_in_threadpool(
        handle_interaction,
        raw,
        dict(request.headers),
        settings,
        lambda: engine().queue,
        lambda user: consent_status(settings, engine().state, engine().service.records)(user),
        lambda interaction: seen_once(settings, engine().state.limits)(interaction),
    )
    headers = answer_headers(status)
    return JSONResponse(body, status_code=status, media_type=headers.pop("content-type"), headers=headers)
