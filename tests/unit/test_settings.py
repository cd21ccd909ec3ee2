"""The one settings tree: one Ollama URL for every part that talks to Ollama, the sections of the doors
inside it, and the one module that reads a secret."""

from __future__ import annotations

import pytest

from engram.config import Settings
from engram.config.discord import DiscordSettings


def test_the_ollama_url_is_read_from_engram_ollama_url(monkeypatch):
    monkeypatch.setenv("ENGRAM_OLLAMA_URL", "http://ollama.internal:11434")
    assert Settings().ollama_url == "http://ollama.internal:11434"


def test_its_older_name_is_still_read_and_the_new_one_wins(monkeypatch):
    monkeypatch.delenv("ENGRAM_OLLAMA_URL", raising=False)
    monkeypatch.setenv("OLLAMA_URL", "http://old-name:11434")
    assert Settings().ollama_url == "http://old-name:11434"
    monkeypatch.setenv("ENGRAM_OLLAMA_URL", "http://new-name:11434")
    assert Settings().ollama_url == "http://new-name:11434"


def test_an_empty_ollama_url_is_not_set(monkeypatch):
    monkeypatch.setenv("ENGRAM_OLLAMA_URL", "")  # what the template sets an unused parameter to
    monkeypatch.delenv("OLLAMA_URL", raising=False)
    assert Settings().ollama_url == "http://127.0.0.1:11434"


def test_the_discord_section_has_no_ollama_url_of_its_own(monkeypatch):
    monkeypatch.setenv("OLLAMA_URL", "http://elsewhere:11434")
    assert "ollama_url" not in DiscordSettings.model_fields
    assert Settings().discord.bot == "discord"


def test_a_secret_named_but_missing_says_so_and_any_other_failure_is_raised(monkeypatch):
    from aws_lambda_powertools.utilities import parameters

    from engram.config.secrets import MissingSecret, secure_parameter

    def missing(name, **kwargs):
        raise parameters.exceptions.GetParameterError("An error occurred (ParameterNotFound)")

    monkeypatch.setattr(parameters, "get_parameter", missing)
    with pytest.raises(MissingSecret):
        secure_parameter("/engram/dev/discord-bot-token")

    def denied(name, **kwargs):
        raise parameters.exceptions.GetParameterError("An error occurred (AccessDeniedException)")

    monkeypatch.setattr(parameters, "get_parameter", denied)
    with pytest.raises(parameters.exceptions.GetParameterError):
        secure_parameter("/engram/dev/discord-bot-token")


def test_a_secret_is_read_decrypted_and_kept_five_minutes(monkeypatch):
    from aws_lambda_powertools.utilities import parameters

    from engram.config.secrets import secure_parameter

    asked = []
    monkeypatch.setattr(parameters, "get_parameter", lambda name, **kw: asked.append((name, kw)) or "s3cret")
    assert secure_parameter("/engram/dev/api-key") == "s3cret"
    assert asked == [("/engram/dev/api-key", {"decrypt": True, "max_age": 300})]


def test_disallowed_channels_cover_their_threads_and_forum_posts_and_retention_defaults_to_keep():
    from engram.config.discord import DiscordSettings

    door = DiscordSettings(DISCORD_CHANNELS_DISALLOWED="111, 222", DISCORD_RETENTION_DAYS="")
    assert door.disallowed("111") and door.disallowed("999", parent="222")  # a thread under a disallowed one
    assert not door.disallowed("999", parent="333") and not door.disallowed(None)
    assert door.retention_days is None and door.retention_cutoff_ms(1_000_000) is None
    assert door.left_server_grace_hours == 72
    kept = DiscordSettings(DISCORD_RETENTION_DAYS="45", DISCORD_LEFT_SERVER_GRACE_HOURS="0")
    assert kept.retention_cutoff_ms(100 * 86_400_000) == 55 * 86_400_000 and kept.left_server_grace_hours == 0
