"""The start-up banner: a key itself on a terminal, only where it is anywhere else."""

import io

from infra import local_stack


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_key_and_a_log_sees_only_where_it_is(monkeypatch, tmp_path):
    monkeypatch.delenv("ENGRAM_API_KEY", raising=False)
    monkeypatch.setattr(local_stack.sys, "stdout", _Terminal())
    assert local_stack.shown_key("k-123", "ENGRAM_API_KEY", tmp_path / "api-key") == "k-123"
    monkeypatch.setattr(local_stack.sys, "stdout", io.StringIO())
    assert "k-123" not in local_stack.shown_key("k-123", "ENGRAM_API_KEY", tmp_path / "api-key")
    assert str(tmp_path / "api-key") in local_stack.shown_key("k-123", "ENGRAM_API_KEY", tmp_path / "api-key")
    monkeypatch.setenv("ENGRAM_API_KEY", "k-123")
    assert local_stack.shown_key("k-123", "ENGRAM_API_KEY", tmp_path / "api-key").startswith(
        "from ENGRAM_API_KEY"
    )
