"""The in-process MiniLM picks its torch threads per call (engram/embedders/local.py): every core only for a
search embedded alone; a write embeds on one, since its lines are read and its records written beside it."""

from __future__ import annotations

import os

import pytest


def test_only_a_lone_search_embeds_on_every_core(local_embedder):
    torch = pytest.importorskip("torch")
    cores = len(os.sched_getaffinity(0))
    searched = local_embedder.embed_queries(["which tea does she drink?"])
    assert torch.get_num_threads() == cores
    stored = local_embedder.embed(["which tea does she drink?"])
    assert torch.get_num_threads() == 1
    local_embedder.embed_queries(["two searches", "at once"])
    assert torch.get_num_threads() == 1
    # MiniLM has no query side: a search's vector is the stored text's (up to the sums' order)
    assert max(abs(a - b) for a, b in zip(searched[0], stored[0], strict=True)) < 1e-5
