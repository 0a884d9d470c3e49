"""What ``beyondsim submit`` decides before anything runs: a submission's parameters (from a TOML
file and ``-p``), every problem that keeps its class from running as a retriever (found without
loading a benchmark or a model), and the seeds it is scored with. The command parses its options,
calls these, runs the retriever and prints."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

from ..core.errors import UserError
from ..core.protocols import Preparable, Trainable, missing_protocol_members
from ..core.registry import (ParamError, RegistryError, RetrieverSpec, check_label, get_retriever_class, instantiate,
                             make_spec, params_class, parse_key_values)

# The seeds a submission is scored with: a retriever that trains (``fit``) or builds an artifact
# (``prepare``) is averaged over three; a deterministic one needs one. ``--seeds N`` overrides.
SUBMIT_SEEDS_TRAINABLE: tuple[int, ...] = (0, 1, 2)
SUBMIT_SEEDS_DETERMINISTIC: tuple[int, ...] = (0,)
SUBMIT_DEFAULT_SUITE = "constraint"


class SubmissionError(UserError, ValueError):
    """A submission that cannot run; the message names every problem."""


def submit_seeds(cls: type) -> tuple[int, ...]:
    trainable = issubclass(cls, (Trainable, Preparable))
    return SUBMIT_SEEDS_TRAINABLE if trainable else SUBMIT_SEEDS_DETERMINISTIC


def submission_params(cfg: dict[str, Any], path: Path | None, names: tuple[str, ...],
                      items: Iterable[str]) -> dict[str, Any]:
    """A submission's parameters: from the TOML (a ``[params]`` table; else run's
    ``[retrievers.NAME]`` table for the spec or label, or the only one; else its top-level keys,
    ``[llm]`` aside), then ``-p KEY=VALUE`` (or ``-p NAME.KEY=VALUE``) on top. A SubmissionError
    when the file or an item cannot give them."""
    if "params" in cfg:
        table = cfg["params"]
    elif "retrievers" in cfg:
        tables = cfg["retrievers"] if isinstance(cfg["retrievers"], dict) else {}
        chosen = [n for n in names if n in tables]
        if chosen:
            table = tables[chosen[0]]
        elif len(tables) == 1:
            table = next(iter(tables.values()))
        else:
            raise SubmissionError(f"{path}: [retrievers] has no table for {' or '.join(repr(n) for n in names)}")
    else:
        table = {k: v for k, v in cfg.items() if k != "llm"}
    if not isinstance(table, dict):
        raise SubmissionError(f"{path}: the parameters must be a TOML table")
    params = dict(table)
    if "retriever" in params and params.pop("retriever") not in names:
        raise SubmissionError(f"{path}: names another retriever; submit takes the retriever as its argument")
    try:
        given = parse_key_values(items, strip_values=False)
    except ValueError as e:
        raise SubmissionError(str(e)) from None
    for k, v in given.items():
        prefix, dot, key = k.partition(".")
        params[key if dot and prefix in names else k] = v
    return params


def submission_problems(name: str, params: dict[str, Any], label: str) -> tuple[type | None, RetrieverSpec | None,
                                                                                 list[str]]:
    """``(class, spec, problems)``: everything that keeps ``name`` from running as a retriever with
    ``params``, found without loading a benchmark or a model: the protocol members and their
    arities, the parameter class, the parameters, and instantiating the class with them. The spec
    is ``None`` when there is a problem."""
    try:
        cls = get_retriever_class(name)
    except RegistryError as e:  # the module is missing or raised at import: the label can still be checked
        problems = [str(e)]
        try:
            check_label(label, "retriever label" if label != name else "retriever name")
        except ParamError as le:
            problems.append(str(le))
        return None, None, problems
    problems = list(missing_protocol_members(cls))
    pcls = params_class(cls)
    spec = None
    if not (isinstance(pcls, type) and dataclasses.is_dataclass(pcls)):
        problems.append(f"Params: {pcls!r} is not a dataclass; declare the parameters as a frozen dataclass "
                        "(`Params = MyParams` on the class, or `@register(name, params=MyParams)`)")
    else:
        try:
            spec = make_spec(name, params, label=label if label != name else "")
        except (RegistryError, ValueError) as e:
            problems.append(str(e))
    if spec is not None:
        try:
            instantiate(spec)
        except Exception as e:  # noqa: BLE001 - any failure of the user's constructor is reported
            problems.append(f"cannot instantiate {cls.__qualname__} with {dict(spec.params)!r}: "
                            f"{type(e).__name__}: {e}")
    return cls, (spec if not problems else None), problems


def check_submission(name: str, params: dict[str, Any], label: str) -> tuple[type, RetrieverSpec]:
    """The class and spec of a submission that can run; else a SubmissionError listing every
    problem :func:`submission_problems` finds."""
    cls, spec, problems = submission_problems(name, params, label)
    if cls is None or spec is None:
        path = origin(cls) if cls is not None else name
        where = f" ({path})" if path != name else ""
        raise SubmissionError(f"retriever {name!r}{where} cannot be submitted:\n" +
                              "\n".join(f"  - {p}" for p in problems))
    return cls, spec


def origin(cls: type) -> str:
    """``module:Class``: where a submitted class comes from."""
    return f"{cls.__module__}:{cls.__qualname__}"
