"""The LoCoMo evidence-retrieval protocol: one memory per turn, non-adversarial questions as queries."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

EVIDENCE = re.compile(r"D\d+:\d+")
KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass
class Turn:
    dia_id: str
    text: str
    speaker: str
    created_at: datetime


@dataclass
class Question:
    text: str
    evidence: set[str]
    category: int


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)


def _session_date(raw: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(raw.replace(" on ", " ").strip(), "%I:%M %p %d %B, %Y").replace(tzinfo=UTC)


def load(path: Path) -> list[Conversation]:
    """Conversations with their turns and their usable questions."""
    out = []
    for sample in json.loads(Path(path).read_text()):
        conv = sample["conversation"]
        turns = []
        sessions = sorted(
            (int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k)),
        )
        for n in sessions:
            when = _session_date(conv[f"session_{n}_date_time"])
            for t in conv[f"session_{n}"]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                turns.append(Turn(t["dia_id"], text, t["speaker"], when))
        ids = {t.dia_id for t in turns}
        questions = []
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = {e for raw in qa.get("evidence", []) for e in EVIDENCE.findall(str(raw)) if e in ids}
            if evidence:
                questions.append(Question(qa["question"], evidence, qa["category"]))
        out.append(Conversation(sample["sample_id"], turns, questions))
    return out


def ask(
    conversations: list[Conversation], search: Callable[[Conversation, str, int], list[str]]
) -> dict[str, list[list[str]]]:
    """Every question's top-20 dia ids, best first, per conversation."""
    return {conv.sample_id: [search(conv, q.text, max(KS)) for q in conv.questions] for conv in conversations}


def score(conversations: list[Conversation], found: dict[str, list[list[str]]]) -> dict:
    """Evidence recall@k, all-evidence hit@10 and R@10 per category of answers already found."""
    per_k = {k: [] for k in KS}
    all_hit = []
    by_cat: dict[int, list[float]] = {c: [] for c in CATEGORIES}
    multi: list[float] = []  # questions whose evidence is two turns or more
    for conv in conversations:
        for q, top in zip(conv.questions, found[conv.sample_id], strict=False):
            for k in KS:
                per_k[k].append(len(q.evidence & set(top[:k])) / len(q.evidence))
            all_hit.append(float(q.evidence <= set(top[:10])))
            by_cat[q.category].append(len(q.evidence & set(top[:10])) / len(q.evidence))
            if len(q.evidence) >= 2:
                multi.append(len(q.evidence & set(top[:10])) / len(q.evidence))
    return {
        "questions": len(all_hit),
        **{f"R@{k}": round(statistics.fmean(v), 4) for k, v in per_k.items()},
        "all@10": round(statistics.fmean(all_hit), 4),
        "R@10 multi-evidence": round(statistics.fmean(multi), 4) if multi else None,
        "R@10 by category": {CATEGORIES[c]: round(statistics.fmean(v), 4) for c, v in by_cat.items() if v},
    }


def evaluate(
    conversations: list[Conversation], search: Callable[[Conversation, str, int], list[str]]
) -> dict:
    """Evidence recall@k, all-evidence hit@10, per category; `search` returns dia ids best first."""
    return score(conversations, ask(conversations, search))
