"""Who may read what, computed the way Discord does (topics/permissions.mdx, "Permission Hierarchy"):
base permissions from @everyone (the role whose id is the guild id) OR the member's roles; ADMINISTRATOR
grants everything; then the channel's overwrites in order — @everyone, the member's roles (deny, then
allow), the member. Threads follow their parent channel.

/ask posts its answer in a channel, so a memory may go into it only if everyone who can see that channel
may read the memory's channel. Without listing every member (that needs the privileged members intent),
this is checked for every audience of up to two roles (@everyone alone, each role, each pair) and for every
member an overwrite names: a channel passes only if each of them who can view the answer's channel can
view it too. Conservative: an unknown channel never passes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import combinations

VIEW_CHANNEL = 1 << 10
READ_MESSAGE_HISTORY = 1 << 16
ADMINISTRATOR = 1 << 3
ALL = (1 << 53) - 1
READ = VIEW_CHANNEL | READ_MESSAGE_HISTORY
MAX_PAIRS_ROLES = 40  # above this many roles, pairs are formed only of roles some overwrite names


def _bits(value) -> int:
    return int(value or 0)


@dataclass
class Guild:
    """What permissions are computed from: roles (id -> permissions), channels (id -> overwrites), thread
    parents, and the roles of the members overwrites name."""

    id: str
    roles: dict[str, int]
    overwrites: dict[str, list[dict]]
    parents: dict[str, str] = field(default_factory=dict)
    member_roles: dict[str, list[str]] = field(default_factory=dict)

    def channel_of(self, channel: str) -> str | None:
        """The channel whose overwrites apply (a thread's parent); None if unknown here."""
        channel = self.parents.get(channel, channel)
        return channel if channel in self.overwrites else None


def permissions(guild: Guild, channel: str, roles: set[str], member: str | None = None) -> int:
    """A member's permissions in a channel (Discord's algorithm)."""
    base = guild.roles.get(guild.id, 0)
    for role in roles:
        base |= guild.roles.get(role, 0)
    if base & ADMINISTRATOR:
        return ALL
    overwrites = {o["id"]: o for o in guild.overwrites.get(channel, [])}
    everyone = overwrites.get(guild.id)
    if everyone:
        base = (base & ~_bits(everyone.get("deny"))) | _bits(everyone.get("allow"))
    allow = deny = 0
    for role in roles:
        o = overwrites.get(role)
        if o and int(o.get("type", 0)) == 0:
            allow, deny = allow | _bits(o.get("allow")), deny | _bits(o.get("deny"))
    base = (base & ~deny) | allow
    own = overwrites.get(member) if member else None
    if own and int(own.get("type", 1)) == 1:
        base = (base & ~_bits(own.get("deny"))) | _bits(own.get("allow"))
    return base


def can_read(guild: Guild, channel: str, roles: set[str], member: str | None = None) -> bool:
    """View Channel and Read Message History both."""
    return permissions(guild, channel, roles, member) & READ == READ


def audiences(guild: Guild, *channels: str) -> list[tuple[set[str], str | None]]:
    """The (roles, member) combinations checked: no role, each role, each pair of roles, and each member
    an overwrite of these channels names (with their roles)."""
    roles = [r for r in guild.roles if r != guild.id]
    named = {o["id"] for c in channels for o in guild.overwrites.get(c, []) if int(o.get("type", 0)) == 0}
    paired = roles if len(roles) <= MAX_PAIRS_ROLES else [r for r in roles if r in named]
    out: list[tuple[set[str], str | None]] = [(set(), None)] + [({r}, None) for r in roles]
    out += [({a, b}, None) for a, b in combinations(paired, 2)]
    members = {o["id"] for c in channels for o in guild.overwrites.get(c, []) if int(o.get("type", 0)) == 1}
    out += [(set(guild.member_roles.get(m, [])), m) for m in sorted(members)]
    return out


def readable_by_everyone_who_sees(guild: Guild, answer_channel: str, memory_channel: str) -> bool:
    """Whether everyone who can see `answer_channel` may read `memory_channel`."""
    answer, memory = guild.channel_of(answer_channel), guild.channel_of(memory_channel)
    if answer is None or memory is None:
        return False
    if answer == memory:
        return True
    return all(
        can_read(guild, memory, roles, member)
        for roles, member in audiences(guild, answer, memory)
        if permissions(guild, answer, roles, member) & VIEW_CHANNEL
    )


class Visibility:
    """Guild permission data from Discord, cached for a short while (roles and overwrites change rarely;
    a minute is as long as a revoked permission can still let a memory through)."""

    def __init__(self, client, ttl_s: float = 60.0, clock=time.monotonic):
        self.client, self.ttl_s, self.clock = client, ttl_s, clock
        self._cache: dict[str, tuple[float, Guild]] = {}

    def guild(self, guild_id: str) -> Guild:
        """The guild's roles, channel overwrites, thread parents and the roles of members overwrites name."""
        hit = self._cache.get(guild_id)
        if hit and self.clock() - hit[0] < self.ttl_s:
            return hit[1]
        roles = {r["id"]: _bits(r.get("permissions")) for r in self.client.roles(guild_id)}
        channels = self.client.all_channels(guild_id)
        overwrites = {c["id"]: list(c.get("permission_overwrites") or []) for c in channels}
        parents = {
            t["id"]: t["parent_id"] for t in self.client.active_threads(guild_id) if t.get("parent_id")
        }
        members = {o["id"] for ows in overwrites.values() for o in ows if int(o.get("type", 0)) == 1}
        member_roles = {}
        for member in sorted(members):
            try:
                member_roles[member] = list(self.client.member(guild_id, member).get("roles") or [])
            except Exception:  # gone from the guild: their overwrite can no longer show them anything
                member_roles[member] = []
        found = Guild(guild_id, roles, overwrites, parents, member_roles)
        self._cache[guild_id] = (self.clock(), found)
        return found

    def allowed(
        self,
        guild_id: str,
        answer_channel: str,
        memory_channels: set[str],
        parents: dict[str, str] | None = None,
    ) -> set[str]:
        """Which of these channels' memories may go into an answer posted in `answer_channel` (`parents`:
        threads' channels as stored with their memories, for threads no longer active)."""
        known = self.guild(guild_id)
        guild = Guild(
            known.id, known.roles, known.overwrites, {**(parents or {}), **known.parents}, known.member_roles
        )
        return {c for c in memory_channels if readable_by_everyone_who_sees(guild, answer_channel, c)}
