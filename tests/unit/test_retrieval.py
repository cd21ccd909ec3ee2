"""How retrieval is tuned per model (engram.retrieval.MODEL_SETTINGS, Retrieval.for_model)."""

from __future__ import annotations

from dataclasses import replace

from engram.embedders.e5 import E5Embedder
from engram.embedders.local import LOCAL_MODEL
from engram.retrieval import DEFAULT, MEANING_SIDE, MODEL_SETTINGS, Retrieval


def test_models_with_settings_of_their_own_are_models_engram_embeds_with():
    assert set(MODEL_SETTINGS) == {E5Embedder.model}


def test_a_model_s_own_settings_change_only_its_meaning_never_the_words():
    # the words are one index for every model: a switch of model rewrites vectors, never words
    for own in MODEL_SETTINGS.values():
        assert own and set(own) <= MEANING_SIDE
        assert all(hasattr(DEFAULT, name) for name in own)


def test_for_model_gives_a_model_its_own_settings_and_the_rest_as_they_are():
    tuned = DEFAULT.for_model(E5Embedder.model)
    assert (tuned.dense_context, tuned.fact_context_minutes) == (0.5, 30.0)
    assert (tuned.feedback_docs, tuned.feedback_dense) == (0, 0.0)  # no meaning feedback since 1.12
    assert tuned.meaning_window == 0.5  # E5 keeps a window's meaning
    own = dict(dense_context=0.0, fact_context_minutes=0.0, meaning_window=0.0)
    assert replace(tuned, **own) == DEFAULT
    assert DEFAULT.for_model(LOCAL_MODEL) is DEFAULT
    assert DEFAULT.for_model(None) is DEFAULT
    assert DEFAULT.for_model("nomic-embed-text") is DEFAULT


def test_settings_for_every_model_are_kept_as_they_are():
    exact = Retrieval(per_model=False)  # the leave-out sets every value itself
    assert exact.for_model(E5Embedder.model) is exact
