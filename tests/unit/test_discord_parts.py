"""The interactions function on the sample events in events/, signed with a real Ed25519 key; the
verifier; command registration; and that the webhook path stays lean."""

import json
import time
from pathlib import Path

import httpx
import pytest
from nacl.signing import SigningKey

from engram.discord.verify import verify_request
from infra.register_commands import COMMANDS, register

ROOT = Path(__file__).resolve().parents[2]
SIGNER = SigningKey.generate()


def test_verify_request():
    body, ts = b'{"type":1}', str(int(time.time()))
    sig = SIGNER.sign(ts.encode() + body).signature.hex()
    key = SIGNER.verify_key.encode().hex()
    assert verify_request(key, sig, ts, body)
    assert not verify_request(key, sig, ts, body + b" ")
    assert not verify_request(key, sig, str(int(ts) + 1), body)
    assert not verify_request(key, "zz", ts, body) and not verify_request(key, None, ts, body)
    assert not verify_request(None, sig, ts, body) and not verify_request("nothex", sig, ts, body)
    assert not verify_request(key, sig, ts, body, now=int(ts) + 301)


def test_register_commands_puts_both_commands():
    seen = []

    def handle(request):
        seen.append(
            (request.method, request.url.path, request.headers["authorization"], json.loads(request.content))
        )
        return httpx.Response(200, json=json.loads(request.content))

    done = register(
        "900", "tok", "https://discord.test/api/v10", guild="g1", transport=httpx.MockTransport(handle)
    )
    assert [c["name"] for c in done] == ["memory", "ask", "Forget this message"]
    assert seen[0][:3] == ("PUT", "/api/v10/applications/900/guilds/g1/commands", "Bot tok")
    assert {o["name"] for o in COMMANDS[0]["options"]} == {"remember", "forget", "status", "export"}
    assert COMMANDS[1]["options"][0]["required"] is True
    # where each shows: /memory in a server and the bot's DM, /ask only in a server; installed to servers
    assert [(c["name"], c["type"], c["contexts"], c["integration_types"]) for c in COMMANDS] == [
        ("memory", 1, [0, 1], [0]),
        ("ask", 1, [0], [0]),
        ("Forget this message", 3, [0], [0]),
    ]


def test_long_answers_are_split_at_word_boundaries_within_discord_s_limit():
    from engram.discord.ask import split_message

    parts = split_message(" ".join(f"word{i}" for i in range(1000)))
    assert all(len(p) <= 2000 for p in parts) and len(parts) == 4
    assert " ".join(parts).split() == [f"word{i}" for i in range(1000)]
    assert split_message("short") == ["short"] and [len(p) for p in split_message("x" * 4100)] == [
        2000,
        2000,
        100,
    ]


def test_rate_limits_delay_instead_of_breaking_them():
    from engram.discord.rest import DiscordClient, RateLimited, RateLimits

    now = [100.0]
    limits = RateLimits(clock=lambda: now[0], max_sleep_s=0)
    calls = []

    def handle(request):
        calls.append(request.url.path)
        if request.url.path.endswith("/c9/messages") and len(calls) > 3:
            return httpx.Response(429, json={"retry_after": 2.5, "global": False})
        remaining = "0" if request.url.path.endswith("/c1/messages") else "5"
        return httpx.Response(
            200,
            json=[],
            headers={
                "x-ratelimit-bucket": "b-" + request.url.path.split("/")[-2],
                "x-ratelimit-remaining": remaining,
                "x-ratelimit-reset-after": "1.5",
            },
        )

    client = DiscordClient(
        "https://d.test/api/v10", "tok", "900", transport=httpx.MockTransport(handle), limits=limits
    )
    client.messages("c1")
    with pytest.raises(RateLimited) as limited:  # the bucket is used up: delay, don't ask
        client.messages("c1")
    assert limited.value.retry_after == pytest.approx(1.5) and len(calls) == 1
    now[0] += 2
    client.messages("c1")
    client.messages("c9")
    with pytest.raises(RateLimited) as told:  # Discord's own 429 carries retry_after
        client.messages("c9")
    assert told.value.retry_after == 2.5
    now[0] += 10
    for _ in range(RateLimits.GLOBAL_PER_SECOND):
        limits.before("GET", "/x")
    with pytest.raises(RateLimited) as global_limit:
        limits.before("GET", "/y")
    assert global_limit.value.is_global


def test_a_short_rate_limit_is_waited_out_in_the_job():
    """A job that lists a thousand channels would hit the global 50 a second and, delayed on the queue,
    start over and hit it again forever: waits under a second are slept instead."""
    from engram.discord.rest import RateLimited, RateLimits

    now, slept = [100.0], []

    def sleep(s):
        slept.append(s)
        now[0] += s

    limits = RateLimits(clock=lambda: now[0], sleep=sleep)
    for i in range(3 * RateLimits.GLOBAL_PER_SECOND):
        limits.before("GET", f"/channels/{i}")
    assert len(slept) == 2 and now[0] == pytest.approx(102.0)
    # Discord's answer: the route's bucket "b", used up for 30 s (x-ratelimit-* headers)
    used_up = {"x-ratelimit-bucket": "b", "x-ratelimit-remaining": "0", "x-ratelimit-reset-after": "30"}
    limits.after("GET", "/long", 200, used_up)
    with pytest.raises(RateLimited):  # a long one still delays the job on the queue
        limits.before("GET", "/long")


def test_a_bucket_is_counted_per_major_parameter():
    """topics/rate-limits.mdx: one bucket hash, counted separately per channel (guild, webhook token): one
    channel's used-up bucket holds back no other channel."""
    from engram.discord.limits import RateLimited, RateLimits, major, route

    assert route("GET", "/channels/123/messages") == route("GET", "/channels/456/messages")
    assert major("/channels/123/messages") != major("/channels/456/messages")
    assert major("/webhooks/900/tok-a/messages/@original") == "/webhooks/900/tok-a"
    now = [10.0]
    limits = RateLimits(clock=lambda: now[0], max_sleep_s=0)
    used_up = {"x-ratelimit-bucket": "h", "x-ratelimit-remaining": "0", "x-ratelimit-reset-after": "5"}
    limits.after("GET", "/channels/123/messages", 200, used_up)
    with pytest.raises(RateLimited):
        limits.before("GET", "/channels/123/messages")
    limits.before("GET", "/channels/456/messages")  # another channel: at once
    limits.before("GET", "/guilds/1/channels")


def test_a_global_429_stops_every_route_and_429s_and_invalid_requests_are_counted():
    from engram.discord.limits import RateLimited, RateLimits

    now, counted = [10.0], []
    limits = RateLimits(clock=lambda: now[0], max_sleep_s=0, on_count=counted.append)
    limits.after("GET", "/channels/1/messages", 429, {"x-ratelimit-scope": "global"}, retry_after=3)
    with pytest.raises(RateLimited) as stopped:
        limits.before("GET", "/guilds/2/roles")
    assert stopped.value.is_global
    limits.after("GET", "/channels/1/messages", 429, {"x-ratelimit-scope": "shared"}, retry_after=1)
    limits.after("GET", "/channels/1/messages", 403, {})
    limits.after("GET", "/guilds/2/members/3", 404, {})  # Unknown Member: not what Discord counts
    limits.after("GET", "/channels/1/messages", 401, {})
    assert counted == [
        "discord429Global",
        "discordInvalidRequests",
        "discord429Shared",  # shared 429s do not count toward the ban
        "discordInvalidRequests",
        "discordInvalidRequests",
    ]


def test_the_shared_global_limit_holds_any_second_under_fifty_across_processes():
    """Two processes' limiters share one count (as in DynamoDB): whatever the interleaving, no one-second span
    holds more than 50 requests; without the count, each falls back to a small share of its own."""
    from engram.discord.limits import RateLimits, shared_global

    windows: dict[int, int] = {}

    def take_slot(window, limit, expires):
        if windows.get(window, 0) >= limit:
            return False
        windows[window] = windows.get(window, 0) + 1
        return True

    now, sent = [1000.0], []

    def sleep(s):
        now[0] += s

    workers = []
    for _ in range(2):
        shared = shared_global(take_slot)
        shared.clock = lambda: now[0]
        workers.append(RateLimits(clock=lambda: now[0], sleep=sleep, global_limit=shared))
    for i in range(400):
        workers[i % 2].before("GET", f"/channels/{i}/messages")
        sent.append(now[0])
        now[0] += 0.001
    busiest = max(sum(1 for t in sent if start <= t < start + 1) for start in sent)
    assert busiest <= 50 and busiest >= 40
    assert sent[-1] - sent[0] < 400 / 40 + 1  # paced, not stalled

    def down(window, limit, expires):
        raise ConnectionError("DynamoDB unreachable")

    alone = shared_global(down)
    alone.fallback.clock = lambda: now[0]
    assert alone.admit() is None  # falls back to its own small count


def test_archived_listings_are_asked_only_where_discord_could_answer():
    from engram.discord.objects import Channel
    from engram.discord.rest import MANAGE_THREADS, VIEW_AND_HISTORY, archived_kinds

    text, announcement, forum, voice = (Channel(id=str(t), type=t) for t in (0, 5, 15, 2))
    assert archived_kinds(text, None) == ["public", "private"]  # permissions unknown: what the type allows
    assert archived_kinds(announcement, None) == ["public"] and archived_kinds(voice, None) == []
    assert archived_kinds(text, VIEW_AND_HISTORY) == ["public"]  # private ones need Manage Threads
    assert archived_kinds(text, VIEW_AND_HISTORY | MANAGE_THREADS) == ["public", "private"]
    assert archived_kinds(forum, VIEW_AND_HISTORY | MANAGE_THREADS) == ["public"]
    assert archived_kinds(text, 1 << 10) == []  # no history: nothing


def test_x_ray_keeps_only_the_host_of_an_outgoing_request():
    """A traced request's path can be someone's link or attachment name; X-Ray keeps it 30 days."""
    from aws_xray_sdk.core.models import http
    from aws_xray_sdk.core.models.segment import Segment
    from aws_xray_sdk.core.models.subsegment import Subsegment

    from engram.observability import host_only_urls

    host_only_urls()
    segment = Segment("engram")
    sub = Subsegment("cdn.discordapp.com", "remote", segment)
    sub.put_http_meta(http.URL, "https://cdn.discordapp.com/attachments/1/2/my-medical-letter.pdf?ex=1")
    sub.put_http_meta(http.METHOD, "GET")
    assert sub.http["request"] == {"url": "https://cdn.discordapp.com", "method": "GET"}


def test_window_re_reads_are_ordered_to_the_millisecond_and_older_second_stamps_still_read():
    """Two ticks in one second must still tell which quiet channel was re-read last (CI saw one channel
    re-read twice while the other waited); stamps written in seconds before are read as seconds."""
    from engram.bookkeeping import ChannelSeen
    from engram.discord.catchup import window_at_ms

    assert window_at_ms(ChannelSeen(window_at=1_764_000_000)) == 1_764_000_000_000
    assert window_at_ms(ChannelSeen(window_at=1_764_000_000_123)) == 1_764_000_000_123
    assert window_at_ms(ChannelSeen()) == 0
    read_first, read_after = (
        ChannelSeen(window_at=1_764_000_000_100),
        ChannelSeen(window_at=1_764_000_000_900),
    )
    assert sorted([read_after, read_first], key=window_at_ms) == [read_first, read_after]


def test_a_channel_refused_again_and_again_is_tried_less_and_less_often(engine):
    import httpx

    from engram.config.discord import DiscordSettings
    from engram.discord.core import UNREADABLE_MAX_S, UNREADABLE_RETRY_S, DiscordCore
    from engram.discord.rest import DiscordClient

    core = DiscordCore(
        DiscordSettings(DISCORD_APPLICATION_ID="900"),
        engine.service,
        engine.queue,
        DiscordClient(
            "http://discord.invalid", "t", "900", transport=httpx.MockTransport(lambda r: httpx.Response(500))
        ),
        engine.state,
        httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500))),
    )
    waits = []
    for _ in range(12):
        core.unreadable_now("c1", "Discord answered 403")
        mark = engine.state.channels.unreadable("900", ["c1"])["c1"]
        waits.append((mark.strikes, mark.retry_at - now_s()))
    assert [s for s, _ in waits] == list(range(1, 13))
    first, second, last = waits[0][1], waits[1][1], waits[-1][1]
    assert 0.8 * UNREADABLE_RETRY_S - 2 <= first <= 1.2 * UNREADABLE_RETRY_S
    assert 1.6 * UNREADABLE_RETRY_S - 2 <= second <= 2.4 * UNREADABLE_RETRY_S
    assert 0.8 * UNREADABLE_MAX_S - 2 <= last <= 1.2 * UNREADABLE_MAX_S  # a week apart at most
    engine.state.channels.readable_again("900", "c1")
    core.unreadable_now("c1", "Discord answered 403")
    assert engine.state.channels.unreadable("900", ["c1"])["c1"].strikes == 1  # readable in between: anew


def now_s() -> int:
    import time

    return int(time.time())


def test_webhook_calls_carry_no_authorization_and_answers_suppress_embeds_and_a_dead_token_answers_by_dm(
    engine,
):
    import json as _json

    import httpx

    from engram.config.discord import DiscordSettings
    from engram.discord.core import DiscordCore
    from engram.discord.rest import SUPPRESS_EMBEDS, DiscordClient

    seen = []

    def discord(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "/webhooks/" in request.url.path:
            return httpx.Response(404, json={"message": "Unknown Webhook", "code": 10015})
        if request.url.path == "/users/@me/channels":
            return httpx.Response(200, json={"id": "55", "type": 1})
        return httpx.Response(200, json={"id": str(len(seen)), "channel_id": "55", "content": "x"})

    client = DiscordClient("http://discord.invalid", "t", "900", transport=httpx.MockTransport(discord))
    core = DiscordCore(
        DiscordSettings(DISCORD_APPLICATION_ID="900"),
        engine.service,
        engine.queue,
        client,
        engine.state,
        httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500))),
    )
    posted = core.reply_parts("dead-token", now_s() * 1000, "42", ["part one", "part two", "part three"])
    hooks = [r for r in seen if "/webhooks/" in r.url.path]
    assert hooks and all("authorization" not in r.headers for r in hooks)  # the token in the path is enough
    assert _json.loads(hooks[0].content)["flags"] & SUPPRESS_EMBEDS
    dms = [r for r in seen if r.url.path == "/channels/55/messages"]
    assert len(posted) == 3 and len(dms) == 3  # every part by DM once the token is dead, none to the token
    assert all(r.headers["authorization"] == "Bot t" for r in dms)


def test_the_catch_up_lag_is_the_time_since_the_rotation_last_started_again():
    """Issue 46: the catch-up lag (a metric each tick): how long the quietest server has waited."""
    from engram.bookkeeping import RosterMark

    mark, lag = RosterMark().visited(now=1_000_000, wrapped=False)
    assert lag is None and mark.round_started == 1_000_000  # the first tick starts the clock
    mark, lag = mark.moved(after="g5").visited(now=1_600_000, wrapped=False)
    assert lag == 600 and mark.round_started == 1_000_000  # mid-rotation: the clock runs on
    mark, lag = mark.visited(now=2_200_000, wrapped=True)
    assert lag == 1_200 and mark.round_started == 2_200_000  # back at the roster's start: again from 0
    assert RosterMark.from_data(mark.to_data()) == mark
