"""BEIR datasets: ``beir/<name>`` from the data directory (or ``ir_datasets``), and any local
BEIR-format folder given by its path.

Conventions (both loaders): a qrels grade >= 1 counts as relevant (``relevance_threshold = 1``;
nDCG uses the grades as gains). As in BEIR's own loader, only the queries that
``qrels/<split>.tsv`` judges are kept (``queries.jsonl`` usually holds every split's queries); the
count in the file is kept in ``notes["queries_in_source"]``.

Constraint benchmarks in BEIR format (README, "Constraint benchmarks of your own"): a folder of
your own marks violating documents with a qrels grade below 0, or lists them in
``qrels/<split>.violating.tsv`` (``query-id<TAB>corpus-id``; a pair there that the qrels do not
grade counts as graded -1). The task is inferred: ``constraint`` when any violating document
exists (V@k and FVR@k then apply), else ``topical``. A negative grade stays in the relevance table,
where pytrec_eval treats it like 0 (judged, not relevant, no gain). In the datasets of BEIR itself
a negative grade keeps its TREC meaning (judged junk, not relevant) and marks nothing as violating;
their task is ``topical`` unless a violating file is added.

Splits: the plain name is the test split (``qrels/test.tsv``). A ``:<split>`` suffix
(``beir/scifact:train``, ``/data/my-set:train``) reads ``qrels/<split>.tsv`` instead, with the
same corpus, and puts the query ids under ``splits[<split>]``; this is the name the runner asks
for when a trainable retriever needs a train split.

Names: :data:`BEIR_DATASETS` lists the datasets of BEIR. Any other ``beir/<name>`` loads from its
folder ``<data_dir>/beir/<name>/`` when that folder exists (a dataset of your own, in BEIR
format); when it does not, the name is reported as unknown with the close BEIR names ("did you
mean"), and no source is invented for it.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, ClassVar

from harness.data import MissingDataError, parse_grade
from harness.data.readers import check_path, path_is_dir, path_is_file
from harness.registry import RegistryError, UnknownNameError
from harness.types import Benchmark, BenchmarkMeta

from .loader import (
    TOPICAL_MEASURES,
    BeirData,
    LoaderBase,
    assemble_beir,
    beir_files,
    build_corpus,
    build_queries,
    build_relevance,
    inferred_task,
    join_rel,
    load_beir_folder,
    task_measures,
    violating_file,
)

BEIR_MEASURES = TOPICAL_MEASURES
BEIR_ZIP = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{}.zip"
BEIR_REPO = "https://github.com/beir-cellar/beir"
IRDS_DOCS = "https://ir-datasets.com/beir.html"

CQADUPSTACK_FORUMS = ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats",
                      "tex", "unix", "webmasters", "wordpress")
# BEIR's datasets (Thakur et al., 2021, table 1; CQADupStack by forum). BEIR does not redistribute
# the last four: they are rebuilt from their original sources as BEIR's repository explains.
NOT_REDISTRIBUTED = ("bioasq", "signal1m", "trec-news", "robust04")
BEIR_DATASETS = (
    "msmarco", "trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "quora",
    "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact",
    *(f"cqadupstack/{forum}" for forum in CQADUPSTACK_FORUMS), *NOT_REDISTRIBUTED,
)

# ir_datasets ids: these datasets have per-split subsets (``beir/<name>/test``); the others
# (arguana, scidocs, trec-covid, nq, climate-fever, webis-touche2020, cqadupstack/<forum>) are
# registered as ``beir/<name>`` with their test qrels only.
IRDS_WITH_SPLITS = frozenset(
    {"msmarco", "nfcorpus", "hotpotqa", "fiqa", "quora", "dbpedia-entity", "fever", "scifact"}
)

# The BEIR datasets the three papers evaluate (``beyondsim data status`` lists each of them);
# any other BEIR dataset name works the same way.
PAPER_DATASETS = ("scifact", "nfcorpus", "scidocs", "arguana", "fiqa", "cqadupstack/android")

# Licenses as listed in BEIR's dataset table (Thakur et al., 2021, appendix).
LICENSES = {
    "scifact": "CC BY-NC 2.0",
    "nfcorpus": "CC BY-SA 4.0",
    "scidocs": "GNU GPL v3.0",
    "arguana": "CC BY 4.0",
    "fiqa": "not reported by BEIR",
    "cqadupstack": "Apache License 2.0",
}
DEFAULT_LICENSE = "that of the original dataset (BEIR redistributes it; see https://github.com/beir-cellar/beir)"

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
_SPLIT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def parse_beir_name(name: str) -> tuple[str, str]:
    """``beir/cqadupstack/android`` → ``("cqadupstack/android", "test")``;
    ``beir/scifact:train`` → ``("scifact", "train")``. Rejects names that could leave the data
    directory."""
    prefix = "beir/"
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    sub, sep, split = rest.partition(":")
    if not sep:
        split = "test"
    if not _NAME_RE.fullmatch(sub) or ".." in sub.split("/") or not _SPLIT_RE.fullmatch(split):
        raise UnknownNameError(f"not a BEIR benchmark name: {name!r} (expected 'beir/<dataset>[:<split>]', "
                         "e.g. 'beir/scifact')")
    return sub, split


def split_suffix(split: str) -> str:
    return "" if split == "test" else f":{split}"


def close_beir_names(sub: str) -> list[str]:
    """The BEIR datasets whose names are close to ``sub`` (at most three, closest first)."""
    return difflib.get_close_matches(sub, BEIR_DATASETS, n=3, cutoff=0.6)


def unknown_beir_name(name: str, folder: Path) -> RegistryError:
    """The error for ``beir/<name>`` when ``<name>`` is no BEIR dataset and ``folder`` does not exist."""
    sub, split = parse_beir_name(name)
    close = [f"beir/{c}{split_suffix(split)}" for c in close_beir_names(sub)]
    known = [d for d in BEIR_DATASETS if not d.startswith("cqadupstack/")]
    known.append(f"cqadupstack/<{'|'.join(CQADUPSTACK_FORUMS)}>")
    msg = f"unknown BEIR dataset {sub!r} (benchmark {name!r})."
    if close:
        msg += f" Did you mean {' or '.join(repr(c) for c in close)}?"
    return RegistryError(f"{msg} BEIR datasets: {', '.join(sorted(known))}; a dataset of your own is read from a "
                         f"BEIR-format folder at {folder}/ (corpus.jsonl, queries.jsonl, qrels/{split}.tsv)")


def official_source(sub: str, split: str) -> str:
    """Where a BEIR dataset comes from; for a name that is no BEIR dataset, says so."""
    base = sub.split("/")[0]
    if base in NOT_REDISTRIBUTED:
        return f"not redistributed by BEIR: rebuild {sub!r} from its original source as {BEIR_REPO} explains"
    if sub not in BEIR_DATASETS:
        close = close_beir_names(sub)
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        return (f"none: {sub!r} is not a BEIR dataset{hint}; a BEIR-format folder of your own at beir/{sub}/ "
                "in the data directory is read as it is")
    return (f"ir_datasets id {irds_ids(sub, split)[0]!r} ({IRDS_DOCS}), "
            f"or the BEIR zip {BEIR_ZIP.format(base)}")


def irds_ids(sub: str, split: str = "test") -> list[str]:
    """ir_datasets ids to try for a BEIR dataset split, most likely first."""
    with_split, bare = f"beir/{sub}/{split}", f"beir/{sub}"
    if split != "test":
        return [with_split]
    return [with_split, bare] if sub in IRDS_WITH_SPLITS else [bare, with_split]


INFERRED_TASK = ("task inferred from the judgments: constraint when the qrels mark violating documents "
                 "(a grade < 0, or {violating}), else topical")


def _describe(title: str, split: str, data: BeirData) -> str:
    if inferred_task(data.judgments) == "constraint":
        sources = " and ".join(data.violating_from)
        return (f"{title} ({split} split): constraint retrieval over {len(data.corpus):,} documents, "
                f"{len(data.queries):,} judged queries; a qrels grade >= 1 counts as relevant; "
                f"{data.judgments.n_violating_pairs():,} violating pairs ({sources}).")
    return (f"{title} ({split} split): topical retrieval over {len(data.corpus):,} documents, "
            f"{len(data.queries):,} judged queries; a qrels grade >= 1 counts as relevant; "
            "no violating documents.")


def _build(loader: type[LoaderBase], name: str, title: str, split: str, data: BeirData, **texts: Any) -> Benchmark:
    """The benchmark of a BEIR dataset, its task inferred from its judgments."""
    judgments = data.judgments
    task = inferred_task(judgments)
    return loader.build(name, data.corpus, data.queries, judgments, splits={split: [q.id for q in data.queries]},
                        description=_describe(title, split, data), task=task, default_measures=task_measures(task),
                        notes=data.notes, **texts)


class BeirBenchmark(LoaderBase):
    """``beir/<name>`` (``beir/scifact``, ``beir/nfcorpus``, ``beir/cqadupstack/android`` …).

    Local folder ``<data_dir>/beir/<name>/`` with ``corpus.jsonl`` (``_id``, ``title``,
    ``text``), ``queries.jsonl`` (``_id``, ``text``) and ``qrels/test.tsv``. With
    ``online=True`` and local files missing, the dataset comes from ``ir_datasets``
    (``beir/<name>/test``, or ``beir/<name>`` for datasets without split subsets).
    """

    task: ClassVar[str] = "topical"
    default_measures: ClassVar[tuple[str, ...]] = BEIR_MEASURES
    relevance_threshold: ClassVar[int] = 1

    @classmethod
    def variants(cls) -> list[str]:
        """The concrete names ``data status`` lists: the papers' BEIR datasets, plus SciFact's train split."""
        return [f"beir/{d}" for d in PAPER_DATASETS] + ["beir/scifact:train"]

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        sub, split = parse_beir_name(name)
        subdir = f"beir/{sub}"
        return cls.declare(
            name=f"beir/{sub}{split_suffix(split)}",
            task=cls.task,
            description=(f"BEIR {sub} ({split} split): topical retrieval, qrels grade >= 1 is relevant."
                         if sub in BEIR_DATASETS else
                         f"BEIR-format folder beir/{sub} ({split} split): qrels grade >= 1 is relevant; "
                         + INFERRED_TASK.format(violating=violating_file(split)) + "."),
            source=official_source(sub, split),
            license=LICENSES.get(sub.split("/")[0], DEFAULT_LICENSE if sub in BEIR_DATASETS else "unknown"),
            files=[join_rel(subdir, f) for f in beir_files(split)],
            subdir=subdir,
            optional_files=[join_rel(subdir, violating_file(split))],
        )

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        sub, split = parse_beir_name(name)
        info = cls.info(name)
        folder = Path(data_dir) / info.subdir
        if sub not in BEIR_DATASETS and not path_is_dir(folder):
            raise unknown_beir_name(name, folder)
        if online and cls.missing_files(name, data_dir):
            data, source = cls._from_ir_datasets(name, Path(data_dir))
        else:
            root = cls.require(name, data_dir)
            data = load_beir_folder(root, split, negative_violates=sub not in BEIR_DATASETS)
            source = info.source
        return _build(cls, info.name, f"BEIR {sub}", split, data, source=source, license=info.license)

    @classmethod
    def _from_ir_datasets(cls, name: str, data_dir: Path) -> tuple[BeirData, str]:
        """Fetch through ``ir_datasets`` (imported here: the only network path of this loader)."""
        try:
            import ir_datasets
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("online BEIR loading needs ir_datasets: pip install 'beyondsim[online]'") from e
        sub, split = parse_beir_name(name)
        candidates = irds_ids(sub, split)
        dataset: Any = None
        for ds_id in candidates:
            try:
                dataset = ir_datasets.load(ds_id)
            except KeyError:
                continue
            break
        if dataset is None:
            raise MissingDataError(name, Path(data_dir), cls.missing_files(name, data_dir),
                                   f"{cls.info(name).source} (ir_datasets knows none of {', '.join(candidates)})")
        label = f"ir_datasets:{ds_id}"
        corpus = build_corpus(
            ((i, str(d.doc_id), getattr(d, "title", "") or "", d.text or "")
             for i, d in enumerate(dataset.docs_iter(), 1)),
            f"{label} docs",
        )
        queries = build_queries(
            ((i, str(q.query_id), q.text) for i, q in enumerate(dataset.queries_iter(), 1)),
            f"{label} queries",
        )
        relevance = build_relevance(
            ((i, str(r.query_id), str(r.doc_id), parse_grade(str(r.relevance), f"{label} qrels", i, "relevance"))
             for i, r in enumerate(dataset.qrels_iter(), 1)),
            f"{label} qrels", corpus, {q.id for q in queries},
        )
        data = assemble_beir(corpus, queries, relevance, keep_unjudged_queries=False)
        data.notes["online_source"] = label
        return data, f"{label} ({IRDS_DOCS})"


class BeirFolder(LoaderBase):
    """Any BEIR-format folder, named by its path (entry point ``folder``). A folder holding a
    diagnostic set (``corpus_<set>.jsonl`` + ``queries_<set>.jsonl``) is read as one instead.

    The folder holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` (header line
    optional), and may hold ``qrels/test.violating.tsv``; ``<path>:<split>`` reads
    ``qrels/<split>.tsv`` (and ``qrels/<split>.violating.tsv``). The task is inferred from the
    judgments (see the module docstring). The benchmark is named by the
    resolved absolute path (plus ``:<split>`` for a non-test split): unambiguous, and a name the
    registry resolves back to this loader, so the runner can reload it or ask for its ``:train``
    split. The folder's own name is kept in ``notes["folder_name"]``. There is no online source;
    ``data_dir`` and ``online`` are ignored.
    """

    task: ClassVar[str] = "topical"
    default_measures: ClassVar[tuple[str, ...]] = BEIR_MEASURES
    relevance_threshold: ClassVar[int] = 1

    @staticmethod
    def parse(name: str | Path) -> tuple[Path, str]:
        """``(resolved folder, split)``; a trailing ``:<split>`` is a split unless the whole name is
        an existing folder. A path no file system can name (a name in it over 255 bytes) is one
        ``DataError`` naming it, shortened."""
        raw = str(name)
        path = check_path(Path(raw).expanduser())
        head, sep, tail = raw.rpartition(":")
        if not path_is_dir(path) and sep and head and _SPLIT_RE.fullmatch(tail):
            return check_path(Path(head).expanduser().resolve()), tail
        return check_path(path.resolve()), "test"

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        """``files`` are absolute paths (a data directory joined with them leaves them as they are)."""
        path, split = cls.parse(name)
        return cls.declare(
            name=f"{path}{split_suffix(split)}",
            task=cls.task,
            description=(f"BEIR-format folder {path} ({split} split): qrels grade >= 1 is relevant; "
                         + INFERRED_TASK.format(violating=violating_file(split)) + "."),
            source=f"local BEIR-format folder {path}",
            license="unknown (local folder)",
            files=[str(path / f) for f in beir_files(split)],
            subdir=str(path),
            optional_files=[str(path / violating_file(split))],
        )

    @classmethod
    def layout(cls, name: str) -> str:
        """Which layout a load of ``name`` reads, and its files (for ``beyondsim data check``)."""
        path, split = cls.parse(name)
        from .diagnostics import find_set_files

        found = find_set_files(path) if split == "test" and path_is_dir(path) else None
        if found is not None:
            return f"diagnostic layout: {found[1].name}, {found[2].name}"
        files = [*beir_files(split), *([violating_file(split)] if path_is_file(path / violating_file(split)) else [])]
        return f"BEIR layout: {', '.join(files)}"

    @classmethod
    def load(cls, name: str, data_dir: Path | None = None, online: bool = False) -> Benchmark:
        path, split = cls.parse(name)
        from .diagnostics import DiagnosticSet, find_set_files

        if split == "test" and path_is_dir(path) and find_set_files(path) is not None:
            return DiagnosticSet.load_folder(path, name=str(path))
        info = cls.info(name)
        cls.require(name, path)
        data = load_beir_folder(path, split)
        data.notes.update(path=str(path), folder_name=path.name, layout="beir")
        return _build(cls, info.name, f"BEIR-format folder {path.name}", split, data, source=info.source,
                      license=info.license)
