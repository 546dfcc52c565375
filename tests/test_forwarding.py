import inspect
import traceback
import typing
from inspect import Parameter, Signature

import pytest

from eagle_fn import (
    DraftOrganizer,
    MaskMode,
    build_verify_tree,
    layout,
    organize_multilayer,
    organize_tree,
)
from eagle_fn._forwarding import cut, forwarding
from eagle_fn.chain import VERIFY_REQUEST, chain_verify_core

PLAIN, KEYWORD = Parameter.POSITIONAL_OR_KEYWORD, Parameter.KEYWORD_ONLY
DEFAULT = object()  # a default is passed on as this very object


def record(*args):
    return args


SIGNATURE = Signature(
    [
        Parameter("a", PLAIN, annotation=int),
        Parameter("b", PLAIN, default=DEFAULT),
        Parameter("c", KEYWORD),
        Parameter("d", KEYWORD, default=MaskMode.FULL),
    ],
    return_annotation=tuple,
)


def test_forwarding_passes_every_parameter_in_order_after_the_lead():
    f = forwarding("f", SIGNATURE, record, "lead", 0)
    assert f(1, c=3) == ("lead", 0, 1, DEFAULT, 3, MaskMode.FULL)
    assert f(1, 2, d=4, c=3) == ("lead", 0, 1, 2, 3, 4)
    assert forwarding("g", SIGNATURE, record)(a=1, b=2, c=3) == (1, 2, 3, MaskMode.FULL)


def test_forwarding_shows_the_signature_and_the_names_given():
    f = forwarding("f", SIGNATURE, record, qualname="Owner.f", doc="Docs.")
    assert inspect.signature(f) == SIGNATURE
    assert typing.get_type_hints(f) == {"a": int, "return": tuple}
    assert (f.__name__, f.__qualname__, f.__module__, f.__doc__) == (
        "f",
        "Owner.f",
        __name__,  # the target's module
        "Docs.",
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda f: f(1, 2, 3),
            r"^Owner\.f\(\) takes from 1 to 2 positional arguments but 3 were given$",
        ),
        (lambda f: f(1, c=3, e=5), r"^Owner\.f\(\) got an unexpected keyword argument 'e'$"),
        (lambda f: f(1), r"^Owner\.f\(\) missing 1 required keyword-only argument: 'c'$"),
        (lambda f: f(c=3), r"^Owner\.f\(\) missing 1 required positional argument: 'a'$"),
    ],
)
def test_forwarding_refuses_a_call_as_python_does_naming_the_qualname(call, message):
    with pytest.raises(TypeError, match=message):
        call(forwarding("f", SIGNATURE, record, qualname="Owner.f"))


def test_a_forwarded_frame_is_named_in_tracebacks():
    def fail(*args):
        raise RuntimeError("from the target")

    with pytest.raises(RuntimeError) as raised:
        forwarding("f", SIGNATURE, fail, qualname="Owner.f")(1, c=3)
    files = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "<eagle_fn: Owner.f>" in files


@pytest.mark.parametrize(
    "kind", [Parameter.POSITIONAL_ONLY, Parameter.VAR_POSITIONAL, Parameter.VAR_KEYWORD]
)
def test_forwarding_writes_plain_and_keyword_only_parameters_only(kind):
    with pytest.raises(
        TypeError, match=r"^forwarding writes plain and keyword-only parameters only: f$"
    ):
        forwarding("f", Signature([Parameter("x", kind)]), record)


def test_cut_keeps_the_taken_parameters_and_the_return_annotation():
    got = cut(layout.verify_core, slice(3, None), "lead")
    whole = inspect.signature(layout.verify_core, eval_str=True)  # annotations resolved
    assert list(got.parameters) == ["lead", *list(whole.parameters)[3:]]
    assert list(got.parameters.values())[1:] == list(whole.parameters.values())[3:]
    assert got.return_annotation == whole.return_annotation


@pytest.mark.parametrize(
    ("method", "fronted"),
    [
        ("organize", organize_multilayer),
        ("organize_steps", organize_tree),
        ("build_verify", build_verify_tree),
    ],
)
def test_each_worker_method_takes_the_fronted_functions_parameters_after_cfg(method, fronted):
    got = inspect.signature(getattr(DraftOrganizer, method))
    whole = inspect.signature(fronted, eval_str=True)
    assert next(iter(got.parameters)) == "self"
    assert list(got.parameters.values())[1:] == list(whole.parameters.values())[1:]
    assert got.return_annotation == whole.return_annotation
    # Resolved at run time too (runtime checkers, autodoc), not strings of another module.
    hints = typing.get_type_hints(fronted)
    del hints["cfg"]
    assert typing.get_type_hints(getattr(DraftOrganizer, method)) == hints
    assert getattr(DraftOrganizer, method).__qualname__ == f"DraftOrganizer.{method}"
    assert fronted.__name__ in getattr(DraftOrganizer, method).__doc__


def test_the_chain_verify_path_takes_the_general_paths_arguments_the_worker_hands_it():
    general = list(inspect.signature(layout.verify_core, eval_str=True).parameters.values())
    chain = list(inspect.signature(chain_verify_core).parameters.values())
    assert chain[0].name == "constants"
    assert chain[1:] == general[VERIFY_REQUEST]
