"""Functions that take another's parameters, written out from its signature: stated once.

Where one function must take exactly another's parameters (the worker's methods and the
public functions they front, the chain's verify path and the general one, a kernel core and
its torch core), a ``*args`` wrapper will not do: Python names a call's wrong arguments
after the called function's own signature, dynamo finds a compiled frame's arguments among
its locals, and the compile specs key dynamic arguments by parameter name. So the function
is written out, as ``namedtuple`` writes its ``__new__``::

    def <name>(<parameters>):
        return target(*lead, <each parameter, in order>)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def forwarding(
    name: str,
    signature: inspect.Signature,
    target: Callable[..., Any],
    *lead: object,
    qualname: str | None = None,
    doc: str | None = None,
) -> Callable[..., Any]:
    """A function ``name`` with ``signature`` (kinds, defaults and annotations kept) that
    returns ``target(*lead, <its parameters>)``, keyword-only ones passed by position, in
    ``target``'s module. ``qualname`` is the name Python's argument errors print
    (``DraftOrganizer.organize()``); ``doc`` the docstring.

    Example:
        >>> from inspect import Parameter, Signature, signature
        >>> params = [Parameter("a", Parameter.POSITIONAL_OR_KEYWORD),
        ...           Parameter("b", Parameter.KEYWORD_ONLY, default=2)]
        >>> f = forwarding("f", Signature(params), lambda *args: args, "lead")
        >>> f(1), str(signature(f))
        (('lead', 1, 2), '(a, *, b=2)')
    """
    params = list(signature.parameters.values())
    if any(p.kind not in KINDS for p in params):
        raise TypeError(f"forwarding writes plain and keyword-only parameters only: {name}")
    scope: dict[str, Any] = {"_target": target}
    scope.update((f"_lead_{i}", value) for i, value in enumerate(lead))
    names = ", ".join([*(f"_lead_{i}" for i in range(len(lead))), *(p.name for p in params)])
    source = f"def {name}({_parameters(params, scope)}):\n    return _target({names})\n"
    exec(compile(source, f"<eagle_fn: {qualname or name}>", "exec"), scope)
    function = scope[name]
    function.__module__ = getattr(target, "__module__", None)
    function.__qualname__ = qualname or name
    function.__signature__ = signature
    function.__annotations__ = _annotations(signature)
    function.__doc__ = doc
    return function


def _annotations(signature: inspect.Signature) -> dict[str, Any]:
    """``signature``'s annotations as ``__annotations__`` holds them, for ``get_type_hints``.
    Resolved where the signature was made (``inspect.signature(fn, eval_str=True)``): a
    string would be looked up among the written function's globals, the exec scope."""
    params = signature.parameters.values()
    hints = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    if signature.return_annotation is not signature.empty:
        hints["return"] = signature.return_annotation
    return hints


def _parameters(params: list[inspect.Parameter], scope: dict[str, Any]) -> str:
    """``params`` as a ``def`` lists them, each default a name bound in ``scope``."""
    written, star = [], False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star:
            written.append("*")
            star = True
        if p.default is p.empty:
            written.append(p.name)
        else:
            scope[f"_default_{p.name}"] = p.default
            written.append(f"{p.name}=_default_{p.name}")
    return ", ".join(written)


def cut(fn: Callable[..., Any], taken: slice, first: str) -> inspect.Signature:
    """``fn``'s signature with its parameters cut to ``taken``, ``first`` put before them."""
    whole = inspect.signature(fn, eval_str=True)
    lead = inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return whole.replace(parameters=[lead, *list(whole.parameters.values())[taken]])
