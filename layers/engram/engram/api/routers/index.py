"""The vector index as derived data: reconcile it with the records, or rebuild it from them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from ...clock import now_ms
from ...jobs import IndexMaintenanceJob
from ...text import NAME_PATTERN
from ..deps import ERRORS, Admin

router = APIRouter(tags=["index"], responses=ERRORS)


@router.post("/v1/index/{action}", status_code=202)
def maintain_index(
    action: Literal["reconcile", "rebuild"],
    eng: Admin,
    bot: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
) -> dict[str, Any]:
    """Queue a reconcile (points without a record deleted, records without a point written again) or a
    rebuild (every point written again from DynamoDB), for one bot or every bot. Both read every record
    of the bots named: see the README for what that costs on AWS."""
    eng.queue.send(IndexMaintenanceJob(action=action, bot=bot, started=now_ms()))
    return {"queued": action, "bot": bot}


@router.get("/v1/index")
def index_status(eng: Admin) -> dict[str, Any]:
    """What the last (or the running) reconcile or rebuild in this process has done."""
    return eng.keeper.progress.as_json()
