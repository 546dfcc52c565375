"""What the prose docs name, found mechanically: code spans, commands, links, hashes, sections.

The docs are README.md and docs/*.md; the docstrings of src/eagle_fn are read the same way,
their spans written ``like this``. Extraction only: test_docs_references decides what each
reference must resolve to.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SOURCES = tuple(sorted((ROOT / "src" / "eagle_fn").rglob("*.py")))


@dataclass(frozen=True)
class Ref:
    """A reference and where it was read: ``docs/design.md:12``."""

    text: str
    file: Path
    line: int

    def __str__(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}: {self.text!r}"


def _line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def split_fences(text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """The text with fenced code blocks blanked (lines kept), and each block line as
    ``(line number, the fence's language, text)``."""
    prose, blocks, fence = [], [], None
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = None if fence is not None else line.strip()[3:]
            prose.append("")
        elif fence is not None:
            blocks.append((number, fence, line))
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


# A span may run over a line break; a run of backquotes opens and closes one of its length.
_MARKDOWN_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_RST_SPAN = re.compile(r"``(.+?)``", re.DOTALL)


def _spans(text: str, pattern: re.Pattern[str], file: Path, offset: int = 0) -> Iterator[Ref]:
    for match in pattern.finditer(text):
        body = " ".join(match.group(match.lastindex or 1).split())
        yield Ref(body, file, offset + _line_of(text, match.start()))


def doc_spans(file: Path) -> list[Ref]:
    """Every inline code span of a markdown file, outside fenced blocks."""
    prose, _ = split_fences(file.read_text())
    return list(_spans(prose, _MARKDOWN_SPAN, file))


def doc_prose(file: Path) -> str:
    """A markdown file's text, fenced blocks blanked."""
    return split_fences(file.read_text())[0]


def without_spans(text: str) -> str:
    """The text with every inline code span blanked, line breaks kept."""
    return _MARKDOWN_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def shell_lines(file: Path) -> list[Ref]:
    """The lines of a markdown file's ``bash`` blocks; a line ending in ``\\`` is joined to
    the next."""
    found: list[Ref] = []
    pending: Ref | None = None
    for number, language, line in split_fences(file.read_text())[1]:
        if language != "bash":
            continue
        if pending is not None:
            line, number = f"{pending.text} {line.strip()}", pending.line
        if line.endswith("\\"):
            pending = Ref(line[:-1].rstrip(), file, number)
            continue
        pending = None
        found.append(Ref(line, file, number))
    return found


def docstrings(file: Path) -> Iterator[tuple[int, str]]:
    """``(first line, text)`` of the module's, each class's and each function's docstring."""
    for line, text, _ in owned_docstrings(file):
        yield line, text


def owned_docstrings(file: Path) -> Iterator[tuple[int, str, str | None]]:
    """``(first line, text, enclosing class or None)`` of every docstring of a module."""

    def visit(node: ast.AST, owner: str | None) -> Iterator[tuple[int, str, str | None]]:
        body = getattr(node, "body", None)
        if isinstance(node, ast.ClassDef):
            owner = node.name
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            value = getattr(first, "value", None) if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield first.lineno, value.value, owner  # type: ignore[union-attr]
        for child in ast.iter_child_nodes(node):
            yield from visit(child, owner)

    yield from visit(ast.parse(file.read_text()), None)


def docstring_spans(file: Path) -> list[Ref]:
    return [
        ref
        for line, text in docstrings(file)
        for ref in _spans(text, _RST_SPAN, file, offset=line - 1)
    ]


def text_refs(pattern: re.Pattern[str], text: str, file: Path, offset: int = 0) -> list[Ref]:
    """Each match of ``pattern`` (its first group, if any) with its line."""
    return [
        Ref(m.group(1) if m.groups() else m.group(0), file, offset + _line_of(text, m.start()))
        for m in pattern.finditer(text)
    ]


# --- commands -------------------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Command:
    """One command of a shell line: the program (a script path, ``-m module``, or a tool) and
    its arguments, environment assignments dropped."""

    program: str
    args: tuple[str, ...]
    ref: Ref


def commands(ref: Ref) -> list[Command]:
    """The commands of one shell line (``&&``, ``;`` and ``|`` split it; ``#`` comments end)."""
    line = re.sub(r"(^|\s)#.*", "", ref.text)
    found = []
    for part in re.split(r"&&|;|\|", line):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words:
            continue
        head, rest = words[0], words[1:]
        if head in ("python", "python3", "bash") and rest:
            if rest[0] == "-m" and len(rest) > 1:
                head, rest = f"-m {rest[1]}", rest[2:]
            elif not rest[0].startswith("-"):
                head, rest = rest[0], rest[1:]
        elif head == "pytest":
            head = "-m pytest"
        found.append(Command(head, tuple(rest), ref))
    return found


def declared_flags(script: Path) -> set[str]:
    """The option strings a Python script declares (``add_argument``, pytest ``addoption``)."""
    flags = set()
    for node in ast.walk(ast.parse(script.read_text())):
        called = node.func if isinstance(node, ast.Call) else None
        if isinstance(called, ast.Attribute) and called.attr in ("add_argument", "addoption"):
            flags |= {
                arg.value
                for arg in node.args  # type: ignore[attr-defined]
                if isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.startswith("-")
            }
    return flags


# --- markdown headings ----------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(file: Path) -> set[str]:
    """The anchors of a file's headings; a repeated heading's get ``-1``, ``-2``, ...."""
    found: set[str] = set()
    for line in doc_prose(file).split("\n"):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            anchor, repeat = base, 0
            while anchor in found:
                repeat += 1
                anchor = f"{base}-{repeat}"
            found.add(anchor)
    return found
