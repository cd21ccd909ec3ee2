"""Embedder settings and re-embedding progress."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from ..deps import ERRORS, SMALL_BODY, Admin
from ..schemas import EmbeddingProgress, EmbeddingSettingsOut, EmbeddingSettingsPatch

router = APIRouter(tags=["settings"], responses=ERRORS)


@router.get("/v1/settings", response_model=EmbeddingSettingsOut, name="get_settings")
def get_settings_route(eng: Admin) -> dict[str, Any]:
    """Where vectors come from."""
    return eng.embedding.current().model_dump()


@router.patch("/v1/settings", response_model=EmbeddingSettingsOut, max_body_size=SMALL_BODY)
async def change_settings(body: EmbeddingSettingsPatch, eng: Admin) -> dict[str, Any]:
    """Change only what the body names. A new model embeds a test string first; if that fails the
    answer is 400 with what failed and the old setting stays. Vectors of a new model fill in behind."""
    patch = body.model_dump(exclude_unset=True)
    return (await run_in_threadpool(eng.embedding.change, patch)).model_dump()


@router.get("/v1/settings/embedding", response_model=EmbeddingProgress)
def embedding_progress(eng: Admin) -> dict[str, Any]:
    """How far vectors have got for the current model."""
    return eng.embedding.progress()
