"""The kata catalog: katas/katas.toml and each kata's folder (README, HINTS, QUESTIONS, stub).

`load()` gives the katas in practice order; `get(slug)` one of them, or UnknownKata listing the valid
slugs. `Kata.readme()` is the prompt with the shared pages it links (katas/CONFIG.md). The folder is
$DOJO_KATAS_DIR when set, else katas/ (dojo.targets). Parsing is plain: markdown headings split hints
and questions, nothing more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from dojo import targets

HELPS = re.compile(r"^Helps:[ \t]*([^\n]*)\n?", re.MULTILINE)  # a hint's line naming the tests it helps with
SHARED_PAGES = ("CONFIG.md",)  # katas/<page>: shared by several prompts, linked as ](../<page>)


class UnknownKata(ValueError):
    """A slug that katas.toml does not list; the message names the valid ones."""


@dataclass(frozen=True)
class Question:
    """One follow-up question from QUESTIONS.md: the question, a model answer, rubric points."""

    question: str
    answer: str
    rubric: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Kata:
    number: int  # 1-based position in katas.toml: the suggested practice order
    slug: str
    title: str
    difficulty: int  # 1 (warm-up) .. 5 (hard)
    minutes: int
    prerequisites: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # reference modules that hold this kata's answer besides solutions/<slug>.py, dotted below solutions
    # ("system.kernels.attention_fast"): hidden from its grading like the reference itself
    twins: tuple[str, ...] = ()
    note: str = ""  # shown before the title in `dojo list`, e.g. "training warm-up"; empty for most

    @property
    def folder(self) -> Path:
        return targets.katas_dir() / self.slug

    @property
    def stub(self) -> Path:
        return self.folder / f"{self.slug}.py"

    @property
    def reference(self) -> Path:
        return targets.solutions_dir() / f"{self.slug}.py"

    @property
    def suite(self) -> Path:
        return targets.suites_dir() / f"test_{self.slug}.py"

    @property
    def mutants(self) -> list[Path]:
        folder = targets.suites_dir() / "mutants" / self.slug
        return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py") if folder.is_dir() else []

    @property
    def has_suite(self) -> bool:
        return self.suite.is_file()

    def readme(self) -> str:
        """The prompt, followed by each shared page it links to (`../CONFIG.md`): `dojo start`, the
        notebook and an interview show this text, so a learner with only the workspace reads both."""
        path = self.folder / "README.md"
        if not path.is_file():
            return f"# {self.title}\n\n(no README yet)\n"
        text = path.read_text()
        for name in SHARED_PAGES:
            shared = targets.katas_dir() / name
            if f"](../{name})" in text and shared.is_file():
                text = text.rstrip("\n") + "\n\n" + shared.read_text()
        return text

    def hints(self) -> list[str]:
        """The hints in order, from "## Hint 1" ... "## Hint N" in HINTS.md (empty list when none),
        without their "Helps:" lines (see hint_helps)."""
        return [HELPS.sub("", body).strip() for body in self._hint_sections()]

    def hint_helps(self) -> list[list[str]]:
        """Per hint, the tests it helps with: its "Helps: test_a, test_b" line (empty when it has none)."""
        return [
            [name.strip() for m in HELPS.finditer(body) for name in m.group(1).split(",") if name.strip()]
            for body in self._hint_sections()
        ]

    def _hint_sections(self) -> list[str]:
        path = self.folder / "HINTS.md"
        if not path.is_file():
            return []
        return [body for _, body in _sections(path.read_text(), r"Hint\s+\d+[^\n]*")]

    def questions(self) -> list[Question]:
        """Follow-up questions from QUESTIONS.md: "## Q: ...", "**Model answer.** ...", "**Rubric:**" bullets."""
        path = self.folder / "QUESTIONS.md"
        return parse_questions(path.read_text()) if path.is_file() else []


def parse_questions(text: str) -> list[Question]:
    """Every "## Q: ..." section of `text`: the question, "**Model answer.** ...", "**Rubric:**" bullets."""
    found = []
    for heading, body in _sections(text, r"Q:[^\n]*"):
        question = heading.split(":", 1)[1].strip()
        answer_part, rubric_part = _split_rubric(body)
        answer = re.sub(r"^\*\*Model answer[.:]?\*\*:?\s*", "", answer_part.strip()).strip()
        rubric = [line[2:].strip() for line in rubric_part.splitlines() if line.strip().startswith("- ")]
        found.append(Question(question, answer, rubric))
    return found


def _split_rubric(body: str) -> tuple[str, str]:
    """(answer text, rubric text) of one question's body, split at "**Rubric:**"."""
    parts = re.split(r"\*\*Rubric:?\*\*:?", body, maxsplit=1)
    return (parts[0], parts[1]) if len(parts) == 2 else (parts[0], "")


def _sections(text: str, heading: str) -> list[tuple[str, str]]:
    """(heading, body) for each "## <heading>" section, bodies stripped, in order."""
    pattern = re.compile(rf"^##\s+({heading})\s*$", re.MULTILINE)
    marks = list(pattern.finditer(text))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append((m.group(1).strip(), text[m.end() : end].strip()))
    return out


def manifest_path() -> Path:
    return targets.katas_dir() / "katas.toml"


def load() -> list[Kata]:
    """Every kata in katas.toml, in file order. Raises FileNotFoundError / ValueError on a bad manifest."""
    path = manifest_path()
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from exc
    katas = []
    for number, entry in enumerate(data.get("kata", []), start=1):
        try:
            katas.append(
                Kata(
                    number=number,
                    slug=entry["slug"],
                    title=entry["title"],
                    difficulty=int(entry.get("difficulty", 3)),
                    minutes=int(entry.get("minutes", 45)),
                    prerequisites=tuple(entry.get("prerequisites", ())),
                    tags=tuple(entry.get("tags", ())),
                    twins=tuple(entry.get("twins", ())),
                    note=str(entry.get("note", "")),
                )
            )
        except KeyError as exc:
            raise ValueError(f"{path}: kata number {number} has no {exc.args[0]!r}") from exc
    return katas


def slugs() -> list[str]:
    return [k.slug for k in load()]


def get(slug: str) -> Kata:
    """The kata called `slug`. Raises UnknownKata listing the valid slugs."""
    for kata in load():
        if kata.slug == slug:
            return kata
    raise UnknownKata(f"unknown kata {slug!r}: choose one of {', '.join(slugs())}")
