"""Input contracts: each entry point's arguments stated once; checks and messages derive.

A contract lists an entry point's tensor arguments with symbolic shapes in the symbols of
docs/semantics.md (``bs``, ``topk``, ``num_steps``, ``N``, ``parent_width``; a bare symbol
not yet known, such as ``bs``, is bound by the first tensor that has it) and a dtype class;
all of them share one device. From it come the exact errors of an invalid call, the fast
predicate a valid call pays (the accepted calls' signatures, remembered), and the batch
dimensions the compiled paths declare dynamic. Nothing here reads a tensor's values: no
host sync.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.compiler import is_dynamo_compiling

from .arguments import require_config, require_tensor, require_type, show
from .config import DraftConfig

SCORE_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
# All that check reads of a tensor, read in C: equal signatures, equal verdicts.
_SIGNATURE = operator.attrgetter("__class__", "shape", "dtype", "device", "layout")
_REMEMBERED = 4096  # accepted signatures kept per contract (a bs range, a few dtypes)
# The shape symbols a config binds, and the DraftConfig fields they name.
_SYMBOLS = (
    ("topk", "topk"),
    ("num_steps", "num_steps"),
    ("N", "num_draft_tokens"),
    ("parent_width", "parent_width"),
)


class Dtypes(NamedTuple):
    """A dtype class: what messages call it, and its members."""

    kind: str
    members: frozenset[torch.dtype]


INT64 = Dtypes("an int64 tensor", frozenset((torch.int64,)))
FLOAT = Dtypes("a floating-point tensor (float16, bfloat16, float32 or float64)", SCORE_DTYPES)


class _Slot(NamedTuple):
    name: str  # as messages print it: "score_list[1]", "tree.parent_list"
    shape: str
    dtype: Dtypes


@dataclass(frozen=True)
class Arg:
    """A tensor argument: shape (alternatives joined by ``" or "``) and dtype class; with
    ``later``, a list of ``num_steps`` tensors, ``shape`` the first step's, ``later`` the rest's."""

    shape: str
    dtype: Dtypes = INT64
    later: str | None = None

    def slots(self, name: str, cfg: Any) -> list[_Slot]:
        """One slot for each tensor the argument holds, named as messages print it."""
        if self.later is None:
            return [_Slot(name, self.shape, self.dtype)]
        # Not a list times num_steps: torch 2.11's dynamo cannot multiply by a symbolic int
        shapes = [self.shape if i == 0 else self.later for i in range(cfg.num_steps)]
        return [_Slot(f"{name}[{i}]", shape, self.dtype) for i, shape in enumerate(shapes)]

    def flat(self, where: str, name: str, value: Any, cfg: Any) -> list[Any]:
        """The argument's tensors; a list's type and length checked."""
        if self.later is None:
            return [value]
        if not isinstance(value, (list, tuple)) or len(value) != cfg.num_steps:
            steps = f"num_steps = {cfg.num_steps} tensors"  # on failure only: a SymInt can't join
            require_type(where, name, value, (list, tuple), f"a list of {steps}")
            raise ValueError(f"{where}: {name} must hold {steps}, got {len(value)}")
        return list(value)


@dataclass(frozen=True)
class Fields:
    """A NamedTuple argument whose listed fields are tensor arguments, in checking order."""

    type: type
    args: tuple[tuple[str, Arg], ...]

    def slots(self, name: str, cfg: Any) -> list[_Slot]:
        """One slot for each listed field."""
        return [_Slot(f"{name}.{field}", arg.shape, arg.dtype) for field, arg in self.args]

    def flat(self, where: str, name: str, value: Any, cfg: Any) -> list[Any]:
        """The listed fields of ``value``, once its type is checked."""
        require_type(where, name, value, self.type, f"a {self.type.__name__}")
        return [getattr(value, field) for field, _ in self.args]


@dataclass(frozen=True, eq=False)  # identity hash: cheap cache keys for module constants
class Contract:
    """The tensor arguments of one entry point, after ``cfg``, in checking order."""

    where: str
    args: tuple[tuple[str, Arg | Fields], ...]
    device_label: str | None = None  # names the device source in messages; default 1st tensor
    config: bool = True  # takes a DraftConfig first (else pass None: no config symbols)
    chain_only: str | None = None  # why only a chain config fits ({topk} formatted), if so
    # The calls check accepted, as (cfg, device, *signatures), and the last one of them.
    _accepted: set[tuple[Any, ...]] = field(default_factory=set, init=False, repr=False)
    _last: list[tuple[Any, ...]] = field(default_factory=lambda: [()], init=False, repr=False)

    def __call__(self, cfg: object, *values: Any, **site: Any) -> None:
        """Validates a call: raises as :meth:`check` does, at the cost of a lookup for a call
        with the signatures of one accepted before (check reads nothing else). Inside a
        caller's ``torch.compile`` region it runs ``check`` itself, which dynamo traces
        into guards (docs/design.md). ``site``: ``where=``, ``device=``, ``device_label=``."""
        key = None
        if not is_dynamo_compiling():  # traced, check runs alone: what it reads becomes guards
            try:
                flat = values if self._plain() else self._tensors(cfg, values, self.where)
                key = (cfg, site.get("device"), *map(_SIGNATURE, flat))
                if key == self._last[0] or key in self._accepted:  # an unhashable cfg raises
                    return
            except (AttributeError, TypeError, ValueError):  # no signatures: check names why
                key = None
        self.check(cfg, *values, **site)
        if key is not None:
            if len(self._accepted) >= _REMEMBERED:
                self._accepted.clear()
            self._accepted.add(key)
            self._last[0] = key

    def check(self, cfg: object, *values: object, where: str = "", **device: Any) -> None:
        """Raises ``TypeError``/``ValueError`` naming the first argument that breaks the contract.

        ``device=`` (with ``device_label=``), when given, is where every tensor must be.
        """
        where = where or self.where
        cfg = require_config(where, cfg) if self.config else None
        if self.chain_only and cfg is not None and not cfg.is_chain:
            raise ValueError(f"{where}: {self.chain_only.format(topk=cfg.topk)}")
        env, seen = symbols(cfg), device.get("device")
        origin: dict[str, str] = {}  # each symbol a tensor bound: that tensor's name
        label = device.get("device_label") or self.device_label
        for slot, value in zip(_slots(self, cfg), self._tensors(cfg, values, where), strict=True):
            tensor = require_tensor(where, slot.name, value)
            _check_shape(where, slot, tensor, env, origin)
            kind, members = slot.dtype
            if tensor.dtype not in members:
                raise TypeError(f"{where}: {slot.name} must be {kind}, got {tensor.dtype}")
            seen, label = seen or tensor.device, label or slot.name
            if tensor.device != seen:
                expected = f"expected {seen} (the device of {label})"
                raise ValueError(f"{where}: {slot.name} is on {tensor.device}, {expected}")

    @functools.cache  # noqa: B019 (contracts are module constants: nothing to free)
    def _plain(self) -> bool:
        """Whether every argument is one tensor: the values are already the flat tensors."""
        return all(isinstance(spec, Arg) and spec.later is None for _, spec in self.args)

    def _tensors(self, cfg: Any, values: Sequence[Any], where: str) -> list[Any]:
        """The tensor arguments in slot order, containers checked (their errors are exact)."""
        flat: list[Any] = []
        for (name, spec), value in zip(self.args, values, strict=True):
            flat += spec.flat(where, name, value, cfg)
        return flat

    def batch_shapes(self, cfg: DraftConfig) -> dict[str, str | tuple[str, ...]]:
        """The shape of each argument (or NamedTuple field) whose dim 0 involves ``bs``, a
        tuple of shapes for a list: exactly what the compiled paths declare dynamic."""
        shapes: dict[str, Any] = {}
        for slot in _slots(self, cfg):
            shape = slot.shape.split(" or ")[0]
            if "bs" not in shape_dims(shape)[0].split():
                continue
            name = slot.name.split(".")[-1]
            if name.endswith("]"):  # one step of a list
                name = name[: name.index("[")]
                shapes[name] = (*shapes.get(name, ()), shape)
            else:
                shapes[name] = shape
        return shapes


def contract(
    where: str,
    /,
    device_label: str | None = None,
    config: bool = True,
    chain_only: str | None = None,
    **args: Arg | Fields,
) -> Contract:
    """A :class:`Contract` from keyword arguments in checking order."""
    return Contract(where, tuple(args.items()), device_label, config, chain_only)


def fields(tuple_type: type, /, **args: Arg) -> Fields:
    return Fields(tuple_type, tuple(args.items()))


def _check_shape(
    where: str, slot: _Slot, tensor: Tensor, env: dict[str, int], origin: dict[str, str]
) -> None:
    """Checks ``tensor`` against the slot's shape (or any alternative); binds new symbols,
    noting in ``origin`` that this slot bound them."""
    shapes = slot.shape.split(" or ")
    for shape in shapes:
        dims, trial, lone = shape_dims(shape), dict(env), len(shapes) == 1
        if lone and len(dims) != tensor.dim() and any(_unbound(d, env) for d in dims):
            ranked, got = f"{shape} (rank {len(dims)})", show(tensor.shape)
            raise ValueError(f"{where}: {slot.name} must have shape {ranked}, got shape {got}")
        pairs = zip(dims, tensor.shape, strict=False)  # a rank mismatch binds nothing kept
        trial.update((d, n) for d, n in pairs if _unbound(d, trial))
        try:
            expected = tuple(_eval(d, trial) for d in dims)
        except KeyError:  # a product with an unknown symbol: not this alternative
            continue
        if tensor.shape == expected or lone:  # a lone shape binds what it can
            origin.update((d, slot.name) for d in trial if d not in env)
            env.update(trial)
        if tensor.shape == expected:
            return
    wanted = " or ".join(_wanted(shape, env) for shape in shapes)
    other = {w: name for w, name in origin.items() if name != slot.name}  # bound elsewhere
    used = dict.fromkeys(w for s in shapes for d in shape_dims(s) for w in d.split() if w in other)
    given = "; ".join(f"{w} = {env[w]} from {other[w]}" for w in used)
    got = show(tensor.shape) + (f" ({given})" if given else "")
    raise ValueError(f"{where}: {slot.name} must have shape {wanted}, got {got}")


def _unbound(dim: str, env: dict[str, int]) -> bool:
    return dim.isidentifier() and dim not in env


def _wanted(shape: str, env: dict[str, int]) -> str:
    """``shape``, then its evaluation where a symbol is known: ``[bs, V] = [2, V]``."""
    shown = show([_known(d, env) for d in shape_dims(shape)])
    return shape if shown == shape else f"{shape} = {shown}"


def _known(dim: str, env: dict[str, int]) -> int | str:
    return dim if any(_unbound(w, env) for w in dim.split()) else _eval(dim, env)


def _slots(contract: Contract, cfg: Any) -> tuple[_Slot, ...]:
    """Every slot of ``contract`` under ``cfg``. Not cached: only a call the fast predicate
    has not seen, or a traced one (dynamo would warn about a cache), gets here."""
    return tuple(slot for name, spec in contract.args for slot in spec.slots(name, cfg))


def symbols(cfg: DraftConfig | None) -> dict[str, int]:
    """The config's values under the names contracts use (none without a config)."""
    return {} if cfg is None else {name: getattr(cfg, field) for name, field in _SYMBOLS}


def shape_dims(shape: str) -> tuple[str, ...]:
    """The dimensions of ``shape``'s first alternative: ``"[bs, k] or [k]"`` -> bs, k."""
    return tuple(d.strip() for d in shape.split(" or ")[0].strip()[1:-1].split(",") if d.strip())


def _eval(expr: str, env: dict[str, int]) -> int:
    """One dimension of a contract's shape, evaluated: a sum of products of symbols and ints,
    tokens apart (``"bs * N"``, ``"N - 1"``). ``KeyError`` names an unknown symbol. Plain
    Python that dynamo can trace (``eval`` it cannot), so checks run inside compiled code."""
    terms = expr.replace(" - ", " + -1 * ").split(" + ")  # [a, b * c, -1 * d]
    parts = [[int(f) if f.lstrip("-").isdigit() else env[f] for f in t.split(" * ")] for t in terms]
    return sum(math.prod(factors) for factors in parts)
