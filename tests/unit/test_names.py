"""People by the names they go by (engram.names): which authors a question names — by a name of theirs, a
nickname the others call them, another spelling — and how far their memories move up."""

from __future__ import annotations

import types

import pytest

from engram import names
from engram.names import addressed_as, asked_names, author_names, directory, favour, naming_words
from engram.vectors import Hit


def named_authors(question, known):
    return set(naming_words(question, known))


def favour_named(hits, question, weight, asker=None):
    return favour(hits, asked_names(hits, question, asker) if weight else {}, weight)


def hit(i: int, score: float, user: str, text: str = "", **payload) -> Hit:
    return Hit(i, score, {"user": user, "text": text, **payload})


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Hey Mel! How was the concert?", "mel"),
        ("Caroline: Hi Mel, long time", "mel"),  # a chat line's speaker label is not the addressee
        ("Thanks, Jo.", "jo"),
        ("See you on Friday, Zoë!", "zoe"),
        ("Good morning Sam :)", "sam"),
        ("Hey there!", None),
        ("Hi everyone, who is in?", None),
        ("Wow, that is great", None),
        ("hey mel", None),  # a name is written as one: a lower-case word could be anything
        ("I went hiking, Tuesday was lovely", None),
    ],
)
def test_a_turn_addresses_someone_by_the_name_after_a_greeting_or_its_last_comma(text, name):
    assert addressed_as(text) == name


def test_an_authors_names_are_their_user_id_when_it_is_a_name_and_the_names_their_source_gave():
    discord = {
        "user": "81234567890123456",
        "content": {"author": "cool_bob99", "displayName": "Bob", "nick": "Bobby"},
    }
    assert author_names(discord) == {"cool", "bob", "bobby"}  # a snowflake is not a name
    assert author_names({"user": "Caroline"}) == {"caroline"}
    assert author_names({"user": "65f1c0ffee0ddba11ad5e1e7"}) == set()  # LibreChat's database id
    assert author_names({"user": "ana", "content": {"author": 12}}) == {"ana"}  # not text: no name


def test_the_names_a_thread_calls_someone_are_learned_from_the_turns_that_answer_them():
    hits = [
        hit(1, 1.0, "Melanie", "I painted a sunrise last week"),
        hit(2, 0.9, "Caroline", "Hey Mel! That sounds lovely", contextUser="Melanie"),
        hit(3, 0.8, "Caroline", "Thanks, Caroline!", contextUser="Caroline"),  # no one calls themselves
    ]
    assert directory(hits) == {"Melanie": {"melanie", "mel"}, "Caroline": {"caroline"}}


NAMES = {"Melanie": {"melanie", "mel"}, "Caroline": {"caroline"}, "John": {"john"}, "Jon": {"jon"}}


@pytest.mark.parametrize(
    ("question", "named"),
    [
        ("What did Melanie paint?", {"Melanie"}),
        ("what did melanie paint", {"Melanie"}),  # a name is a name in lower case too
        ("What did Mel paint?", {"Melanie"}),  # what the thread calls her
        ("When did Carolin move?", {"Caroline"}),  # another spelling
        ("When did Caro move?", {"Caroline"}),  # a short form, written as a name
        ("What car did Melanie buy?", {"Melanie"}),  # "car" is not Caroline: not written as a name
        ("Where did Jon go?", {"Jon"}),  # a name someone has exactly is theirs alone
        ("When did Melanie join the club?", {"Melanie"}),  # "join" is not John
        ("Did Caroline and Melanie meet?", {"Caroline", "Melanie"}),
        ("What is the weather like?", set()),
    ],
)
def test_a_question_names_the_authors_whose_names_it_has(question, named):
    assert named_authors(question, NAMES) == named


def test_a_discord_mention_names_the_user_of_that_id():
    """How a person is named in Discord: "<@id>", and "<@!id>" in a slash command's string option."""
    names = {"80351110224678912": {"nelly"}, "41771983423143937": set()}
    assert named_authors("what did <@80351110224678912> say?", names) == {"80351110224678912"}
    assert named_authors("did <@!41771983423143937> agree?", names) == {"41771983423143937"}
    assert named_authors("did <@12345> agree?", names) == set()  # no memory of theirs among the hits
    assert named_authors("what about <#80351110224678912>?", names) == set()  # a channel, not a user


def test_a_named_authors_memories_move_up_by_the_weight_of_the_best_score():
    hits = [
        hit(1, 1.0, "Caroline", "I went to a pottery class"),
        hit(2, 0.9, "Caroline", "The class was fun"),
        hit(3, 0.5, "Melanie", "I went to a painting class"),
    ]
    assert [h.id for h in favour_named(hits, "What class did Melanie go to?", 0.0)] == [1, 2, 3]
    assert [h.id for h in favour_named(hits, "What class did Melanie go to?", 0.25)] == [1, 2, 3]
    moved = favour_named(hits, "What class did Melanie go to?", 0.6)  # 0.5 + 0.6 > 1.0
    assert [h.id for h in moved] == [3, 1, 2] and moved[0].score == pytest.approx(1.1)
    # naming no one, or everyone there, moves nothing
    assert [h.id for h in favour_named(hits, "What class was it?", 1.0)] == [1, 2, 3]
    assert [h.id for h in favour_named(hits, "Did Caroline and Melanie take a class?", 1.0)] == [1, 2, 3]


def test_a_question_about_the_asker_favours_the_askers_memories():
    hits = [hit(1, 1.0, "u2", "My sister lives in Lyon"), hit(2, 0.5, "u1", "My sister is called Ines")]
    assert [h.id for h in favour_named(hits, "Where does my sister live?", 1.0, asker="u1")] == [2, 1]
    assert [h.id for h in favour_named(hits, "Where does the sister live?", 1.0, asker="u1")] == [1, 2]
    assert [h.id for h in favour_named(hits, "Where does my sister live?", 1.0)] == [1, 2]  # no asker known


def test_a_speaker_label_two_of_an_authors_texts_start_with_is_a_name_of_theirs():
    hits = [
        hit(1, 1.0, "speaker_a", "Caroline: I went to a support group"),
        hit(2, 0.9, "speaker_a", "Caroline: It was powerful"),
        hit(3, 0.8, "speaker_b", "Note: bring the cake"),  # once: not a name
    ]
    assert directory(hits) == {"speaker_a": {"speaker", "caroline"}, "speaker_b": {"speaker"}}


def test_a_memory_is_spoken_by_its_most_personal_name_and_labelled_with_it_once():
    discord = {"author": "melanie_p", "displayName": "Melanie", "nick": "Mel"}
    assert names.spoken_name("81234567", discord) == "Mel"  # a server nickname before a display name
    assert names.spoken_name("81234567", {"author": "melanie_p"}) == "melanie_p"
    assert names.spoken_name("Caroline", None) == "Caroline"  # a user id that is a name
    assert names.spoken_name("81234567", {"displayName": "  "}) is None  # an id with digits is not
    assert names.labelled("I signed up for a class", "81234567", discord) == "Mel: I signed up for a class"
    # a pasted chat line keeps its own label; a memory without a name stays as it is
    assert names.labelled("Caroline: hi there", "Caroline", None) == "Caroline: hi there"
    assert names.labelled("hi there", "81234567", None) == "hi there"
    # a text that opens with a word and a colon is not labelled by its author for that
    assert (
        names.labelled("Update: the kiln is fixed", "81234567", discord) == "Mel: Update: the kiln is fixed"
    )


def test_every_name_a_source_gives_counts_in_the_words_beside_the_text():
    discord = {"author": "melanie_p", "displayName": "Melanie", "nick": "Mel", "text": "not a name"}
    assert names.author_words("81234567", discord) == "melanie_p Melanie Mel"
    assert names.author_words("Caroline", None) == "Caroline"
    assert names.author_words("81234567", {"attachments": []}) is None
    # a text that carries its author's label names them already: no second copy in its words, as in its
    # meaning (one rule decides both); another label does not count
    assert names.author_words("Caroline", None, "Caroline: I went to a support group") is None
    assert names.author_words("81234567", discord, "mel: see you Thursday") is None
    assert names.author_words("81234567", discord, "Update: kiln fixed") == "melanie_p Melanie Mel"
    # a name is a name up to names.MAX_NAME_CHARS, as LibreChat's are kept
    long = "x" * (names.MAX_NAME_CHARS + 50)
    assert names.author_words(long, None) == long[: names.MAX_NAME_CHARS]


def test_the_index_reads_a_records_text_labelled_only_when_the_setting_says_so():
    record = types.SimpleNamespace(text="pottery on Thursdays", user="81234567", content={"nick": "Mel"})
    assert names.indexed_text(record, author_label=False) == "pottery on Thursdays"
    assert names.indexed_text(record, author_label=True) == "Mel: pottery on Thursdays"


@pytest.mark.parametrize(
    ("question", "named", "said"),
    [
        ("What did Melanie paint?", {"Melanie": "melanie"}, "What did I paint?"),
        # possessive, a nickname, two people, a mention: each as their own memories say it
        ("What is Melanie's favourite book?", {"Melanie": "melanie"}, "What is my favourite book?"),
        ("What did Mel say about it?", {"Melanie": "mel"}, "What did I say about it?"),
        (
            "What did Melanie paint for Caroline\u2019s party?",
            {"Melanie": "melanie", "Caroline": "caroline"},
            "What did I paint for my party?",
        ),
        (
            "what did <@!41771983423143937> approve?",
            {"41771983423143937": "41771983423143937"},
            "what did I approve?",
        ),
        ("Where does Zoë live?", {"Zoe": "zoe"}, "Where does I live?"),  # compared as names are: folded
        # nothing else moves: a name no author has, a word that only contains one
        ("Did Melanie visit Porto with Ana?", {"Melanie": "melanie"}, "Did I visit Porto with Ana?"),
        ("What did Melanies paint?", {"Melanie": "melanie"}, None),
        # the asker alone (no words name them), or no one: the question as it is
        ("What did I say?", {"U1": ""}, None),
        # the first person is the asker's already: "I" would be two people
        ("What did I tell Mel about the trip?", {"Melanie": "mel", "U1": ""}, None),
        ("Did Melanie like my painting?", {"Melanie": "melanie"}, None),
        ("What did we decide?", {}, None),
    ],
)
def test_a_named_persons_meaning_is_asked_as_their_own_memories_put_it(question, named, said):
    assert names.in_first_person(question, named) == said
