"""Discord's objects whole, as Discord's API returns them (the required fields of its OpenAPI document's
response schemas, resources/*.mdx): the fake keeps only what its tests set and answers through these, so a
client reading any field Discord always sends finds it there, and tests/discord_spec.py holds every answer
to Discord's schema."""

from __future__ import annotations

from typing import Any

JOINED = "2026-01-05T09:00:00+00:00"


def user(u: dict[str, Any]) -> dict[str, Any]:
    """A user object (resources/user.mdx)."""
    return {
        "avatar": None,
        "discriminator": "0",
        "public_flags": 0,
        "flags": 0,
        "global_name": None,
        "primary_guild": None,
        **u,
    }


def message(m: dict[str, Any], nested: bool = False) -> dict[str, Any]:
    """A message object (resources/message.mdx); the one it answers is a message too, one level deep."""
    out = {
        "type": 0,
        "content": "",
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "edited_timestamp": None,
        "flags": 0,
        "components": [],
        "pinned": False,
        "mention_everyone": False,
        "tts": False,
        "timestamp": "2026-11-01T10:00:00+00:00",
        **m,
    }
    out["author"] = user(out.get("author") or {"id": "0", "username": "unknown"})
    out["mentions"] = [user(u) for u in out["mentions"]]
    out["attachments"] = [attachment(a) for a in out["attachments"]]
    replied = out.get("referenced_message")
    if replied is not None:
        if nested:
            out.pop("referenced_message")
        else:
            out["referenced_message"] = message(
                {"channel_id": out.get("channel_id", "0"), **replied}, nested=True
            )
    return out


def attachment(a: dict[str, Any]) -> dict[str, Any]:
    return {"size": 1024, "proxy_url": a.get("url", ""), **a}


def guild_channel(c: dict[str, Any], guild: str, position: int) -> dict[str, Any]:
    """A guild channel (resources/channel.mdx): its overwrites always listed, empty or not."""
    return {
        "flags": 0,
        "guild_id": guild,
        "position": position,
        "nsfw": False,
        "permission_overwrites": [],
        **c,
    }


def thread(t: dict[str, Any], guild: str) -> dict[str, Any]:
    """A thread channel (resources/channel.mdx, "Thread-specific channel fields")."""
    return {
        "flags": 0,
        "guild_id": guild,
        "owner_id": "1001",
        "message_count": 0,
        "member_count": 1,
        "total_message_sent": 0,
        "name": "a thread",
        **t,
        "thread_metadata": {
            "archived": False,
            "archive_timestamp": JOINED,
            "auto_archive_duration": 10080,
            "locked": False,
            **(t.get("thread_metadata") or {}),
        },
    }


def role(r: dict[str, Any], position: int) -> dict[str, Any]:
    """A role (topics/permissions.mdx, "Role Object")."""
    return {
        "position": position,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "managed": False,
        "mentionable": False,
        "icon": None,
        "unicode_emoji": None,
        "flags": 0,
        "permissions": "0",
        **r,
    }


def member(user_id: str, roles: list[str]) -> dict[str, Any]:
    """A guild member (resources/guild.mdx, "Guild Member Object")."""
    return {
        "avatar": None,
        "banner": None,
        "communication_disabled_until": None,
        "flags": 0,
        "joined_at": JOINED,
        "nick": None,
        "pending": False,
        "premium_since": None,
        "roles": roles,
        "user": user({"id": user_id, "username": f"user{user_id}"}),
        "mute": False,
        "deaf": False,
    }


def my_guild(g: dict[str, Any]) -> dict[str, Any]:
    """A partial guild as Get Current User Guilds lists it."""
    return {"icon": None, "banner": None, "owner": False, "permissions": "0", "features": [], **g}


def dm(channel_id: str, recipient: str) -> dict[str, Any]:
    """A DM channel (type 1), as Create DM answers."""
    return {
        "id": channel_id,
        "type": 1,
        "flags": 0,
        "last_message_id": None,
        "recipients": [user({"id": recipient, "username": f"user{recipient}"})],
    }


def application(app_id: str, flags: int) -> dict[str, Any]:
    """The application itself (resources/application.mdx), as GET /applications/@me answers its bot."""
    return {
        "id": app_id,
        "name": "engram",
        "icon": None,
        "description": "",
        "type": None,
        "verify_key": "0" * 64,
        "flags": flags,
        "flags_new": str(flags),
        "redirect_uris": [],
        "interactions_endpoint_url": None,
        "role_connections_verification_url": None,
        "owner": user({"id": "1", "username": "owner"}),
        "approximate_guild_count": 2,
        "approximate_user_install_count": 0,
        "approximate_user_authorization_count": 0,
        "explicit_content_filter": 0,
        "team": None,
        "eligible_oauth2_scopes": [],
        "bot_public": False,
        "bot_require_code_grant": False,
    }
