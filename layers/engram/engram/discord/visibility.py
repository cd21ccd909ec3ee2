"""Who may read what, computed the way Discord does (topics/permissions.mdx, "Permission Hierarchy"):
base permissions from @everyone (the role whose id is the guild id) OR the member's roles; ADMINISTRATOR
grants everything; then the channel's overwrites in order — @everyone, the member's roles (deny, then
allow), the member. Threads follow their parent channel; reading the text chat of a voice or stage channel
also needs CONNECT ("If the channel is a voice channel, they must also have the CONNECT permission"); a
private thread (type 12) is "only viewable by those invited and those with the MANAGE_THREADS permission"
(resources/channel.mdx); an age-restricted (`nsfw`) channel is for adults only (Developer Policy).

/ask posts its answer in a channel, so a memory may go into it only if everyone who can see that channel
may read the memory's channel. Without listing every member (that needs the privileged members intent),
this is decided for every set of roles a member could hold — exactly, for any number of roles: only the few
permission bits that matter are kept of each role, and the sets of roles are walked as the OR of those bits
(a member's permissions are ORs over their roles), so roles alike collapse into one. Members an overwrite
names are first checked over every role set anyone may hold with their own overwrite on top, and only
where that could matter with their actual roles (one request each). When the walk would be too large, or
Discord cannot say (an error reading a member), the answer is no: never a guess."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import DiscordError
from .objects import Channel, Member, Overwrite, Role

VIEW_CHANNEL = 1 << 10
READ_MESSAGE_HISTORY = 1 << 16
CONNECT = 1 << 20
MANAGE_THREADS = 1 << 34
ADMINISTRATOR = 1 << 3
ALL = (1 << 53) - 1
READ = VIEW_CHANNEL | READ_MESSAGE_HISTORY
# the bits any decision here reads: everything else about a role is irrelevant and collapses
RELEVANT = VIEW_CHANNEL | READ_MESSAGE_HISTORY | CONNECT | MANAGE_THREADS | ADMINISTRATOR
VOICE_CHANNELS = {2, 13}  # voice and stage: their text chat also needs CONNECT
PRIVATE_THREAD = 12
MAX_ROLE_SETS = 4096  # past this many distinct role combinations the answer is no (never reached in practice)


class Undecidable(Exception):
    """Who may read a channel cannot be worked out; the caller treats it as nobody."""


@dataclass
class Guild:
    """What permissions are computed from: roles (id -> permissions), channels (id -> overwrites), thread
    parents, the roles of the members overwrites name, channel types, age-restricted channels and private
    threads."""

    id: str
    roles: dict[str, int]
    overwrites: dict[str, list[Overwrite]]
    parents: dict[str, str] = field(default_factory=dict)
    member_roles: dict[str, list[str]] = field(default_factory=dict)
    types: dict[str, int] = field(default_factory=dict)
    nsfw: set[str] = field(default_factory=set)
    private: set[str] = field(default_factory=set)  # private threads
    # asks Discord for a member's roles (one request), only where their overwrite could change an answer
    roles_of: Callable[[str], list[str]] | None = None

    def channel_of(self, channel: str) -> str | None:
        """The channel whose overwrites apply (a thread's parent); None if unknown here."""
        channel = self.parents.get(channel, channel)
        return channel if channel in self.overwrites else None

    def to_see(self, channel: str) -> int:
        """The bits a member needs to see a channel's messages at all."""
        return VIEW_CHANNEL | (CONNECT if self.types.get(channel) in VOICE_CHANNELS else 0)

    def to_read(self, channel: str) -> int:
        """The bits a member needs to read a channel's history."""
        return self.to_see(channel) | READ_MESSAGE_HISTORY


def permissions(guild: Guild, channel: str, roles: set[str], member: str | None = None) -> int:
    """A member's permissions in a channel (Discord's algorithm)."""
    base = guild.roles.get(guild.id, 0)
    for role in roles:
        base |= guild.roles.get(role, 0)
    if base & ADMINISTRATOR:
        return ALL
    overwrites = {o.id: o for o in guild.overwrites.get(channel, [])}
    base = _overwritten(base, [overwrites.get(guild.id)], None)  # @everyone's (its id: the guild's)
    base = _overwritten(base, [overwrites.get(role) for role in roles], 0)  # the roles', denies then allows
    return _overwritten(base, [overwrites.get(member) if member else None], 1)  # the member's own


def _overwritten(base: int, overwrites: list[Overwrite | None], kind: int | None) -> int:
    """Permissions after a set of channel overwrites of one kind (0 role, 1 member; None: whichever):
    every deny, then every allow, of those present."""
    present = [o for o in overwrites if o is not None and (kind is None or o.type == kind)]
    deny = allow = 0
    for o in present:
        deny, allow = deny | o.deny, allow | o.allow
    return (base & ~deny) | allow


def can_read(guild: Guild, channel: str, roles: set[str], member: str | None = None) -> bool:
    """View Channel and Read Message History both (and Connect, for a voice or stage channel's chat)."""
    needed = guild.to_read(channel)
    return permissions(guild, channel, roles, member) & needed == needed


@dataclass(frozen=True)
class _Pair:
    """The two channels of one decision and what each asks of a member."""

    answer: str
    memory: str
    to_see_answer: int
    to_read_memory: int


def _role_sets(guild: Guild, pair: _Pair) -> set[tuple[int, ...]]:
    """Every distinct combination of roles a member may hold, as what decides here: (role permissions,
    the answer channel's role allow and deny, the memory channel's role allow and deny), relevant bits only,
    each the OR over the held roles (Discord ORs roles together)."""
    by_channel = {
        c: {o.id: o for o in guild.overwrites.get(c, []) if o.type == 0} for c in (pair.answer, pair.memory)
    }
    kinds = set()
    for role, perms in guild.roles.items():
        if role == guild.id:
            continue
        a = by_channel[pair.answer].get(role) or Overwrite(id=role)
        m = by_channel[pair.memory].get(role) or Overwrite(id=role)
        kinds.add(
            (perms & RELEVANT, a.allow & RELEVANT, a.deny & RELEVANT, m.allow & RELEVANT, m.deny & RELEVANT)
        )
    reachable: set[tuple[int, ...]] = {(0, 0, 0, 0, 0)}  # no role but @everyone
    for kind in kinds:
        reachable |= {tuple(x | y for x, y in zip(have, kind, strict=True)) for have in reachable}
        if len(reachable) > MAX_ROLE_SETS:
            raise Undecidable(f"more than {MAX_ROLE_SETS} distinct sets of roles")
    return reachable


def _in_channel(guild: Guild, channel: str, role_perms: int, allow: int, deny: int) -> int:
    """Discord's algorithm on a role set already ORed together (no member overwrite)."""
    base = guild.roles.get(guild.id, 0) | role_perms
    if base & ADMINISTRATOR:
        return ALL
    everyone = next((o for o in guild.overwrites.get(channel, []) if o.id == guild.id), None)
    if everyone is not None:
        base = (base & ~everyone.deny) | everyone.allow
    return (base & ~deny) | allow


def _someone_sees_without_reading(guild: Guild, pair: _Pair) -> bool:
    """Whether some member who can see the answer's channel cannot read the memory's: by their roles
    alone, or by an overwrite naming them."""
    role_sets = _role_sets(guild, pair)
    for perms, a_allow, a_deny, m_allow, m_deny in role_sets:
        sees = _in_channel(guild, pair.answer, perms, a_allow, a_deny)
        reads = _in_channel(guild, pair.memory, perms, m_allow, m_deny)
        if _sees_not_reads(pair, sees, reads):
            return True
    named = _named_members(guild, pair)
    return any(_member_sees_not_reads(guild, pair, member, role_sets) for member in named)


def _own_overwrite(guild: Guild, channel: str, member: str, base: int) -> int:
    """Permissions after the member's own overwrite in a channel (ADMINISTRATOR keeps everything)."""
    if base == ALL:
        return ALL
    return _overwritten(base, [o for o in guild.overwrites.get(channel, []) if o.id == member], 1)


def _sees_not_reads(pair: _Pair, sees: int, reads: int) -> bool:
    """Whether these permissions see the answer's channel but cannot read the memory's."""
    seen = sees & pair.to_see_answer == pair.to_see_answer
    return seen and reads & pair.to_read_memory != pair.to_read_memory


def _named_members(guild: Guild, pair: _Pair) -> list[str]:
    """The members an overwrite of either channel names, in order."""
    channels = (pair.answer, pair.memory)
    named = {o.id for c in channels for o in guild.overwrites.get(c, []) if o.type == 1}
    return sorted(named)


def _member_sees_not_reads(guild: Guild, pair: _Pair, member: str, role_sets: set[tuple[int, ...]]) -> bool:
    """Whether a member an overwrite names sees the answer's channel but cannot read the memory's. Their
    overwrites are first put over every set of roles anyone may hold: when none of those could see without
    reading, their actual roles do not matter and Discord is not asked (a server with 150 member overwrites
    costs no request per member); only otherwise are their roles read."""
    if not any(
        _sees_not_reads(
            pair,
            _own_overwrite(
                guild, pair.answer, member, _in_channel(guild, pair.answer, perms, a_allow, a_deny)
            ),
            _own_overwrite(
                guild, pair.memory, member, _in_channel(guild, pair.memory, perms, m_allow, m_deny)
            ),
        )
        for perms, a_allow, a_deny, m_allow, m_deny in role_sets
    ):
        return False
    if member not in guild.member_roles:
        if guild.roles_of is None:
            raise Undecidable(f"the roles of member {member} are unknown")
        guild.member_roles[member] = guild.roles_of(member)
    roles = set(guild.member_roles[member])
    sees = permissions(guild, pair.answer, roles, member)
    reads = permissions(guild, pair.memory, roles, member)
    return _sees_not_reads(pair, sees, reads)


def readable_by_everyone_who_sees(guild: Guild, answer_channel: str, memory_channel: str) -> bool:
    """Whether everyone who can see `answer_channel` may read `memory_channel`."""
    if answer_channel == memory_channel:
        return True
    answer, memory = guild.channel_of(answer_channel), guild.channel_of(memory_channel)
    if answer is None or memory is None:
        return False
    if memory in guild.nsfw and answer not in guild.nsfw:  # age-restricted words stay age-restricted
        return False
    private = memory_channel in guild.private
    if answer == memory and not private:
        return True
    # a private thread's words reach others only where everyone may manage threads (its members are not
    # listed here: a member of it is not told apart from anyone else who sees the parent)
    to_read = guild.to_read(memory) | (MANAGE_THREADS if private else 0)
    pair = _Pair(answer, memory, guild.to_see(answer), to_read)
    try:
        return not _someone_sees_without_reading(guild, pair)
    except Undecidable:
        return False


class DiscordReader(Protocol):
    """What reading a guild's permissions asks of Discord's REST client (engram.discord.rest)."""

    def roles(self, guild_id: str) -> list[Role]: ...
    def all_channels(self, guild_id: str) -> list[Channel]: ...
    def active_threads(self, guild_id: str) -> list[Channel]: ...
    def member(self, guild_id: str, user_id: str) -> Member: ...


class Visibility:
    """Guild permission data from Discord, cached for a short while (roles and overwrites change rarely;
    a minute is as long as a revoked permission can still let a memory through). A Discord error is never
    cached: the next /ask asks again."""

    def __init__(
        self, client: DiscordReader, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client, self.ttl_s, self.clock = client, ttl_s, clock
        self._cache: dict[str, tuple[float, Guild]] = {}

    def guild(self, guild_id: str) -> Guild:
        """The guild's roles, channels and active threads (three requests); the roles of a member an
        overwrite names are asked for later, only if they matter."""
        hit = self._cache.get(guild_id)
        if hit and self.clock() - hit[0] < self.ttl_s:
            return hit[1]
        roles = {r.id: r.permissions for r in self.client.roles(guild_id)}
        channels = self.client.all_channels(guild_id)
        threads = self.client.active_threads(guild_id)
        found = Guild(
            guild_id,
            roles,
            overwrites={c.id: list(c.permission_overwrites) for c in channels},
            parents={t.id: t.parent_id for t in threads if t.parent_id},
            types={c.id: c.type for c in channels},
            nsfw={c.id for c in channels if c.nsfw},
            private={t.id for t in threads if t.type == PRIVATE_THREAD},
        )
        # a member an overwrite names is read only where their roles could change an answer (and then kept
        # with the guild for the cache's minute)
        found.roles_of = lambda member: self._roles_of(guild_id, member)
        self._cache[guild_id] = (self.clock(), found)
        return found

    def _roles_of(self, guild_id: str, member: str) -> list[str]:
        """A member's roles; [] for one who left (404, 10007 Unknown Member: their overwrite can show them
        nothing now). Any other error propagates: not knowing is not "no roles"."""
        try:
            return list(self.client.member(guild_id, member).roles)
        except DiscordError as exc:
            if exc.status == 404:
                return []
            raise

    def allowed(
        self,
        guild_id: str,
        answer_channel: str,
        memory_channels: set[str],
        parents: dict[str, str] | None = None,
        private: set[str] | None = None,
        answer: dict[str, Any] | None = None,
    ) -> set[str]:
        """Which of these channels' memories may go into an answer posted in `answer_channel`. `parents` and
        `private`: threads' channels and which are private, as stored with their memories (for threads no
        longer active); `answer`: the answer channel as the interaction payload gave it (type, parent_id),
        which Discord sends with every interaction."""
        known = self.guild(guild_id)
        guild = Guild(
            known.id,
            known.roles,
            known.overwrites,
            {**(parents or {}), **known.parents},
            known.member_roles,
            known.types,
            known.nsfw,
            known.private | (private or set()),
            known.roles_of,
        )
        if answer and answer.get("parent_id") and answer_channel not in guild.parents:
            guild.parents[answer_channel] = str(answer["parent_id"])
        if answer and answer.get("type") == PRIVATE_THREAD:
            guild.private.add(answer_channel)
        return {c for c in memory_channels if readable_by_everyone_who_sees(guild, answer_channel, c)}
