"""Channel visibility the way Discord computes it (topics/permissions.mdx), and the /ask rule built on it:
a memory may go into an answer only if everyone who can see the answer's channel may read the memory's."""

from __future__ import annotations

from engram.discord.objects import Channel, Member, Overwrite, Role
from engram.discord.visibility import ADMINISTRATOR, READ, READ_MESSAGE_HISTORY, VIEW_CHANNEL, Guild, can_read
from engram.discord.visibility import readable_by_everyone_who_sees as ok

G = "g1"
STAFF, MUTED, MOD = "r-staff", "r-muted", "r-mod"


def guild(overwrites, roles=None, parents=None, members=None) -> Guild:
    base = {G: READ, STAFF: 0, MUTED: 0, MOD: 0, **(roles or {})}
    return Guild(G, base, {c: list(o) for c, o in overwrites.items()}, parents or {}, members or {})


def role(id_, allow=0, deny=0):
    # as Discord sends an overwrite (resources/channel.mdx): its bits as strings of digits
    return Overwrite.model_validate({"id": id_, "type": 0, "allow": str(allow), "deny": str(deny)})


def member(id_, allow=0, deny=0):
    return Overwrite.model_validate({"id": id_, "type": 1, "allow": str(allow), "deny": str(deny)})


PRIVATE = [role(G, deny=VIEW_CHANNEL), role(STAFF, allow=VIEW_CHANNEL)]


def test_discords_order_everyone_then_roles_then_the_member():
    g = guild({"staff": PRIVATE, "general": []})
    assert can_read(g, "general", set()) and not can_read(g, "staff", set())
    assert can_read(g, "staff", {STAFF})
    # a role deny loses to another role's allow (deny then allow over all roles), a member overwrite wins last
    g = guild({"c": [role(MUTED, deny=VIEW_CHANNEL), role(STAFF, allow=VIEW_CHANNEL)]})
    assert can_read(g, "c", {MUTED, STAFF}) and not can_read(g, "c", {MUTED})
    g = guild({"c": [role(STAFF, allow=VIEW_CHANNEL), member("u9", deny=VIEW_CHANNEL)]})
    assert not can_read(g, "c", {STAFF}, "u9") and can_read(g, "c", {STAFF}, "u8")
    # ADMINISTRATOR sees everything, overwrites or not; no history permission is no reading
    g = guild({"staff": PRIVATE}, roles={MOD: ADMINISTRATOR})
    assert can_read(g, "staff", {MOD})
    g = guild({"c": [role(G, deny=READ_MESSAGE_HISTORY)]})
    assert not can_read(g, "c", set())


def test_a_public_answer_carries_nothing_from_a_private_channel_and_a_private_one_may():
    g = guild({"staff": PRIVATE, "general": [], "lobby": []})
    assert not ok(g, "general", "staff")  # #staff words never reach #general, whoever asks
    assert ok(g, "staff", "general") and ok(g, "general", "lobby") and ok(g, "staff", "staff")


def test_a_role_denied_the_memorys_channel_who_can_see_the_answer_blocks_it():
    g = guild({"general": [], "news": [role(MUTED, deny=VIEW_CHANNEL)]})
    assert not ok(g, "general", "news")  # a muted member reads #general but not #news
    assert ok(g, "news", "general")


def test_a_member_an_overwrite_lets_in_must_read_the_memory_too():
    g = guild({"staff": PRIVATE, "ops": PRIVATE + [member("u7", allow=VIEW_CHANNEL)]}, members={"u7": []})
    assert not ok(g, "ops", "staff")  # u7 sees #ops through their own overwrite, not #staff
    assert ok(g, "staff", "ops")
    g = guild(
        {"staff": PRIVATE, "ops": PRIVATE + [member("u7", allow=VIEW_CHANNEL)]}, members={"u7": [STAFF]}
    )
    assert ok(g, "ops", "staff")  # ... unless they are staff anyway


def test_threads_follow_their_parent_and_unknown_channels_never_pass():
    g = guild({"staff": PRIVATE, "general": []}, parents={"t-staff": "staff", "t-gen": "general"})
    assert not ok(g, "general", "t-staff") and ok(g, "t-gen", "general") and ok(g, "t-staff", "t-gen")
    assert not ok(g, "general", "archived-thread-we-never-saw")


def test_a_private_thread_reaches_only_itself_or_audiences_that_may_manage_threads():
    from engram.discord.visibility import MANAGE_THREADS

    g = guild({"general": [], "mods": PRIVATE}, parents={"pt": "general", "pub": "general"})
    g.private.add("pt")
    assert not ok(g, "general", "pt")  # a member outside the thread reads #general
    assert not ok(g, "pub", "pt") and ok(g, "pt", "pt") and ok(g, "pt", "general")
    # where everyone who sees the answer may manage threads (and so read every private thread), it may go
    g = guild(
        {"general": [], "mods": PRIVATE},
        roles={STAFF: MANAGE_THREADS},
        parents={"pt": "general"},
    )
    g.private.add("pt")
    assert ok(g, "mods", "pt") and not ok(g, "general", "pt")


def test_age_restricted_words_stay_in_age_restricted_channels():
    g = guild({"general": [], "after-dark": [], "adults": []})
    g.nsfw |= {"after-dark", "adults"}
    assert not ok(g, "general", "after-dark")
    assert ok(g, "adults", "after-dark") and ok(g, "after-dark", "general")


def test_a_voice_channels_chat_needs_connect_to_read():
    from engram.discord.visibility import CONNECT

    locked = [role(G, deny=CONNECT)]  # everyone may view the voice channel, nobody may join it
    g = guild({"general": [], "voice": locked}, roles={STAFF: CONNECT})
    g.types["voice"] = 2
    assert not ok(g, "general", "voice") and not can_read(g, "voice", set())
    g = guild({"general": [], "voice": []}, roles={G: READ | CONNECT})
    g.types["voice"] = 2
    assert ok(g, "general", "voice")  # open to all who read #general


def test_any_number_of_roles_is_decided_exactly():
    """A verification-role server: @everyone sees nothing, @Member sees the server, @Restricted is denied
    #serious; with 45 roles, @Member (named in no overwrite) together with @Restricted still blocks it."""
    member_role, restricted = "r-member", "r-restricted"
    roles = {G: 0, member_role: READ, restricted: 0, **{f"r-{i}": 0 for i in range(42)}}
    g = Guild(G, roles, {"general": [], "serious": [role(restricted, deny=VIEW_CHANNEL)]})
    assert len(g.roles) == 45
    assert not ok(g, "general", "serious") and ok(g, "serious", "general")
    # many roles alike collapse: 200 distinct roles decide in no time
    g.roles.update({f"r-big-{i}": (1 << (i % 5)) for i in range(200)})
    assert not ok(g, "general", "serious")


def test_what_cannot_be_decided_is_a_no_and_a_members_roles_are_asked_for_only_where_they_matter():
    # ops: only u7 (a member overwrite) sees it; staff: staff only. Whether u7 may read staff hangs on u7's
    # roles, which are unknown: no
    g = guild(
        {
            "ops": [role(G, deny=VIEW_CHANNEL), member("u7", allow=VIEW_CHANNEL)],
            "staff": PRIVATE,
            "general": [],
        }
    )
    assert not ok(g, "ops", "staff")
    # ... while whatever u7's roles, u7 reads general: decided without them
    asked = []
    g.roles_of = lambda who: asked.append(who) or []
    assert ok(g, "ops", "general") and asked == []
    assert not ok(g, "ops", "staff") and asked == ["u7"]  # asked now, once: they hold no staff role
    g.member_roles["u7"] = [STAFF]
    assert ok(g, "ops", "staff")


def test_a_discord_error_reading_a_member_is_not_cached_as_no_roles():
    from engram.discord.rest import DiscordError
    from engram.discord.visibility import Visibility

    class Client:
        fail = True

        # what the REST client hands over: Discord's JSON, parsed
        def roles(self, guild_id):
            return [Role.model_validate(r) for r in ({"id": G, "permissions": str(READ)}, {"id": STAFF})]

        def all_channels(self, guild_id):
            overwrites = [role(G, deny=VIEW_CHANNEL), member("u7", allow=VIEW_CHANNEL)]
            return [
                Channel(id="staff", type=0, permission_overwrites=PRIVATE),
                Channel(id="ops", type=0, permission_overwrites=overwrites),
            ]

        def active_threads(self, guild_id):
            return []

        def member(self, guild_id, user_id):
            if self.fail:
                raise DiscordError(500, "Internal Server Error")
            return Member.model_validate({"roles": [STAFF]})

    client = Client()
    seen = Visibility(client)
    try:
        seen.allowed(G, "ops", {"staff"})
        raise AssertionError("an error must not pass as an answer")
    except DiscordError:
        pass
    client.fail = False
    assert seen.allowed(G, "ops", {"staff"}) == {"staff"}
