"""What the docs' references must resolve to: Python names, signatures, operators, tests,
benchmarks, markers, files and commits of this checkout (test_docs_references has the rules).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from helpers.doc_refs import ROOT

# --- Python names ---------------------------------------------------------------------------


@cache
def package_modules() -> tuple[ModuleType, ...]:
    """eagle_fn, eagle_fn.kernels and every module of both."""
    found = []
    for name in ("eagle_fn", "eagle_fn.kernels"):
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.iter_modules(package.__path__):
            found.append(importlib.import_module(f"{name}.{info.name}"))
    return tuple(found)


def defined_names(module: ModuleType) -> set[str]:
    """The names a module defines, not those it imports from elsewhere (torch, typing)."""
    return {
        name
        for name, value in vars(module).items()
        if getattr(value, "__module__", module.__name__).startswith("eagle_fn")
        and not (isinstance(value, ModuleType) and not value.__name__.startswith("eagle_fn"))
    }


def starts(head: str) -> list[object]:
    """What a dotted name's head stands for: eagle_fn, its modules of that name (under
    ``eagle_fn.`` and ``eagle_fn.kernels.``), or else what its modules define by that name."""
    modules = package_modules()
    if head == "eagle_fn":
        return [modules[0]]
    relative = [
        m for m in modules if m.__name__ in (f"eagle_fn.{head}", f"eagle_fn.kernels.{head}")
    ]
    if relative:
        return relative
    return [getattr(m, head) for m in modules if head in defined_names(m)]


def instance_attribute(cls: type, name: str) -> bool:
    """Whether an eagle_fn class gives its instances ``name`` (annotated or ``self.<name> =``)."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("eagle_fn"):
            continue
        if name in getattr(klass, "__annotations__", {}):
            return True
        if re.search(rf"\bself\.{name}\s*(?::[^=]*)?=", inspect.getsource(klass)):
            return True
    return False


def attribute(obj: object, name: str) -> tuple[bool, object]:
    """Whether ``obj.<name>`` exists (a submodule too), and what it is (None for an instance
    attribute, which has no class-level value to follow)."""
    if hasattr(obj, name):
        return True, getattr(obj, name)
    if isinstance(obj, ModuleType):
        try:
            return True, importlib.import_module(f"{obj.__name__}.{name}")
        except ModuleNotFoundError:
            return False, None
    return (isinstance(obj, type) and instance_attribute(obj, name)), None


def resolved(start: object, rest: list[str]) -> tuple[bool, object]:
    """Whether ``start.<rest...>`` exists, and what it is."""
    obj = start
    for at, name in enumerate(rest):
        found, obj = attribute(obj, name)
        if not found:
            return False, None
        if obj is None:
            return at == len(rest) - 1, None
    return True, obj


def targets(name: str) -> list[object] | None:
    """What a dotted or bare name resolves to (empty when nothing does); None when its head
    is not eagle_fn's to check."""
    head, *rest = name.split(".")
    candidates = starts(head)
    if not candidates:
        return None
    found = [resolved(start, rest) for start in candidates]
    return [obj for ok, obj in found if ok]


def members(name: str) -> list[object]:
    """``name`` on every class an eagle_fn module defines: what ``.name`` and a bare method
    name (``organize(topk_p, topk_index)``, the worker's) can stand for."""
    classes = {
        value
        for module in package_modules()
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__.startswith("eagle_fn")
    }
    return [getattr(cls, name) for cls in classes if hasattr(cls, name)]


def module_of(source: Path) -> ModuleType:
    parts = source.relative_to(ROOT / "src").with_suffix("").parts
    return importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))


# --- signatures and operators ---------------------------------------------------------------


def op_schema(name: str) -> object | None:
    """The schema of the registered operator ``eagle_fn::<name>``, or None."""
    import torch

    try:
        return getattr(torch.ops.eagle_fn, name).default._schema
    except (AttributeError, RuntimeError):
        return None


def op_signature(name: str) -> inspect.Signature | None:
    """An operator's schema as a signature: what docs/kernels.md prints as ``name(args)``."""
    schema = op_schema(name)
    if schema is None:
        return None
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    arguments = schema.arguments  # type: ignore[attr-defined]
    return inspect.Signature([inspect.Parameter(a.name, kind) for a in arguments])


class Shown(NamedTuple):
    """A call or signature as the docs print it, ``(a, b, *, c=1)``."""

    positional: list[str | None]  # names; None for a literal, "..." for "and so on"
    keywords: list[str]
    keyword_only: bool  # a signature: the keywords come after ``*``
    defaults: dict[str, ast.expr]  # a signature's defaults (a call's values are examples)


def shown_parameters(args: str) -> Shown | None:
    """What ``(args)`` shows, as a call or else as a signature; None when it is neither."""
    try:
        call = ast.parse(f"f{args}", mode="eval").body
    except SyntaxError:
        call = None
    if isinstance(call, ast.Call):
        positional = [
            "..." if isinstance(a, ast.Constant) and a.value is Ellipsis else getattr(a, "id", None)
            for a in call.args
        ]
        return Shown(positional, [k.arg for k in call.keywords if k.arg], False, {})
    try:
        (definition,) = ast.parse(f"def f{args}: pass").body
    except SyntaxError:
        return None
    arguments = definition.args  # type: ignore[attr-defined]
    plain = arguments.posonlyargs + arguments.args
    defaults = dict(zip([a.arg for a in plain][::-1], arguments.defaults[::-1], strict=False))
    defaults.update(
        {a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d}
    )
    return Shown([a.arg for a in plain], [a.arg for a in arguments.kwonlyargs], True, defaults)


def shown_value(node: ast.expr) -> tuple[bool, object]:
    """A shown default's value, when it is a literal or an eagle_fn name (``MaskMode.QLEN``)."""
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        found = targets(ast.unparse(node)) if isinstance(node, ast.Attribute) else None
        return (True, found[0]) if found else (False, None)


def parameters(obj: object) -> list[inspect.Parameter] | None:
    """``obj``'s parameters, ``self`` dropped; None when it has no signature."""
    if isinstance(obj, inspect.Signature):
        signature = obj
    else:
        try:
            signature = inspect.signature(obj)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
    found = list(signature.parameters.values())
    return found[1:] if found and found[0].name == "self" else found


def signature_failures(obj: object, args: str, returns: str | None) -> list[str]:
    """How a shown ``(args) -> returns`` differs from ``obj``'s signature: a positional name
    (one letter is a symbol, a literal is a value: neither is compared), their number, a
    keyword (keyword-only after ``*``), a signature's literal defaults, the return annotation."""
    params, parsed = parameters(obj), shown_parameters(args)
    if params is None or parsed is None:
        return []
    positional, keywords, keyword_only, defaults = parsed
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes = [p.name for p in params if p.kind in kinds]
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    failures = []
    for at, name in enumerate(positional):
        if name == "...":
            break
        if at >= len(takes):
            if not varargs:
                failures.append(f"takes {len(takes)} positional arguments, shown {len(positional)}")
            break
        if name is not None and len(name) > 1 and name != takes[at]:
            failures.append(f"argument {at} is {takes[at]!r}, shown {name!r}")
    by_name = {p.name: p for p in params}
    failures += [f"has no parameter {k!r}" for k in keywords if k not in by_name]
    if keyword_only:
        failures += [
            f"{k!r} is not keyword-only"
            for k in keywords
            if k in by_name and by_name[k].kind is not inspect.Parameter.KEYWORD_ONLY
        ]
    for name, node in defaults.items():
        known, value = shown_value(node)
        if known and name in by_name and by_name[name].default != value:
            failures.append(f"{name!r} defaults to {by_name[name].default!r}, shown {value!r}")
    if returns and not isinstance(obj, inspect.Signature):
        annotation = str(inspect.signature(obj).return_annotation)  # type: ignore[arg-type]
        if not annotation.endswith(returns):
            failures.append(f"returns {annotation}, shown {returns}")
    return failures


# --- the repository -------------------------------------------------------------------------


def path_exists(path: str) -> bool:
    """Relative to the root, ``src/`` or ``src/eagle_fn/``; nothing absolute or templated."""
    if path.startswith("/") or "$" in path or "<" in path:
        return False
    return any((base / path).exists() for base in (ROOT, ROOT / "src", ROOT / "src" / "eagle_fn"))


@cache
def repository_files() -> dict[str, tuple[Path, ...]]:
    """Each file name of the checkout and where it is; hidden folders (a venv) are skipped."""
    found: dict[str, list[Path]] = {}
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "__pycache__"]
        for name in files:
            found.setdefault(name, []).append(Path(folder) / name)
    return {name: tuple(paths) for name, paths in found.items()}


@cache
def defined_tests() -> frozenset[str]:
    names: set[str] = set()
    for folder in ("tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"^\s*def (test_\w+)", path.read_text(), flags=re.M))
    return frozenset(names)


def code_strings(path: Path) -> set[str]:
    """The string constants of a module's code, its docstrings left out."""
    tree = ast.parse(path.read_text())
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    docs = {
        id(node.body[0].value)  # type: ignore[attr-defined]
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    }


@cache
def benchmark_paths() -> tuple[re.Pattern[str], ...]:
    """One pattern per string literal or f-string of bench/bench_*.py, whose fields stand for
    any word: the paths the benchmarks record are among them."""
    patterns = []
    for path in sorted((ROOT / "bench").glob("bench_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                parts = [
                    re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+"
                    for v in node.values
                ]
                patterns.append(re.compile("".join(parts)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                patterns.append(re.compile(re.escape(node.value)))
    return tuple(patterns)


def is_benchmark(name: str) -> bool:
    if name.endswith("*"):  # a family: compiled_chain_*
        return any(p.pattern.startswith(re.escape(name[:-1])) for p in benchmark_paths())
    return any(p.fullmatch(name) for p in benchmark_paths())


def registered_markers() -> set[str]:
    """pyproject.toml's markers and the one bench/conftest.py adds."""
    markers = set(re.findall(r'^\s*"(\w+):', (ROOT / "pyproject.toml").read_text(), flags=re.M))
    conftest = (ROOT / "bench" / "conftest.py").read_text()
    return markers | set(re.findall(r'"markers",\s*"(\w+):', conftest))


@cache
def history() -> tuple[str, ...] | None:
    """HEAD's commits, or None outside a full git clone."""
    try:
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        if shallow.stdout.strip() != "false":
            return None
        listed = subprocess.run(
            ["git", "rev-list", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return tuple(listed.stdout.split())
