"""Turn the evaluation data (SQuAD, HotpotQA) into folders of documents (in a temp dir, never
the repo)."""

from __future__ import annotations

import html
import json
import re
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # for a script that put bench/ only
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Where the data lives, and a process's memory figures: testkit's (the tests' soak reads them).
from testkit.data import HOTPOT, SHARED, SQUAD, proc_status_mb

QUALITY = SHARED / "quality" / "quality_example_52845.jsonl"
CINDERELLA = SHARED / "cinderella" / "cinderella.txt"
#: Thematic questions over the Cinderella tale, written for this bench (see its "about").
CINDERELLA_QUESTIONS = Path(__file__).resolve().parent / "data" / "cinderella_questions.json"

__all__ = [
    "HOTPOT",
    "SHARED",
    "SQUAD",
    "Question",
    "cinderella_folder",
    "hotpot_folder",
    "locomo_folder",
    "peak_rss_mb",
    "proc_status_mb",
    "quality_folder",
    "sample",
    "squad_folder",
    "squad_titles",
]


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]
    gold_sources: tuple[str, ...] = ()
    #: Sentences the answer rests on (HotpotQA's supporting facts), whitespace collapsed.
    evidence: tuple[str, ...] = ()
    #: Scored by the share of the answer's words the context holds, not by the answer string.
    words: bool = False
    #: The question's kind, where a set has several (LoCoMo's categories): scored apart.
    group: str = ""


def _slug(title: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", title).strip("_")[:80] or "untitled"


def squad_folder(dest: Path, titles: list[str] | None = None) -> tuple[list[Path], list[Question]]:
    """Write one text file per SQuAD article; return the files and every question with answers."""
    data = json.loads(SQUAD.read_text())["data"]
    dest.mkdir(parents=True, exist_ok=True)
    files, questions = [], []
    for article in data:
        if titles is not None and article["title"] not in titles:
            continue
        path = dest / f"{_slug(article['title'])}.txt"
        path.write_text("\n\n".join(p["context"] for p in article["paragraphs"]) + "\n")
        files.append(path)
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                answers = tuple(dict.fromkeys(a["text"] for a in qa["answers"]))
                questions.append(Question(qa["question"], answers, (path.name,)))
    return files, questions


def squad_titles() -> list[str]:
    return [a["title"] for a in json.loads(SQUAD.read_text())["data"]]


def hotpot_folder(dest: Path) -> tuple[list[Path], list[Question]]:
    """Write one file per distinct HotpotQA paragraph (gold and distractor) of the 50 items."""
    items = json.loads(HOTPOT.read_text())
    dest.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def put(title: str, sentences: list[str]) -> str:
        name = f"{_slug(title)}.txt"
        if name not in written:
            path = dest / name
            path.write_text(f"{title}\n\n{''.join(sentences).strip()}\n")
            written[name] = path
        return name

    questions = []
    for item in items:
        gold = (put(item["title_a"], item["para_a"]), put(item["title_b"], item["para_b"]))
        for d in item.get("distractors", []):
            if isinstance(d, dict):
                put(d.get("title", "distractor"), d.get("sentences", d.get("paragraph", [])))
            else:
                put(d[0], d[1])
        facts = [
            para[i]
            for para, picks in zip(
                (item["para_a"], item["para_b"]), item["supporting_facts"], strict=True
            )
            for i in picks
            if i < len(para)
        ]
        evidence = tuple(" ".join(f.split()) for f in facts)
        questions.append(Question(item["question"], (item["answer"],), gold, evidence))
    return list(written.values()), questions


def quality_folder(dest: Path) -> tuple[list[Path], list[Question]]:
    """Write the QuALITY story (HTML stripped) as one file; its questions with the gold option
    as the one answer (scored by how many of its words the context holds)."""
    item = json.loads(QUALITY.read_text().splitlines()[0])
    text = html.unescape(re.sub(r"<[^>]+>", "", "".join(item["article"])))
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{_slug(item['title'])}.txt"
    path.write_text(re.sub(r"\n\s*\n+", "\n\n", text).strip() + "\n")
    questions = []
    for i in range(1, 6):
        gold = item[f"question{i}option{item[f'question{i}_gold_label']}"]
        questions.append(Question(item[f"question{i}"].strip(), (gold.strip(),), (path.name,)))
    return [path], questions


def cinderella_folder(dest: Path) -> tuple[list[Path], list[Question]]:
    """Write the Cinderella tale as one file; its thematic questions with a reference answer
    (scored as QuALITY's: the share of its words the context holds) and the phrases of the text
    it rests on (evidence: every one in the context)."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "cinderella.txt"
    path.write_text(CINDERELLA.read_text())
    items = json.loads(CINDERELLA_QUESTIONS.read_text())["questions"]
    return [path], [
        Question(q["question"], (q["answer"],), (path.name,), tuple(q["evidence"])) for q in items
    ]


#: LoCoMo's question categories (its README): 5, adversarial (unanswerable), is left out.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def locomo_folder(
    dest: Path, path: Path, categories: tuple[int, ...] = (1, 2, 3, 4)
) -> tuple[list[Path], list[Question]]:
    """Write LoCoMo's long conversations (``locomo10.json``, github.com/snap-research/LoCoMo,
    CC BY-NC 4.0: not in this repository, pass its path) as a share of chat logs: one folder per
    conversation, one file per session (its date, then ``Name: text`` a turn a line; a shared
    photo as its caption). Questions of ``categories``, scored by the share of the answer's
    words the context holds; evidence: the text of every turn the answer rests on."""
    data = json.loads(path.read_text())
    dest.mkdir(parents=True, exist_ok=True)
    files, questions = [], []
    for conv in data:
        talk, folder = conv["conversation"], dest / conv["sample_id"]
        folder.mkdir(exist_ok=True)
        turns: dict[str, str] = {}
        for key, session in talk.items():
            if not key.startswith("session_") or not isinstance(session, list):
                continue
            n = int(key.split("_")[1])
            lines = [f"Session {n}, {talk.get(f'{key}_date_time', '')}", ""]
            for t in session:
                said = " ".join(t.get("text", "").split())
                if t.get("blip_caption"):
                    said += f" [shares a photo: {' '.join(t['blip_caption'].split())}]"
                lines.append(f"{t['speaker']}: {said}")
                turns[t["dia_id"]] = said
            file = folder / f"session_{n:02d}.txt"
            file.write_text("\n".join(lines) + "\n")
            files.append(file)
        for qa in conv["qa"]:
            cat = qa.get("category")
            if cat not in categories or "answer" not in qa:
                continue
            evidence = tuple(turns[e] for e in qa.get("evidence", []) if e in turns)
            questions.append(
                Question(
                    qa["question"],
                    (str(qa["answer"]),),
                    evidence=evidence,
                    words=True,
                    group=LOCOMO_CATEGORIES[cat],
                )
            )
    return files, questions


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sample(questions: list[Question], n: int) -> list[Question]:
    """Return n questions spread evenly over the list (all when n is 0 or too large)."""
    if not n or n >= len(questions):
        return questions
    step = len(questions) / n
    return [questions[int(i * step)] for i in range(n)]
