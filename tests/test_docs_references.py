"""What README.md, docs/*.md and src/eagle_fn's docstrings name exists in this checkout.

A stale reference misleads exactly the maintainer who reads the docs to find the code. Each
test collects every failure of its kind and reports them all, as ``file:line: 'span': why``.
A span is a markdown code span (``x`` in a docstring); the rules:

- Paths. A span that is one word holding a ``/`` and ending in a file extension, or naming
  a top-level folder (``bench/``), and every path in the prose starting with ``src/``,
  ``tests/``, ``bench/``, ``docs/`` or ``scripts/``, exists relative to the repository root,
  ``src/`` or ``src/eagle_fn/`` (the design docs name modules relative to the package:
  ``kernels/_walk.py``). A bare ``*.py``, ``*.md`` or ``*.sh`` name, in a span or in the
  prose, is a file somewhere in the repository.
- Python names. A span that is a dotted name (``a.b``, ``a.b(...)``, ``import a.b``) is
  checked when its head is ``eagle_fn``, a module of ``eagle_fn`` or ``eagle_fn.kernels``,
  or a name one of those modules defines. So a short, module-relative name
  (``layout.verify_core``, ``kernels._ops.call``) resolves under ``eagle_fn.``, or else
  under ``eagle_fn.kernels.``, whose modules docs/kernels.md names without the package
  (``greedy.greedy_core``); a name whose head a module defines
  (``DraftOrganizer.build_verify``) resolves through any module defining it. Resolution is
  import + getattr; an attribute a class gives its instances counts when the class
  annotates it or its source assigns ``self.<name>``. Any other head is a standard-library
  module or listed in ``FOREIGN_HEADS``, or the test fails. A span ``.name`` (a member, as
  the README's worker row lists them) is an attribute of a class eagle_fn defines.
- Signatures. A call span ``f(a, b, *, c)`` (``-> T`` optional) of such a name, of a
  registered operator, or of a method of an eagle_fn class, names its parameters: the
  positional ones in order (one-letter symbols and literals are not compared; ``...`` ends
  the comparison), the keywords by name (keyword-only after ``*``), with a signature's
  literal defaults (``MaskMode.QLEN`` too). ``eagle_fn::op(schema)`` is a registered
  operator with that schema. A Sphinx role in a docstring (``:func:`x```) resolves in its
  class, its module, or by the rule above.
- Tests. A span ``test_<name>`` is a ``def test_<name>`` in tests/ or bench/.
- Environment. ``EAGLE_FN_*`` and ``TRITON_INTERPRET`` are string constants of src/ code.
- Benchmarks. On docs/benchmarks.md and docs/performance.md every lower-case identifier span
  is a path a bench/bench_*.py records (one of its string literals, or an f-string whose
  fields stand for any word: ``f"select_top_k_step{step}"``), a name an eagle_fn module
  holds, a worker path (``worker.PATHS``), a registered marker, a test, a name torch or
  ``torch.Tensor`` holds (the ops the pages cite), or listed in ``BENCH_PAGE_OTHERS``.
- Flags. In ``bash`` blocks and command spans, a script of the repository or ``python -m
  eagle_fn`` gets only the flags its argparse parser declares (read from its
  ``add_argument`` calls; a shell script: flags in its text) and existing paths; pytest gets
  bench/conftest.py's options and ``PYTEST_FLAGS``, and ``-m`` registered markers only. A
  flag shown alone (``--all``) is declared by some script of the repository or pytest.
- Commits. Each word of 7 to 40 hex digits, with a digit and a letter, is a commit in HEAD's
  history (skipped outside a full git clone).
- Links. ``[text](file.md#anchor)`` resolves to a file and one of its headings' GitHub
  anchors; ``semantics.md §n`` to a numbered section; ``file.md, *Part*`` (or ``"Part"``)
  to a heading, a bold paragraph lead or a list item's lead there.

``NOT_CHECKED`` lists, with a reason each, the spans that deliberately name nothing here.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

import eagle_fn
from helpers.doc_names import (
    benchmark_paths,
    code_strings,
    defined_tests,
    history,
    is_benchmark,
    members,
    module_of,
    op_schema,
    op_signature,
    package_modules,
    path_exists,
    registered_markers,
    repository_files,
    resolved,
    signature_failures,
    targets,
)
from helpers.doc_refs import (
    DOCS,
    ROOT,
    SOURCES,
    Command,
    Ref,
    anchors,
    commands,
    declared_flags,
    doc_prose,
    doc_spans,
    docstring_spans,
    docstrings,
    owned_docstrings,
    shell_lines,
    text_refs,
    without_spans,
)

# Spans that look checkable but name nothing in this checkout, on purpose.
NOT_CHECKED = {
    "/tmp/torchinductor_$USER": "inductor's default cache folder, on the user's machine",
    "MATRIX_DIR/logs/": "under the folder scripts/torch_matrix.sh is given",
    "MATRIX_DIR/torch-<version>": "under the folder scripts/torch_matrix.sh is given",
    ".matrix/": "scripts/torch_matrix.sh's default venv folder, git-ignored",
    "benchmarks_cuda.md": "an output bench/gpu_check.sh writes under $OUT",
    "torch._dynamo.mark_unbacked": "named as what torch does not export",
    "launch(kernel, ...)": "removed; the shared launch that launcher(kernel) replaced",
    "types.FunctionType(code.replace(), ...)": "Python's types module, not eagle_fn.types",
    ".venv": "the virtual environment the quickstart makes",
    ".default": "an attribute of a torch operator",
    ".approx": "a PTX instruction modifier",
    ".ftz": "a PTX instruction modifier",
}

# Heads of dotted names from elsewhere, or symbols of a formula: not eagle_fn's to check.
# (Python's standard-library modules, sys.stdlib_module_names, are foreign too.)
FOREIGN_HEADS = {
    "torch": "PyTorch; its names vary with the release the suite runs on",
    "nn": "torch.nn",
    "aten": "PyTorch's operator namespace",
    "tiling_utils": "a module of torch._inductor",
    "triton": "Triton",
    "tl": "triton.language, as kernels import it",
    "JITFunction": "a Triton class",
    "add": "a PTX instruction",
    "mul": "a PTX instruction",
    "div": "a PTX instruction",
    "cp": "a PTX instruction (cp.async)",
    "HFMA2": "a SASS instruction",
    "M": "an example enum in docs/kernels.md",
    "tree": "the argument a contract message names (tree.parent_list)",
    "topk_index": "an argument in a formula",
    "expand": "a tensor in docs/semantics.md's formula",
    "logits": "an argument in a formula",
}

# Lower-case identifiers on the benchmark pages that are neither benchmarks nor code names.
BENCH_PAGE_OTHERS = {
    "k": "the symbol of topk",
    "auto": "a value of EAGLE_FN_COMPILE",
    "check": "the method of a contract and of a constant set",
    "cuda": "a word tests/conftest.py looks for in test ids",
    "kernel": "a word tests/conftest.py looks for in test ids",
    "get_pw_red_splits": "a function of torch._inductor",
}

# pytest's own flags and pytest-benchmark's that the docs' commands pass.
PYTEST_FLAGS = {
    "-m": "pytest: select by marker expression",
    "-k": "pytest: select by keyword expression",
    "-q": "pytest: quiet",
    "-p": "pytest: load or block a plugin",
    "--benchmark-only": "pytest-benchmark",
    "--benchmark-disable": "pytest-benchmark",
    "--benchmark-json": "pytest-benchmark",
    "--benchmark-save": "pytest-benchmark",
    "--benchmark-compare": "pytest-benchmark",
}

EXTENSIONS = "py|md|sh|json|log|txt|png|toml"
TOP_FOLDERS = tuple(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
PATH_SPAN = re.compile(rf"[\w.$<>-]*/[\w.$<>/-]*\.(?:{EXTENSIONS})|[\w.$<>/-]+/")
FILE_NAME = re.compile(rf"[\w.-]+\.(?:{EXTENSIONS})")
BARE_FILE = re.compile(r"[\w.-]+\.(?:py|md|sh)")
PROSE_FILE = re.compile(r"(?<![\w.`-])([\w-]+\.(?:py|md|sh))\b")
PROSE_PATH = re.compile(r"(?<![\w/.`-])((?:src|tests|bench|docs|scripts)/[\w/.-]*\w)")
DOTTED = re.compile(r"(?:import )?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
MEMBER = re.compile(r"\.([A-Za-z_]\w*)(?:\(.*\))?")
CALL = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(\(.*\))(?: -> (\w+))?")
OPERATOR = re.compile(r"eagle_fn::(\w+)(\(.*?\))?.*")
ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|obj):`~?([\w.]+)`")
ENV_VAR = re.compile(r"(EAGLE_FN_\w+|TRITON_INTERPRET)(?:=\S*)?")
COMMAND_SPAN = re.compile(r"(?:[A-Z_]+=\S+ )*(?:python3? |pytest |bash |\S+\.(?:py|sh) )")
COMMIT = re.compile(r"(?<![\w/.-])([0-9a-f]{7,40})(?![\w/-])")
LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")
SECTION = re.compile(r"semantics\.md §(\d+)")
# docs/kernels.md, *Exactness* or sampling.md, "The fused kernel": a part of a page, by name.
NAMED_PART = re.compile(r"(([\w./-]+\.md),? (\*[^*\n]+\*|\"[^\"\n]+\"))")


def every_span() -> list[Ref]:
    spans = [ref for doc in DOCS for ref in doc_spans(doc)]
    return spans + [ref for source in SOURCES for ref in docstring_spans(source)]


def checked(refs: Iterable[Ref]) -> list[Ref]:
    return [ref for ref in refs if ref.text not in NOT_CHECKED]


def in_docs_and_docstrings(pattern: re.Pattern[str], docs_text=doc_prose) -> list[Ref]:
    """Each match of ``pattern`` in the docs' text and in src/'s docstrings."""
    found = [ref for doc in DOCS for ref in text_refs(pattern, docs_text(doc), doc)]
    for source in SOURCES:
        for line, text in docstrings(source):
            found += text_refs(pattern, text, source, offset=line - 1)
    return found


def report(failures: list[str]) -> None:
    assert not failures, "stale references:\n" + "\n".join(failures)


# --- paths ----------------------------------------------------------------------------------


def test_every_path_exists():
    spans = [r for r in every_span() if PATH_SPAN.fullmatch(r.text) or r.text in TOP_FOLDERS]
    refs = checked(spans + in_docs_and_docstrings(PROSE_PATH))
    assert len(refs) > 50  # the extraction finds the docs' paths
    report([f"{ref}: no such path" for ref in refs if not path_exists(ref.text)])


def test_every_bare_file_name_exists_somewhere():
    spans = [ref for ref in every_span() if BARE_FILE.fullmatch(ref.text)]
    prose = in_docs_and_docstrings(PROSE_FILE, docs_text=lambda doc: without_spans(doc_prose(doc)))
    refs = checked(spans + prose)
    assert len(spans) > 10
    assert len(prose) > 10
    report([f"{ref}: no such file" for ref in refs if ref.text not in repository_files()])


# --- Python names, signatures, operators ----------------------------------------------------


def test_every_dotted_name_resolves():
    pytest.importorskip("triton")
    failures, resolved_names = [], 0
    for ref in checked(every_span()):
        match = DOTTED.fullmatch(ref.text)
        if not match or FILE_NAME.fullmatch(ref.text):
            continue
        name = match.group(1)
        head, found = name.split(".")[0], targets(name)
        if found is None:
            if head not in FOREIGN_HEADS and head not in sys.stdlib_module_names:
                failures.append(f"{ref}: {head!r} is no eagle_fn module or name (FOREIGN_HEADS?)")
        elif found:
            resolved_names += 1
        else:
            failures.append(f"{ref}: {name} does not resolve")
    assert resolved_names > 50
    for ref in checked(every_span()):
        match = MEMBER.fullmatch(ref.text)
        if match and not members(match.group(1)):
            failures.append(f"{ref}: no class of eagle_fn has {match.group(1)}")
    report(failures)


def test_every_shown_signature_matches():
    pytest.importorskip("triton")
    failures, calls = [], 0
    for ref in checked(every_span()):
        match = CALL.fullmatch(ref.text.removeprefix("."))
        if not match:
            continue
        name, args, returns = match.groups()
        found: list[object] = [obj for obj in targets(name) or [] if callable(obj)]
        found += [op for op in [op_signature(name)] if op is not None]
        if not found and "." not in name:  # a method: organize(topk_p, topk_index)
            found = [obj for obj in members(name) if callable(obj)]
        if found:
            calls += 1
            tried = [signature_failures(obj, args, returns) for obj in found]
            if all(tried):
                failures.append(f"{ref}: {name} " + "; ".join(tried[0]))
    assert calls > 30
    report(failures)


def test_every_operator_named_is_registered_with_the_schema_shown():
    pytest.importorskip("triton")
    package_modules()  # registers the operators
    refs = [ref for ref in every_span() if OPERATOR.fullmatch(ref.text)]
    failures = []
    for ref in refs:
        name, shown = OPERATOR.fullmatch(ref.text).groups()  # type: ignore[union-attr]
        schema = op_schema(name)
        if schema is None:
            failures.append(f"{ref}: no operator eagle_fn::{name}")
        elif shown and not str(schema).startswith(f"eagle_fn::{name}{shown}"):
            failures.append(f"{ref}: the schema is {schema}")
    assert len(refs) >= 5
    report(failures)


def test_every_sphinx_role_in_a_docstring_resolves():
    pytest.importorskip("triton")
    failures, roles = [], 0
    for source in SOURCES:
        module = module_of(source)
        for line, text, owner in owned_docstrings(source):
            for ref in text_refs(ROLE, text, source, offset=line - 1):
                roles += 1
                if not role_resolves(module, owner, ref.text):
                    failures.append(f"{ref}: resolves neither in {module.__name__} nor by rule")
    assert roles > 30
    report(failures)


def role_resolves(module: ModuleType, owner: str | None, name: str) -> bool:
    """As Sphinx looks a role's name up: in the docstring's class, its module, then absolute
    (here: by the rule for dotted names)."""
    scopes = ([owner] if owner else [], [])
    parts = name.split(".")
    return any(resolved(module, [*scope, *parts])[0] for scope in scopes) or bool(targets(name))


# --- tests, environment variables, benchmarks -----------------------------------------------


def test_every_named_test_exists():
    refs = checked(ref for ref in every_span() if re.fullmatch(r"test_\w+", ref.text))
    assert len(refs) >= 4
    report([f"{ref}: no such test" for ref in refs if ref.text not in defined_tests()])


def test_every_environment_variable_is_read_in_src():
    read = set().union(*(code_strings(source) for source in SOURCES))
    refs = checked(ref for ref in every_span() if ENV_VAR.fullmatch(ref.text))
    named = {ref: ENV_VAR.fullmatch(ref.text).group(1) for ref in refs}  # type: ignore[union-attr]
    assert {"EAGLE_FN_COMPILE", "EAGLE_FN_BACKEND"} <= set(named.values())
    report([f"{ref}: src/ reads no {name}" for ref, name in named.items() if name not in read])


def test_every_benchmark_name_on_the_benchmark_pages_exists():
    pytest.importorskip("triton")
    import torch

    from eagle_fn import worker

    known = {name for module in package_modules() for name in vars(module)}
    known |= set(worker.PATHS) | registered_markers() | defined_tests() | set(BENCH_PAGE_OTHERS)
    known |= set(dir(torch)) | set(dir(torch.Tensor))
    pages = [ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "performance.md"]
    refs = checked(
        ref
        for page in pages
        for ref in doc_spans(page)
        if re.fullmatch(r"[a-z_][a-z0-9_]*\*?", ref.text)
    )
    assert benchmark_paths()
    assert sum(is_benchmark(ref.text) for ref in refs) > 100
    report(
        [
            f"{ref}: no benchmark records it, and it names nothing else known"
            for ref in refs
            if not is_benchmark(ref.text) and ref.text not in known
        ]
    )


# --- commands and their flags ---------------------------------------------------------------


def doc_commands() -> list[Command]:
    lines = [ref for doc in DOCS for ref in shell_lines(doc)]
    spans = [ref for doc in DOCS for ref in doc_spans(doc) if COMMAND_SPAN.match(ref.text)]
    return [command for ref in lines + spans for command in commands(ref)]


def script_of(program: str) -> Path | None:
    """The file a command runs, or None for a tool from elsewhere (pip, ruff)."""
    if program == "-m eagle_fn":
        return ROOT / "src" / "eagle_fn" / "__main__.py"
    if not (re.fullmatch(r"\S+\.(?:py|sh)", program) or program.startswith(".ci/")):
        return None
    if path_exists(program):
        return ROOT / program
    found = repository_files().get(program, ())  # kernel_aot.py --op-kernels
    return found[0] if len(found) == 1 else None


def argument_failures(command: Command, flags: set[str], args: Sequence[str]) -> list[str]:
    failures = []
    for arg in args:
        word = arg.strip("[]").split("=")[0]  # [--device cuda]: an optional part
        if word.startswith("-") and word not in flags | {"-h", "--help", "--"}:
            failures.append(f"{command.ref}: {command.program} takes no {word}")
        elif ("/" in word or word in TOP_FOLDERS) and not path_exists(word):
            failures.append(f"{command.ref}: {command.program} is given {word}: no such path")
    return failures


def pytest_failures(command: Command, args: Sequence[str]) -> list[str]:
    flags = declared_flags(ROOT / "bench" / "conftest.py") | set(PYTEST_FLAGS)
    failures = argument_failures(command, flags, args)
    markers = registered_markers()
    for flag, value in itertools.pairwise(args):
        if flag == "-m":
            words = set(re.findall(r"\w+", value)) - {"and", "or", "not"}
            failures += [f"{command.ref}: no marker {w!r}" for w in sorted(words - markers)]
    return failures


def script_failures(command: Command, script: Path) -> list[str]:
    args = list(command.args)
    own, passed_on = (
        (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    )
    if script.suffix == ".py":
        failures = argument_failures(command, declared_flags(script), own)
    else:
        text = script.read_text()
        failures = [
            f"{command.ref}: {command.program} never reads {arg}"
            for arg in own
            if arg.startswith("-") and arg not in text
        ]
    return failures + (pytest_failures(command, passed_on) if passed_on else [])


def test_every_command_line_flag_is_accepted():
    failures, seen = [], 0
    for command in doc_commands():
        script = script_of(command.program)
        if command.program == "-m pytest":
            failures += pytest_failures(command, command.args)
        elif script is not None:
            failures += script_failures(command, script)
        elif re.fullmatch(r"\S+\.(?:py|sh)", command.program):
            failures.append(f"{command.ref}: no such script {command.program}")
        else:
            continue
        seen += 1
    assert seen > 30
    report(failures + lone_flag_failures())


def lone_flag_failures() -> list[str]:
    """A flag shown alone (``--all``, ``-k TEXT``) is one a script here or pytest declares."""
    scripts = [p for ps in repository_files().values() for p in ps if p.suffix == ".py"]
    declared = set(PYTEST_FLAGS).union(*(declared_flags(script) for script in scripts))
    lone = re.compile(r"--?[a-z][\w-]*( [A-Z]+)?")
    refs = [ref for ref in every_span() if lone.fullmatch(ref.text) and ref.text != "-inf"]
    assert len(refs) >= 3
    return [f"{ref}: no script declares it" for ref in refs if ref.text.split()[0] not in declared]


# --- commits, links, sections ---------------------------------------------------------------


def test_every_commit_is_in_the_history():
    commits = history()
    if commits is None:
        pytest.skip("not a full git clone: no history to look commits up in")
    refs = [
        ref
        for ref in in_docs_and_docstrings(COMMIT, docs_text=lambda doc: doc.read_text())
        if re.search(r"\d", ref.text) and re.search(r"[a-f]", ref.text)
    ]
    assert len(refs) > 5
    report(
        [
            f"{ref}: no commit of HEAD's history"
            for ref in refs
            if not any(commit.startswith(ref.text) for commit in commits)
        ]
    )


def test_every_internal_link_resolves():
    failures, links = [], 0
    for doc in DOCS:
        for ref in text_refs(LINK, without_spans(doc_prose(doc)), doc):
            if re.match(r"[a-z]+:", ref.text):
                continue  # https:, mailto:
            links += 1
            file, _, anchor = ref.text.partition("#")
            target = (doc.parent / file).resolve() if file else doc
            if not target.exists():
                failures.append(f"{ref}: no such file")
            elif anchor and anchor not in anchors(target):
                failures.append(f"{ref}: {target.name} has no heading #{anchor}")
    assert links > 10
    report(failures)


def test_every_cited_section_exists():
    semantics = (ROOT / "docs" / "semantics.md").read_text()
    sections = set(re.findall(r"^## (\d+)\.", semantics, flags=re.M))
    cited = in_docs_and_docstrings(SECTION)
    failures = [f"{ref}: no §{ref.text} there" for ref in cited if ref.text not in sections]
    parts = in_docs_and_docstrings(NAMED_PART)
    for ref in parts:
        file, part = NAMED_PART.fullmatch(ref.text).group(2, 3)  # type: ignore[union-attr]
        part = part.strip('*"')
        folders = (ref.file.parent, ROOT, ROOT / "docs")
        target = next((f / file for f in folders if (f / file).is_file()), None)
        lead = rf"^(?:#+ |\*\*|- ){re.escape(part)}"
        if target is None or not re.search(lead, target.read_text(), flags=re.M):
            failures.append(f"{ref}: no part {part!r} there")
    assert len(cited) > 5
    assert len(parts) >= 3
    report(failures)


@pytest.mark.parametrize(
    "cls",
    [
        eagle_fn.DraftStep,
        eagle_fn.DraftTree,
        eagle_fn.VerifyTree,
        eagle_fn.GreedyVerdict,
        eagle_fn.Uniforms,
    ],
    ids=lambda cls: cls.__name__,
)
def test_each_result_field_is_documented_where_help_shows_it(cls):
    # help() shows a NamedTuple's docstring, and each field only as "Alias for field number
    # i": its shape and dtype belong in the class's Attributes section.
    documented = re.findall(r"^        (\w+): ", cls.__doc__, flags=re.MULTILINE)
    assert documented == list(cls._fields)
