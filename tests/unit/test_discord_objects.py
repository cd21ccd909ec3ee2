"""Discord's objects as engram reads them (engram.discord.objects), parsed from the shapes discord-api-docs
gives (resources/message.mdx examples): who a message is from, whom it answers, what it replies to."""

from __future__ import annotations

from engram.discord.objects import Message, messages

# resources/message.mdx, "Example Message" (trimmed to the fields and a few more)
EXAMPLE = {
    "reactions": [{"count": 1, "me": False, "emoji": {"id": None, "name": "🔥"}}],
    "attachments": [],
    "tts": False,
    "embeds": [],
    "timestamp": "2017-07-11T17:27:07.299000+00:00",
    "mention_everyone": False,
    "id": "334385199974967042",
    "pinned": False,
    "edited_timestamp": None,
    "author": {"username": "Mason", "discriminator": "9999", "id": "53908099506183680", "avatar": "a_bab1"},
    "mention_roles": [],
    "content": "Supa Hot",
    "channel_id": "290926798999357250",
    "mentions": [],
    "type": 0,
}


def test_the_documented_example_parses_and_keeps_what_engram_does_not_read():
    message = Message.model_validate(EXAMPLE)
    assert (message.id, message.author.id, message.author.username, message.content) == (
        "334385199974967042",
        "53908099506183680",
        "Mason",
        "Supa Hot",
    )
    assert message.type == 0 and message.edited_timestamp is None and not message.author.bot
    assert message.model_dump()["reactions"] == EXAMPLE["reactions"]  # kept, unread


def test_an_app_s_answer_names_whose_command_it_answers_newest_field_first():
    answer = Message.model_validate(
        {
            "id": "2",
            "author": {"id": "app", "bot": True},
            "content": "Here you go.",
            "interaction_metadata": {"id": "i1", "type": 2, "user": {"id": "alice"}},
            "interaction": {"id": "i1", "type": 2, "name": "ask", "user": {"id": "bob"}},
        }
    )
    assert answer.commanded_by == ["alice", "bob"]
    assert Message.model_validate({"id": "3"}).commanded_by == []


def test_a_reply_names_the_message_it_answers_and_whose_it_was():
    reply = Message.model_validate(
        {
            "id": "5",
            "author": {"id": "bob"},
            "message_reference": {"message_id": "4", "channel_id": "c"},
            "referenced_message": {"id": "4", "author": {"id": "alice"}, "content": "hi"},
        }
    )
    assert (reply.replied_id, reply.replied_author) == ("4", "alice")
    # the message it answered was deleted: Discord sends the reference and null for the message
    orphan = Message.model_validate(
        {"id": "6", "message_reference": {"message_id": "4"}, "referenced_message": None}
    )
    assert (orphan.replied_id, orphan.replied_author) == ("4", None)
    assert Message.model_validate({"id": "7"}).replied_id is None


def test_a_message_with_no_text_attachment_or_embed_is_empty():
    assert Message.model_validate({"id": "1", "content": ""}).empty
    assert not Message.model_validate({"id": "1", "attachments": [{"id": "a", "filename": "x.png"}]}).empty
    assert not Message.model_validate({"id": "1", "embeds": [{"type": "rich"}]}).empty


def test_a_page_parses_whole_and_nothing_is_a_page_of_none():
    assert [m.id for m in messages([EXAMPLE, {"id": "9"}])] == ["334385199974967042", "9"]
    assert messages(None) == []


def test_a_discord_error_knows_what_is_gone_by_its_json_code():
    from engram.discord.errors import UNKNOWN_CHANNEL, UNKNOWN_MESSAGE, DiscordError

    assert DiscordError(404, '{"message": "Unknown Message", "code": 10008}').code == UNKNOWN_MESSAGE
    assert DiscordError(404, '{"message": "Unknown Channel", "code": 10003}').gone
    assert not DiscordError(404, '{"message": "Unknown Member", "code": 10007}').gone  # a person, not a thing
    assert not DiscordError(403, '{"message": "Missing Access", "code": 50001}').gone
    assert DiscordError(502, "<html>bad gateway</html>").code == 0 and UNKNOWN_CHANNEL == 10003


def test_a_followup_names_the_answer_it_continues():
    followup = Message.model_validate(
        {"id": "9", "interaction_metadata": {"id": "i1", "type": 2, "original_response_message_id": "7"}}
    )
    assert followup.interaction_metadata.original_response_message_id == "7"


def test_words_name_mentions_and_keep_forwards_polls_and_voice_messages():
    said = Message.model_validate(
        {
            "id": "1",
            "content": "ask <@42> or <@!43> in <#7>, ping <@&9>, not <#8>",
            "mentions": [
                {"id": "42", "username": "ann", "global_name": "Ann"},
                {"id": "43", "username": "bo"},
            ],
        }
    )
    assert said.words({"7": "garden"}) == "ask @Ann or @bo in #garden, ping @role, not #channel"
    forward = Message.model_validate(
        {"id": "2", "content": "", "message_snapshots": [{"message": {"content": "the meeting moved to 5"}}]}
    )
    assert forward.words() == "(forwarded) the meeting moved to 5" and not forward.empty
    poll = Message.model_validate(
        {
            "id": "3",
            "poll": {
                "question": {"text": "Lunch?"},
                "answers": [
                    {"answer_id": 1, "poll_media": {"text": "tacos"}},
                    {"poll_media": {"text": "soup"}},
                ],
            },
        }
    )
    assert poll.words() == "(poll) Lunch? tacos / soup" and not poll.empty
    voice = Message.model_validate(
        {
            "id": "4",
            "flags": 1 << 13,
            "attachments": [{"id": "a", "content_type": "audio/ogg", "duration_secs": 7.4}],
        }
    )
    assert voice.words() == "(voice message, 7 s)"
    sticker = Message.model_validate(
        {"id": "5", "sticker_items": [{"id": "s", "name": "wave", "format_type": 1}]}
    )
    assert not sticker.empty  # a sticker-only message is not a sign of a missing Message Content intent
    assert Message.model_validate({"id": "6"}).empty


def test_a_channels_position_is_ordered_like_its_ids_and_is_no_ones_message_id():
    from engram.discord.objects import position, sent_after

    mine = str((1_000_000 << 22) | (3 << 17) | 7)  # sent at millisecond 1,000,000 (worker 3, increment 7)
    same_ms, later = str((1_000_000 << 22) | 9), str(1_000_001 << 22)
    kept = position(mine)
    assert int(kept) < int(mine) < int(later) and kept not in (mine, same_ms)
    # read after the position: its whole millisecond again (idempotent), and nothing before it
    assert int(kept) < int(same_ms) and int(kept) >= int(str((999_999 << 22) | 4095))
    # new since: only what was sent in a later millisecond (one of the same millisecond was there to read)
    assert sent_after(later, kept) and not sent_after(mine, kept) and not sent_after(same_ms, kept)
    assert sent_after(later, mine) and not sent_after(mine, mine)  # a message id kept before positions
