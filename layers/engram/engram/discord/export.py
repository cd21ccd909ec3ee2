"""/memory export: everything stored about a user, as an NDJSON file by DM."""

from __future__ import annotations

import json
import logging
from typing import Any

from ..clock import now_ms
from ..jobs import ExportJob
from .core import DiscordCore
from .rest import DiscordError

log = logging.getLogger(__name__)
EXPORT_EVERY_S = 10 * 60
EXPORT_MAX_BYTES = 8_000_000  # under Discord's 10 MiB attachment limit for bots


class Export:
    """export: everything stored about a user, sent to them as a file."""

    def __init__(self, core: DiscordCore) -> None:
        self.core = core
        self.bot, self.settings = core.bot, core.settings
        self.state, self.service = core.state, core.service

    def _header(self, user: str) -> list[dict[str, Any]]:
        """The export's first lines: the user's consent and their backfill run, as stored."""
        header: list[dict[str, Any]] = []
        consent = self.state.consents.get(self.bot, user)
        if consent is not None:
            guilds = {"guilds": list(consent.guilds)} if consent.guilds is not None else {}
            header.append({"kind": "consent", "value": 1, "consentedAt": consent.consented_at, **guilds})
        run = self.state.backfills.get(self.bot, user)
        if run is not None:
            header.append(
                {"kind": "backfill", "value": run.left, "channels": run.channels, "issuedAt": run.issued_at}
            )
        return header

    def export(self, job: ExportJob) -> None:
        """Everything stored about the user — consent, backfill state, every memory — as an NDJSON file by
        DM, at most once per EXPORT_EVERY_S and up to EXPORT_MAX_BYTES."""
        from ..portability import export_lines

        user = job.user

        limits = (
            f"Limits: one export every {EXPORT_EVERY_S // 60} minutes, files up to "
            f"{EXPORT_MAX_BYTES // 1_000_000} MB."
        )
        now = now_ms()
        if self.core.service.refused(self.bot, {user}, job.issued_at):
            return  # forgotten since they asked: no export, and no export slot naming them
        if not self.state.limits.take_export_slot(self.bot, user, now, EXPORT_EVERY_S):
            self.core.reply(job.token, job.issued_at, user, f"You asked for an export a moment ago. {limits}")
            return
        header = self._header(user)
        out, count = bytearray(), 0
        for line in [json.dumps(h) + "\n" for h in header]:
            out += line.encode()
        for line in export_lines(self.service, self.bot, user):
            out += line.encode()
            count += 1
            if len(out) > EXPORT_MAX_BYTES:
                self.core.reply(
                    job.token,
                    job.issued_at,
                    user,
                    f"Everything stored about you is more than {EXPORT_MAX_BYTES // 1_000_000} MB, too big "
                    "for a Discord file; the bot's operator can export it for you "
                    f"(GET /v1/bots/{self.bot}/export?userId={user}). {limits}",
                )
                return
        try:
            self.core.client.direct_file(
                user,
                f"Everything I store about you: {count} memories.",
                f"engram-{user}.ndjson",
                bytes(out),
                "application/x-ndjson",
            )
        except DiscordError as exc:  # closed DMs (50007) and the like: said now, and the slot given back
            self.state.limits.release_export_slot(self.bot, user)
            self.core.reply(
                job.token,
                job.issued_at,
                user,
                f"I couldn't send you a DM (Discord answered {exc.status}). Allow direct messages from this "
                "server's members (Privacy Settings), then ask again.",
            )
            return
        self.core.reply(
            job.token,
            job.issued_at,
            user,
            f"Sent you a DM with everything I store about you ({count} memories, "
            f"{len(out) // 1024 + 1} KB). {limits}",
        )
