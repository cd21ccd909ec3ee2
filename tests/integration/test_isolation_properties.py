"""Property-based isolation (hypothesis): random bots, users, servers and projects, random adds,
updates (merges included), removes and forgets, on both index engines. No list, search, recall or
MCP-style search ever returns another scope's memory, and after a forget neither store holds anything
of that user."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.config.proxy import ProxySettings
from engram.errors import EngramError
from engram.proxy.memory import ChatMemory, Turn
from engram.proxy.projects import ProjectResolver
from engram.store.models import MemoryRecord
from engram.vectors import Scope

USERS, SERVERS, PROJECTS, BOTS = ["u1", "u2", "u3"], ["s1", "s2", None], ["p1", "p2", None], ["b1", "b2"]
WORDS = ["tea", "coffee", "dog", "pup", "garden", "boat", "rowan", "oboe"]

fact = st.builds(lambda a, b: f"The owner likes {a} and {b}.", st.sampled_from(WORDS), st.sampled_from(WORDS))
add = st.tuples(
    st.just("add"),
    st.sampled_from(BOTS),
    fact,
    st.sampled_from(USERS + [None]),
    st.sampled_from(SERVERS),
    st.sampled_from(PROJECTS),
)
message = st.tuples(
    st.just("message"),
    st.sampled_from(BOTS),
    fact,
    st.sampled_from(USERS),
    st.sampled_from(SERVERS),
    st.integers(0, 5),
)
update = st.tuples(st.just("update"), st.integers(0, 30), fact)
remove = st.tuples(st.just("remove"), st.integers(0, 30))
forget = st.tuples(st.just("forget"), st.sampled_from(BOTS), st.sampled_from(USERS))
program = st.lists(st.one_of(add, add, message, update, remove, forget), min_size=3, max_size=14)
queries = st.lists(
    st.tuples(
        st.sampled_from(BOTS),
        st.sampled_from(USERS + [None]),
        st.sampled_from(SERVERS),
        st.sampled_from(PROJECTS),
        st.sampled_from(["fact", "message"]),
        st.sampled_from(WORDS),
    ),
    min_size=1,
    max_size=6,
)


def matches(memory, bot, kind, user, server, project) -> bool:
    return (
        memory.bot == bot
        and memory.kind == kind
        and (user is None or memory.user == user)
        and (server is None or memory.server == server)
        and (project is None or memory.project == project)
    )


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=program, asked=queries)
def test_no_scope_ever_sees_another_and_forget_leaves_nothing(service, steps, asked):
    run = uuid.uuid4().hex[:6]  # every example its own bots: examples share the fixture's stores
    bot_of = {b: f"{b}-{run}" for b in BOTS}
    ids: list[tuple[str, int]] = []
    forgotten: set[tuple[str, str]] = set()
    for step in steps:
        try:
            if step[0] == "add":
                _, b, text, user, server, project = step
                memory, _ = service.add_fact(bot_of[b], text, user=user, server=server, project=project)
                ids.append((bot_of[b], memory.id))
                forgotten.discard((bot_of[b], user))
            elif step[0] == "message":
                _, b, text, user, server, n = step
                from engram.service import ChatMessage

                added = service.add_messages(
                    bot_of[b],
                    [
                        ChatMessage(
                            source_id=f"{run}-{n}-{user}",
                            text=text,
                            user=user,
                            server=server,
                            thread=f"t-{server}",
                        )
                    ],
                )

                memories = added.memories
                ids.extend((bot_of[b], m.id) for m in memories)
                forgotten.discard((bot_of[b], user))
            elif step[0] == "update" and ids:
                bot, memory_id = ids[step[1] % len(ids)]
                service.update(bot, memory_id, step[2])
            elif step[0] == "remove" and ids:
                bot, memory_id = ids[step[1] % len(ids)]
                service.remove(bot, memory_id)
            elif step[0] == "forget":
                _, b, user = step
                service.forget_user(bot_of[b], user)
                forgotten.add((bot_of[b], user))
        except EngramError as exc:
            assert exc.status in (400, 404), (
                exc
            )  # a message already stored, a memory already gone: never a 5xx

    chat = ChatMemory(
        ProxySettings(LIBRECHAT_BOT=bot_of["b1"], MEMORY_RECALL_SCOPE="global"),
        service,
        ProjectResolver(),
        service.state,
    )
    for b, user, server, project, kind, word in asked:
        bot = bot_of[b]
        scope = dict(user=user, server=server, project=project)
        for found in (
            service.list(bot, kind, 500, **scope),
            service.search(bot, word, kind, 50, **scope),
            service.recall(Scope(bot=bot, kind=kind, **scope), word, 50),
        ):
            assert all(matches(m, bot, kind, **scope) for m in found), [
                (m.bot, m.kind, m.user, m.server, m.project) for m in found
            ]
        if user is not None:  # what MCP's search_memory answers for this LibreChat user
            found = chat.search(Turn(user=user, conversation="c", project=None, authorized=True), word, 50)
            assert all(m.bot == bot_of["b1"] and m.user == user and m.kind == "fact" for m in found)

    for bot, user in forgotten:
        assert list(MemoryRecord.by_user.query(f"{bot}#{user}")) == []
        assert service.index.count(Scope(bot=bot, user=user)) == 0
        assert (
            service.list(bot, "fact", 500, user=user) == []
            and service.list(bot, "message", 500, user=user) == []
        )
