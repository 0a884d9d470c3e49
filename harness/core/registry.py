"""Registry of retrievers, benchmarks and suites.

The harness never imports a concrete retriever or benchmark. It finds them through entry points
(groups ``beyondsim.retrievers``, ``beyondsim.benchmarks``, ``beyondsim.suites``), which our own
packages use too, through retriever classes registered in-process with :func:`register`, or
through an explicit ``module:Class`` spec that the user names. A benchmark is found through its
entry point only (a folder path through the ``folder`` loader's).

Retrievers declare their parameters as a frozen dataclass; unknown keys fail loudly and the spec
hash (name + canonical JSON of every parameter, defaults included) is stable. A parameter added to
a retriever after results were stored is declared with :func:`added_param`: at its default it is
left out of the spec, so the results stored before it existed keep their key and their row. They declare their
metadata (description, family, paper and its citation, LLM use, training data) once, in :func:`register`.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import json
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .citation import Citation
from .errors import UserError

RETRIEVER_GROUP = "beyondsim.retrievers"
BENCHMARK_GROUP = "beyondsim.benchmarks"
SUITE_GROUP = "beyondsim.suites"
BUILDER_GROUP = "beyondsim.builders"  # diagnostic-set builders: callable(corpus, *, seed, max_queries, source)
TRAINER_GROUP = "beyondsim.trainers"  # `beyondsim train NAME`: an object with Params, description and train(...)
MANIFEST_GROUP = "beyondsim.manifests"  # paths of JSON files with the expected checksums and counts
COMMAND_GROUP = "beyondsim.commands"  # more `beyondsim` verbs: a typer app, mounted under the entry point name
REFERENCE_GROUP = "beyondsim.reference"  # {"plan", "bundle", "expected"} paths of the shipped reference results
FOLDER_LOADER = "folder"  # benchmark entry point that loads a BEIR-format folder given by path

_retrievers: dict[str, type] = {}
# the names of results the harness makes itself, which no retriever may take: a candidate pool's
# reference rows (harness/run/pools.py) and a stored run file (harness/run/scoring.py)
POOL_REFERENCE_NAMES = frozenset({"pool-order", "pool-shuffled", "pool-oracle"})
RESERVED_NAMES = POOL_REFERENCE_NAMES | {"run-file"}


class RegistryError(UserError, LookupError):
    """An unknown or unloadable retriever, benchmark, suite or plugin."""


class UnknownNameError(RegistryError, ValueError):
    """A name that a loader's own list does not hold (``beir/<dataset>``, ``diag/<set>``, …)."""


class ParamError(UserError, ValueError):
    """A parameter or label that a retriever or the store cannot take, found before any work."""


# A label names a configuration on every page and in every table; longer ones are refused before any
# work (``run``, ``submit``, ``import``), so no stored record carries a name no page can show.
MAX_LABEL_CHARS = 200


def shown(name: str, limit: int = 80) -> str:
    """``repr(name)``, cut to ``limit`` characters: user names in messages stay one readable line."""
    return repr(name) if len(name) <= limit else repr(name[:limit]) + f"… ({len(name)} characters)"


# Code points that render as nothing (or as blank) wherever a label is shown, so that two labels that
# look the same could name two configurations: Unicode's Default_Ignorable_Code_Point set
# (DerivedCoreProperties.txt: soft hyphen, combining grapheme joiner, the Hangul fillers, the
# Mongolian free variation selectors and vowel separator, zero-width and bidirectional controls,
# variation selectors, the interlinear annotation controls, tags, ...) plus the blank look-alikes
# that are not in it (U+2800 BRAILLE PATTERN BLANK). Checked with :func:`invisible` beside the
# general categories Cc, Cf, Cs, Zl and Zp.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x2800, 0x2800),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# how the board tells apart rows that share a label: "<label> (<first 6 hex digits of the spec hash>)"
# (reports/compare.py); a label of that form would pass for another configuration's row
DISAMBIGUATED = re.compile(r".+ \([0-9a-f]{6}\)")


def invisible(c: str) -> bool:
    """Whether the character ``c`` is a control, format or separator character or a default-ignorable
    (or blank) code point: one that shows as nothing where a label is printed."""
    o = ord(c)
    return unicodedata.category(c) in _INVISIBLE_CATEGORIES or any(lo <= o <= hi for lo, hi in _INVISIBLE_RANGES)


def check_label(label: str, what: str = "label", *, normal_form: bool = False) -> str:
    """``label`` as it names a configuration: in Unicode normal form NFKC, surrounding white space
    (a no-break space too) stripped; a :class:`ParamError` naming the problem when it cannot name
    one: empty, longer than :data:`MAX_LABEL_CHARS` characters, holding a control, format or
    default-ignorable character (:func:`invisible`), starting with a combining mark, or of the form
    the board gives a row it tells apart from another of the same label (``name (9868ca)``).
    ``normal_form``: a label that normalising would change is refused too (a label read from a
    file, which is stored as it is written)."""
    if not isinstance(label, str):
        raise ParamError(f"{what} must be a text, not {type(label).__name__}")
    bad = sorted({f"U+{ord(c):04X}" for c in label if invisible(c)})
    if bad:
        raise ParamError(f"{what} {ascii(label[:80])} contains control or invisible characters ({', '.join(bad)})")
    norm = unicodedata.normalize("NFKC", label).strip()
    bad = sorted({f"U+{ord(c):04X}" for c in norm if invisible(c)})
    if bad:  # (NFKC maps U+FFA0 to U+1160, a filler too)
        raise ParamError(f"{what} {ascii(label[:80])} contains control or invisible characters ({', '.join(bad)})")
    if not norm:
        raise ParamError(f"{what} {shown(label)} is empty" + (" after stripping white space" if label else ""))
    if normal_form and norm != label:
        raise ParamError(f"{what} {shown(label)} is not in normal form (Unicode NFKC, no surrounding white space): "
                         f"it would be {shown(norm)}")
    if len(norm) > MAX_LABEL_CHARS:
        raise ParamError(f"{what} {shown(norm)} is {len(norm)} characters long"
                         + (" in normal form (Unicode NFKC)" if len(norm) != len(label.strip()) else "")
                         + f"; at most {MAX_LABEL_CHARS} are allowed")
    if unicodedata.category(norm[0]).startswith("M"):
        raise ParamError(f"{what} {ascii(norm[:80])} starts with a combining mark (U+{ord(norm[0]):04X})")
    if DISAMBIGUATED.fullmatch(norm):
        raise ParamError(f"{what} {shown(norm)} ends in ' (<6 hex digits>)', how the board names one of two rows "
                         "that share a label: it would pass for another configuration's row; choose another label")
    return norm


def unknown(kind: str, name: str, known: list[str], hint: str = "", candidates: list[str] | None = None) -> RegistryError:
    """The error for an unknown ``kind`` name: the close matches among ``candidates`` (default
    ``known``) first ("did you mean"), then the known names, then ``hint``."""
    pool = known if candidates is None else candidates
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.6) if len(name) <= MAX_LABEL_CHARS else []
    msg = f"unknown {kind} {shown(name)}."
    if close:
        msg += f" Did you mean {' or '.join(repr(c) for c in close)}?"
    msg += f" Known: {', '.join(known) or '(none)'}"
    return RegistryError(msg + (f"; {hint}" if hint else ""))


@dataclass(frozen=True)
class NoParams:
    """Parameters of a retriever that takes none."""


@dataclass(frozen=True)
class RetrieverInfo:
    """What a retriever declares about itself, once, with :func:`register`: ``beyondsim list
    retrievers`` shows it and the runner reads it (an LLM retriever's result key names the model)."""

    name: str
    description: str = ""  # one line
    family: str = ""  # the kind of method: "lexical", "dense", "decoding", "LLM expansion", ...
    paper: str = ""  # the paper: authors, year and an arXiv id or DOI
    uses_llm: bool | Callable[[Any], bool] = False  # or a function of the params object
    trains_on: str = ""  # what its model learns from; "" when nothing is trained
    trainer: str = ""  # the `beyondsim train` NAME whose artifact it loads ...
    artifact_param: str = ""  # ... through this parameter (the artifact's path)
    citation: Citation | None = None  # the paper's BibTeX entry (harness/core/citation.py); None: no paper

    def calls_llm(self, params: Any) -> bool:
        """Whether a retriever with ``params`` calls an LLM."""
        return bool(self.uses_llm(params) if callable(self.uses_llm) else self.uses_llm)


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n", 1)[0].strip()


def register(name: str, params: type | None = None, *, description: str = "", family: str = "",
             paper: str = "", uses_llm: bool | Callable[[Any], bool] | None = None, trains_on: str = "",
             trainer: str = "", artifact_param: str = "", citation: Citation | None = None,
             reference: str = "") -> Callable[[type], type]:
    """Class decorator that registers a retriever and declares its metadata once:
    ``@register("coder-union", params=CoderUnionParams, family=..., paper=..., trains_on=...)``.
    ``reference`` is the older name of ``paper`` (plug-ins that pass it keep working; in this
    project "reference" means the shipped reference results).
    The description defaults to the first line of the class docstring; ``uses_llm`` to the class
    attribute of that name (a bool, or a function of the params object), else ``False``; ``citation``
    the paper's fields (:class:`harness.core.citation.Citation`), written as BibTeX wherever the method is
    shown."""

    if name in RESERVED_NAMES:
        raise RegistryError(f"retriever name {name!r} is reserved: it names results the harness makes itself")

    def deco(cls: type) -> type:
        p = params or getattr(cls, "Params", None) or NoParams
        if not dataclasses.is_dataclass(p):
            raise TypeError(f"{cls.__name__}: params must be a dataclass, got {p!r}")
        cls.Params = p
        cls.retriever_name = name
        cls.retriever_info = RetrieverInfo(
            name, description or _first_line(cls.__doc__), family, paper or reference,
            getattr(cls, "uses_llm", False) if uses_llm is None else uses_llm, trains_on, trainer, artifact_param,
            citation)
        _retrievers[name] = cls
        return cls

    return deco


def retriever_info(cls: type) -> RetrieverInfo:
    """The metadata ``cls`` registered with; for a class that did not register (a ``module:Class``
    or an entry point of a user package), what its docstring and a ``uses_llm`` attribute say."""
    info = vars(cls).get("retriever_info")
    if isinstance(info, RetrieverInfo):
        return info
    return RetrieverInfo(f"{cls.__module__}:{cls.__qualname__}", _first_line(cls.__doc__),
                         uses_llm=getattr(cls, "uses_llm", False))


def registered_info(name: str) -> RetrieverInfo | None:
    """The metadata of a retriever registered under ``name`` (in-process or by entry point); None for
    any other name. Never imports a ``module:Class`` a stored result names: results are data."""
    if name not in retriever_names():
        return None
    try:
        return retriever_info(get_retriever_class(name))
    except (RegistryError, ImportError, ValueError):
        return None


def _entry_points(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def _import_object(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise RegistryError(f"cannot import module {module!r} from spec {spec!r}: {e}") from e
    except Exception as e:  # noqa: BLE001 - the module itself raised while it was imported
        raise RegistryError(f"cannot import module {module!r} from spec {spec!r}: importing it raised "
                            f"{type(e).__name__}: {e}{_raised_at(e)}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistryError(f"module {module!r} has no attribute {attr!r} (spec {spec!r})") from None
    return obj


# ---------------------------------------------------------------------------------------------
# Retrievers


def retriever_names() -> list[str]:
    return sorted(set(_retrievers) | set(_entry_points(RETRIEVER_GROUP)))


def get_retriever_class(name: str) -> type:
    """Resolve a retriever by registered name, entry point name, or explicit ``module:Class``."""
    if name in RESERVED_NAMES:
        raise RegistryError(f"{name!r} names results the harness makes itself (a candidate pool's reference rows, a "
                            "stored run file); it is not a retriever to run")
    if name in _retrievers:
        return _retrievers[name]
    eps = _entry_points(RETRIEVER_GROUP)
    if name in eps:
        try:
            cls = eps[name].load()
        except Exception as e:  # noqa: BLE001 - surface any import failure with its origin
            raise RegistryError(f"retriever {name!r}: entry point {eps[name].value!r} failed to load: {e}") from e
        _retrievers.setdefault(name, cls)
        return cls
    if ":" in name:
        cls = _import_object(name)
        if not isinstance(cls, type):
            raise RegistryError(f"{name!r} is not a class")
        return cls
    raise unknown("retriever", name, retriever_names(), "or give a class as 'module:Class'.")


def params_class(cls: type) -> type:
    return getattr(cls, "Params", None) or NoParams


def coerce_value(field_type: Any, value: Any, where: str) -> Any:
    """Convert a CLI string to the dataclass field's type (TOML/JSON values pass through)."""
    if not isinstance(value, str):
        return value
    t = field_type if isinstance(field_type, str) else getattr(field_type, "__name__", str(field_type))
    t = t.replace(" ", "")
    try:
        if t in ("bool",):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if t in ("int",):
            return int(value)
        if t in ("float",):
            return float(value)
        if t.startswith(("int|None", "float|None", "Optional[int]", "Optional[float]")):
            if value.lower() in ("none", "null", ""):
                return None
            return float(value) if "float" in t else int(value)
        if t in ("str|None", "Optional[str]") and value.lower() in ("none", "null"):
            return None
    except ValueError as e:
        raise ParamError(f"{where}: {e}") from None
    return value


CHOICES = "choices"  # dataclass field metadata: the values a parameter accepts (or a function returning them)
NONFINITE = "allow_nonfinite"  # dataclass field metadata: a float parameter that may be inf or nan


def choice_param(default: Any, choices: Iterable[Any] | Callable[[], Iterable[Any]]) -> Any:
    """A parameter field that takes one of ``choices`` (``None`` is accepted when it is the
    default); ``choices`` may be a function, called when a value is checked."""
    return dataclasses.field(default=default, metadata={CHOICES: choices})


def check_value(f: dataclasses.Field, value: Any, where: str) -> None:
    """A ParamError when ``value`` (already coerced) is not finite for a float parameter that does
    not allow it, or is not one of the parameter's enumerated choices."""
    if isinstance(value, float) and not math.isfinite(value) and not f.metadata.get(NONFINITE):
        raise ParamError(f"{where}: must be a finite number, not {value!r}")
    choices = f.metadata.get(CHOICES)
    if choices is None or (value is None and f.default is None):
        return
    allowed = list(choices() if callable(choices) else choices)
    if value not in allowed:
        raise ParamError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")


def _raised_at(e: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of ``e``'s traceback, or nothing."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})" if tb is not None else ""


@dataclass(frozen=True)
class RetrieverSpec:
    """A retriever name plus fully resolved parameters; hashed for result keys."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    # the frozen candidate pool it reranks (docs/design/pools.md): the pool's content hash, part of
    # the spec hash, so one reranker on two pools is two configurations; "" for a first stage
    pool: str = ""
    pool_name: str = ""  # how the pool was named ("<first stage>@<depth>" or a file's name), for labels

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        return f"{self.name} [{self.pool_name or self.pool}]" if self.pool or self.pool_name else self.name

    def as_dict(self) -> dict[str, Any]:
        """The spec as a result stores it: ``{"retriever", "params"}`` and, on a pool, ``"pool"``."""
        out: dict[str, Any] = {"retriever": self.name, "params": dict(self.params)}
        if self.pool:
            out["pool"] = self.pool
        return out

    @classmethod
    def of(cls, spec: Mapping[str, Any], label: str = "", pool_name: str = "") -> "RetrieverSpec":
        """The spec a result stores (:meth:`as_dict`), as a spec again."""
        return cls(str(spec["retriever"]), dict(spec.get("params") or {}), label, str(spec.get("pool") or ""), pool_name)

    def on_pool(self, pool_hash: str, pool_name: str) -> "RetrieverSpec":
        """This configuration reranking the pool ``pool_hash``."""
        return dataclasses.replace(self, pool=pool_hash, pool_name=pool_name)

    def canonical(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, default=str)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]


def canonical_retriever_name(name: str) -> str:
    """One identity per class: a ``module:Class`` whose class is also known by a name (registered
    with :func:`register`, or an entry point of the ``beyondsim.retrievers`` group) is that name, so
    a class submitted once by entry point and once as ``module:Class`` is one configuration (the
    same spec hash, the same row). Any other name is returned unchanged."""
    if ":" not in name or name in _retrievers:
        return name
    cls = get_retriever_class(name)
    info = vars(cls).get("retriever_info")
    if isinstance(info, RetrieverInfo) and info.name != name:
        try:
            if get_retriever_class(info.name) is cls:
                return info.name
        except RegistryError:
            pass
    qualname = cls.__qualname__
    for ep_name, ep in sorted(_entry_points(RETRIEVER_GROUP).items()):
        value = ep.value.replace(" ", "")
        if value == name:
            return ep_name
        if value.rpartition(":")[2] != qualname:  # load only the entry points that may be this class
            continue
        try:
            if ep.load() is cls:
                return ep_name
        except Exception:  # noqa: BLE001 - a broken entry point of another class is not this one
            continue
    return name


ADDED = "added_in"  # dataclass field metadata: the harness version that added the parameter


def added_param(default: Any, *, since: str,
                choices: Iterable[Any] | Callable[[], Iterable[Any]] | None = None) -> Any:
    """A parameter field added to an existing retriever in harness version ``since``, whose
    ``default`` does what the retriever did before it: left out of the spec (and so of the spec
    hash) while it has that value, so results stored before the parameter existed keep their
    identity; any other value is in the spec like every parameter. ``choices``: the values it
    takes, as :func:`choice_param`'s."""
    return field(default=default, metadata={ADDED: since, **({CHOICES: choices} if choices is not None else {})})


def spec_params(p: Any) -> dict[str, Any]:
    """The parameters of a spec: every field of the dataclass ``p``, defaults included, except an
    :func:`added_param` at its default."""
    out = dataclasses.asdict(p)
    for f in dataclasses.fields(p):
        if ADDED in f.metadata and out[f.name] == f.default:
            del out[f.name]
    return out


def make_spec(name: str, params: Mapping[str, Any] | None = None, label: str = "") -> RetrieverSpec:
    """Validate ``params`` against the retriever's dataclass and fill in defaults. A ``module:Class``
    that is also known by a registered name is stored under that name
    (:func:`canonical_retriever_name`)."""
    if label:
        label = check_label(label, "retriever label")  # stored as it names the configuration: normalised
    else:
        check_label(name, "retriever name")
    name = canonical_retriever_name(name)
    cls = get_retriever_class(name)
    p = build_params(params_class(cls), params or {}, f"retriever {name!r}", name)
    own = getattr(cls, "default_label", None)  # a retriever that names its configuration (both stages of a rerank)
    if not label and callable(own):
        label = check_label(own(p), "retriever label")
    return RetrieverSpec(name=name, params=spec_params(p), label=label)


def parse_key_values(items: Iterable[str] | None, *, strip_values: bool) -> dict[str, str]:
    """``KEY=VALUE`` parameters (``-p``, no retriever prefix) as a dict, for :func:`build_params`; a
    malformed one is a ValueError."""
    out: dict[str, str] = {}
    for item in items or []:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise ParamError(f"bad --param {item!r}; use KEY=VALUE")
        out[k.strip()] = v.strip() if strip_values else v
    return out


def parse_spec_text(text: str | Mapping[str, Any], what: str = "spec") -> RetrieverSpec:
    """The retriever spec a one-string form names (:func:`spec_object`), its name resolved and its
    parameters checked with :func:`make_spec`."""
    obj = spec_object(text, what)
    return make_spec(obj["retriever"], obj.get("params", {}))


def spec_object(text: str | Mapping[str, Any], what: str = "spec") -> dict[str, Any]:
    """``{"retriever": NAME, "params": {…}}`` from a one-string form: ``NAME`` (its default
    parameters), ``NAME:KEY=VALUE,…`` (values read as on the command line; one holding a comma needs
    the JSON form) or JSON (or that table itself); a form that names no spec is a
    :class:`ParamError` naming ``what``."""
    if isinstance(text, Mapping):
        obj: Any = dict(text)
    elif isinstance(text, str) and text.strip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParamError(f"{what} {text!r} is not valid JSON: {e}") from None
    elif isinstance(text, str):
        s = text.strip()
        eq = s.find("=")
        colon = s.rfind(":", 0, eq) if eq >= 0 else -1
        if eq >= 0 and colon < 0:
            raise ParamError(f"{what} {text!r}: expected NAME or NAME:KEY=VALUE,KEY=VALUE")
        name, given = (s[:colon], s[colon + 1:]) if colon >= 0 else (s, "")
        params: dict[str, str] = {}
        for item in filter(None, (x.strip() for x in given.split(","))):
            k, sep, v = item.partition("=")
            if not sep or not k.strip():
                raise ParamError(f"{what} {text!r}: {item!r} is not KEY=VALUE (a value holding a comma needs the "
                                 "JSON form)")
            params[k.strip()] = v.strip()
        obj = {"retriever": name.strip(), "params": params}
    else:
        raise ParamError(f"{what} must be a retriever spec string, not {type(text).__name__}")
    if not isinstance(obj, dict) or not isinstance(obj.get("retriever"), str) or not obj["retriever"] \
            or not isinstance(obj.get("params", {}), dict) or set(obj) - {"retriever", "params"}:
        raise ParamError(f"{what} {text!r}: expected {{\"retriever\": NAME, \"params\": {{…}}}}")
    return obj


def build_params(pcls: type, given: Mapping[str, Any], owner: str, prefix: str) -> Any:
    """An instance of the parameter dataclass ``pcls`` from ``given`` (CLI strings coerced to the
    field types); unknown keys and bad values are errors naming ``owner`` and the key."""
    fields = {f.name: f for f in dataclasses.fields(pcls)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ParamError(
            f"{owner}: unknown parameter(s) {', '.join(unknown)}; "
            f"accepted: {', '.join(fields) or '(none)'}"
        )
    coerced = {k: coerce_value(fields[k].type, v, f"{prefix}.{k}") for k, v in given.items()}
    for k, v in coerced.items():
        check_value(fields[k], v, f"{prefix}.{k}")
    try:
        return pcls(**coerced)
    except (TypeError, ValueError) as e:
        raise ParamError(f"{owner}: bad parameters: {e}") from e


def instantiate(spec: RetrieverSpec, cls: type | None = None) -> Any:
    """An instance of ``spec``'s class (``cls`` when the caller has looked it up already) with its params."""
    cls = cls or get_retriever_class(spec.name)
    pcls = params_class(cls)
    if pcls is NoParams and not hasattr(cls, "retriever_name"):
        return cls()
    return cls(pcls(**spec.params))


# ---------------------------------------------------------------------------------------------
# Benchmarks


def benchmark_names() -> list[str]:
    names = set(_entry_points(BENCHMARK_GROUP))
    names.discard(FOLDER_LOADER)
    return sorted(names)


def _load_benchmark_ep(name: str) -> type:
    eps = _entry_points(BENCHMARK_GROUP)
    try:
        return eps[name].load()
    except Exception as e:  # noqa: BLE001
        raise RegistryError(f"benchmark {name!r}: entry point {eps[name].value!r} failed to load: {e}") from e


def looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.sep in name and Path(name).expanduser().exists()


def get_benchmark_loader(name: str) -> tuple[type, str]:
    """Return ``(loader class, name)``. A path to a folder uses the ``folder`` loader;
    ``name:split`` uses the loader of ``name``; ``family/x`` falls back to a ``family/*`` entry point."""
    eps = _entry_points(BENCHMARK_GROUP)
    if name in eps and name != FOLDER_LOADER:
        return _load_benchmark_ep(name), name
    if looks_like_path(name):
        if FOLDER_LOADER not in eps:
            raise RegistryError("no benchmark loader for folders is installed (entry point 'folder')")
        return _load_benchmark_ep(FOLDER_LOADER), name
    base = name.split(":", 1)[0]  # "<name>:<split>", e.g. nevir:train
    if base != name and base in eps and base != FOLDER_LOADER:
        return _load_benchmark_ep(base), name
    family = base.split("/", 1)[0] + "/*"
    if "/" in base and family in eps:
        return _load_benchmark_ep(family), name
    known = benchmark_names()
    raise unknown("benchmark", name, known, "or give the path of a BEIR-format folder.",
                  candidates=sorted({v for v, _, _ in benchmark_variants()} | set(known)))


def stored_benchmark_name(name: str) -> str:
    """The name a benchmark's results are stored under: a folder path, relative or absolute, is
    resolved the way its loader names it, so every command finds the same results; any other name
    stays as given."""
    if not looks_like_path(name):
        return name
    loader, bname = get_benchmark_loader(name)
    return loader.info(bname).name


def load_benchmark(name: str, data_dir: Path, online: bool = False) -> Any:
    """Load benchmark ``name`` (an id, a split such as ``nevir:train``, or a folder path) from
    ``data_dir`` through its registered loader."""
    loader, bname = get_benchmark_loader(name)
    return loader.load(bname, data_dir, online=online)


def benchmark_variants() -> list[tuple[str, type | None, str]]:
    """``(concrete name, loader or None, load error)`` for every registered benchmark. A loader may
    list its concrete names (splits, family members) with a ``variants()`` classmethod; a family
    entry ``x/*`` without one is skipped. A loader that fails to import is reported, not raised."""
    rows: list[tuple[str, type | None, str]] = []
    for n in benchmark_names():
        try:
            loader, _ = get_benchmark_loader(n)
        except RegistryError as e:
            rows.append((n, None, str(e)))
            continue
        variants = getattr(loader, "variants", None)
        names = list(variants()) if callable(variants) else ([] if n.endswith("/*") else [n])
        rows += [(v, loader, "") for v in names if all(v != r[0] for r in rows)]
    return rows


# ---------------------------------------------------------------------------------------------
# Diagnostic-set builders and data manifests


def builder_names() -> list[str]:
    return sorted(_entry_points(BUILDER_GROUP))


def _load_named(group: str, kind: str, name: str) -> Any:
    """The object entry point ``name`` of ``group`` names; a clear error when it is unknown or broken."""
    eps = _entry_points(group)
    if name not in eps:
        raise unknown(kind, name, sorted(eps))
    try:
        return eps[name].load()
    except Exception as e:  # noqa: BLE001
        raise RegistryError(f"{kind.split()[-1]} {name!r}: entry point {eps[name].value!r} failed to load: {e}") from e


def get_builder(name: str) -> Callable[..., Any]:
    return _load_named(BUILDER_GROUP, "diagnostic builder", name)


def trainer_names() -> list[str]:
    return sorted(_entry_points(TRAINER_GROUP))


def get_trainer(name: str) -> Any:
    return _load_named(TRAINER_GROUP, "trainer", name)


def artifact_users(trainer: str) -> list[RetrieverInfo]:
    """The registered retrievers that load artifacts of ``beyondsim train TRAINER`` (their declared
    ``trainer``); one that fails to load is left out."""
    users = []
    for name in retriever_names():
        try:
            info = retriever_info(get_retriever_class(name))
        except RegistryError:
            continue
        if info.trainer == trainer:
            users.append(info)
    return users


def command_apps() -> list[tuple[str, Any, str]]:
    """``(verb, typer app or None, load error)`` for every entry point of group
    ``beyondsim.commands``; one that fails to import is reported, not raised."""
    rows: list[tuple[str, Any, str]] = []
    for name, ep in sorted(_entry_points(COMMAND_GROUP).items()):
        try:
            rows.append((name, ep.load(), ""))
        except Exception as e:  # noqa: BLE001 - a broken plugin must not take the other verbs down
            rows.append((name, None, f"command {name!r}: entry point {ep.value!r} failed to load: {e}"))
    return rows


def manifest_paths() -> list[Path]:
    """The manifest files that installed packages declare (entry point value: a path object or str)."""
    out: list[Path] = []
    for ep in _entry_points(MANIFEST_GROUP).values():
        try:
            out.append(Path(ep.load()))
        except Exception as e:  # noqa: BLE001
            raise RegistryError(f"manifest entry point {ep.value!r} failed to load: {e}") from e
    return out


# ---------------------------------------------------------------------------------------------
# Suites


def reference_files() -> dict[str, Path]:
    """The paths of the reference results shipped with the installed packages (entry point group
    ``beyondsim.reference``): ``plan`` (what runs), ``bundle`` (the results, an export) and
    ``expected`` (the reproduction matrix). Later entry points override earlier keys; empty when
    none is installed."""
    out: dict[str, Path] = {}
    for name, ep in sorted(_entry_points(REFERENCE_GROUP).items()):
        try:
            files = ep.load()
        except Exception as e:  # noqa: BLE001
            raise RegistryError(f"reference files {name!r}: entry point {ep.value!r} failed to load: {e}") from e
        out.update({str(k): Path(v) for k, v in dict(files).items()})
    return out


def suites() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for ep in _entry_points(SUITE_GROUP).values():
        try:
            table = ep.load()
        except Exception as e:  # noqa: BLE001
            raise RegistryError(f"suite entry point {ep.value!r} failed to load: {e}") from e
        out.update(table)
    return out


def get_suite(name: str) -> dict[str, Any]:
    table = suites()
    if name not in table:
        raise unknown("suite", name, sorted(table))
    return table[name]
