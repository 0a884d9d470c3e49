"""Tool-retrieval completeness benchmarks: ToolLens (COLT) and ToolBank (Tool2Vec).

Both are ``completeness`` tasks: every query needs a *set* of tools, all graded 1
(``relevance_threshold = 1``), and ``Comp@k`` asks whether the whole set is in the top k.
Every query's ``meta["set_size"]`` holds the size of its tool set as a string, so results can be
broken down by it.

ToolLens (``toollens``, ``toollens:train``, ``toollens:dev``)
    BEIR-style files from the COLT repository under ``<data_dir>/toollens/``: ``corpus.jsonl`` (464
    tools), ``queries.jsonl`` (18,770 queries), ``qrels/train.tsv`` (16,893 queries) and
    ``qrels/test.tsv`` (1,877 queries).

    * ``toollens`` (alias ``toollens:test``) is the official test split.
    * ToolLens has no validation split. ``toollens:train`` and ``toollens:dev`` are a seeded
      partition (seed 0) of the queries of the original ``qrels/train.tsv``: 20 % dev, the rest
      train (16,893 → 13,515 / 3,378, the sizes of the NNN paper's Table 3). The query ids are
      sorted before the shuffle, so the partition does not depend on row order.
    * COLT also ships ``query_tool_tune.txt`` / ``query_scene_tune.txt``. They are never read: their
      query–tool pairs are exactly those of the test split (the files are byte-identical to
      ``query_tool_test.txt`` / ``query_scene_test.txt``), so tuning on them would tune on the test set.
    * The qrels repeat some rows (23 of 5,010 in test, 170 of 45,035 in train); an identical
      repeat is kept once, so the test split has 4,987 judged pairs (2.66 tools per query;
      counting the repeats gives 2.67).

ToolBank (``toolbank/numpy``, ``toolbank/pandas``, ``toolbank/aws``, each also ``:train``, ``:dev``)
    Files under ``<data_dir>/toolbank/``:

    * tool descriptions from the Tool2Vec repository (``toolrag/data_generation/bank_*/``):
      ``numpy_function_descriptions.json``, ``pandas_function_descriptions_with_classes.json``,
      ``aws_function_descriptions.json``. Each is a dict ``original name → {new_func,
      description[, class]}``; queries name tools by ``new_func``, which is the document id. The
      document title is the name and the text the description (plus ``Class: <class>.`` for
      Pandas, and the ``parameters``/``returns`` fields that two Pandas entries carry).
    * queries as released on the Hugging Face hub (``squeeze-ai-lab/ToolBank``, splits
      ``NumpyBank_train``/``_val``/``_test``, ``PandasBank_*``, ``AWSBank_*``), saved as JSON lists
      ``<Bank>_train.json``, ``<Bank>_val.json``, ``<Bank>_test.json`` of ``{refined_instruction,
      functions, explanation}``. ``toolbank/<bank>`` is the test split, ``:dev`` the val split.

    Conventions:

    * Query ids are ``<Bank>_<file split>_<index in the file>`` (e.g. ``NumpyBank_val_17``).
    * Repeated ``new_func`` names: the NumPy file has 527 entries but 513 distinct names (14
      entries are aliases such as ``numpy.acos``/``numpy.arccos`` → ``inverse_cosine``). Queries
      cannot tell the aliases apart, so each name is one document whose text is the first entry's
      description (Tool2Vec's own code resolves a name to its first entry the same way); the
      folded entries are listed in ``notes["repeated_tool_names"]``. ``duplicate_tool_names =
      "error"`` turns a repeat into a ``DataError`` instead.
    * Tool counts differ from the NNN paper's (511 NumPy, 1,651 Pandas tools): the paper's counts
      are those of Tool2Vec's ``all_tools.json`` vocabulary, which leaves out 2 NumPy and 4 Pandas
      names that the description files do have. All description-file tools are kept here (513 /
      1,655 / 1,002 documents); an unused tool is only one more candidate.
    * When all three released query files are present they are used as released. When only the
      validation file is present (the case of the shared data: ``NumpyBank_val.json``, 1,998
      queries), the released validation set is re-split because the released train/test files
      are absent: a seeded (seed 0) 60/20/20 partition into train/dev/test, recorded in the
      description and in ``notes``. With ``online=True`` and the released files not all on disk,
      the split is read from the Hugging Face hub instead (the tool descriptions must be local:
      the hub dataset does not carry them).

Every function a query names must be a tool of the bank (``DataError`` naming the file, the
query's index and the function otherwise); a query needs at least one tool.

The JSON-list and seeded-split helpers these loaders use live in :mod:`benchmarks.loader`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator

from harness.data import DataError, MissingDataError, read_json, read_qrels_tsv
from harness.registry import UnknownNameError
from harness.types import Benchmark, BenchmarkMeta, Corpus, Document, Judgments, Query

from .loader import (SPLIT_SEED, LoaderBase, Origin, beir_files, item_field, json_list, load_beir_folder, seeded_partition,
                     set_size_stats, split_name, split_of, with_set_size)



# ---------------------------------------------------------------------------------------------
# ToolLens

COLT_REPO = "https://github.com/quchangle1/COLT"
TOOLLENS_SPLITS = ("test", "train", "dev")
TOOLLENS_DEV_FRACTION = 0.2


class ToolLens(LoaderBase):
    """ToolLens loader (entry point ``toollens``); see the module docstring."""

    task: ClassVar[str] = "completeness"
    default_measures: ClassVar[tuple[str, ...]] = ("Comp@3", "Comp@5", "R@3", "R@5", "nDCG@10")
    relevance_threshold: ClassVar[int] = 1
    subdir: ClassVar[str] = "toollens"
    source: ClassVar[str] = (
        f"COLT repository {COLT_REPO} (folder datasets/ToolLens/: corpus.jsonl, queries.jsonl, "
        "qrels/train.tsv, qrels/test.tsv); no automatic download: copy that folder to "
        "<data_dir>/toollens/"
    )
    license: ClassVar[str] = "none stated"

    @classmethod
    def variants(cls) -> list[str]:
        return ["toollens", "toollens:train", "toollens:dev"]

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        split = split_of(name, "toollens", TOOLLENS_SPLITS)
        qrels = "test" if split == "test" else "train"
        if split == "test":
            what = "the official test split (1,877 queries)"
        else:
            what = (f"the {split} part of a seeded (seed {SPLIT_SEED}) 80/20 train/dev partition of the "
                    "original train queries (qrels/train.tsv)")
        return cls.declare(
            name=split_name("toollens", split),
            task=cls.task,
            description=f"ToolLens (COLT) tool retrieval, {what}: each query needs a set of 1-3 of 464 tools.",
            source=cls.source,
            license=cls.license,
            files=[f"{cls.subdir}/{f}" for f in beir_files(qrels)],
            subdir=cls.subdir,
        )

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        """``online`` changes nothing: there is no automatic download (see ``source``)."""
        split = split_of(name, "toollens", TOOLLENS_SPLITS)
        bname = split_name("toollens", split)
        root = cls.require(name, data_dir)
        qrels_split = "test" if split == "test" else "train"
        qrels_path = root / "qrels" / f"{qrels_split}.tsv"
        data = load_beir_folder(root, qrels_split)
        rows = sum(1 for _ in read_qrels_tsv(qrels_path))
        relevance = data.relevance
        notes: dict[str, object] = {
            "qrels_file": f"toollens/qrels/{qrels_split}.tsv",
            "qrels_rows": rows,
            "repeated_qrels_rows": rows - sum(len(v) for v in relevance.values()),
            "tune_files": "not used: query_tool_tune.txt repeats the test split's query-tool pairs",
        }
        if split == "test":
            how = "the official test split"
        else:
            source_queries = len(relevance)
            parts = seeded_partition(relevance, [("dev", TOOLLENS_DEV_FRACTION)], rest="train")
            keep = parts[split]
            relevance = {q: d for q, d in relevance.items() if q in keep}
            notes.update({
                "split_seed": SPLIT_SEED,
                "split_fractions": {"train": 1 - TOOLLENS_DEV_FRACTION, "dev": TOOLLENS_DEV_FRACTION},
                "split_source": "toollens/qrels/train.tsv",
                "split_source_queries": source_queries,
                "split_sizes": {k: len(v) for k, v in parts.items()},
            })
            how = (f"the {split} part ({len(keep):,} of {source_queries:,} queries) of a seeded (seed {SPLIT_SEED}) "
                   f"80/20 train/dev partition of the original train queries (qrels/train.tsv), since ToolLens "
                   "releases no validation split")
        queries = with_set_size((q for q in data.queries if q.id in relevance), relevance)
        stats = set_size_stats(relevance)
        notes.update({"tools": len(data.corpus), "queries": len(queries), "items_per_query": stats})
        description = (
            f"ToolLens (COLT) tool retrieval, {how}: {len(queries):,} queries over {len(data.corpus):,} tools; "
            f"each query needs a set of {stats['min']}-{stats['max']} tools (mean {stats['mean']:.2f}), all "
            "graded 1. COLT's 'tune' files are never used: they repeat the test split."
        )
        return cls.build(bname, data.corpus, queries, Judgments(relevance), splits={split: [q.id for q in queries]},
                         description=description, notes=notes)


# ---------------------------------------------------------------------------------------------
# ToolBank

TOOL2VEC_REPO = "https://github.com/SqueezeAILab/Tool2Vec"
TOOLBANK_HF = "squeeze-ai-lab/ToolBank"
TOOLBANK_SPLITS = ("test", "train", "dev")
FILE_SPLIT = {"train": "train", "dev": "val", "test": "test"}  # benchmark split → released split
RESPLIT_FRACTIONS = (("test", 0.2), ("dev", 0.2))  # the rest (60 %) is train

# bank → (released name, tool-description file, Tool2Vec folder, NNN paper tools and train/val/test sizes)
BANKS: dict[str, tuple[str, str, str, str]] = {
    "numpy": ("NumpyBank", "numpy_function_descriptions.json", "bank_numpy", "511 tools; 15,994/1,998/2,000"),
    "pandas": ("PandasBank", "pandas_function_descriptions_with_classes.json", "bank_pandas",
               "1,651 tools; 56,013/7,002/7,002"),
    "aws": ("AWSBank", "aws_function_descriptions.json", "bank_aws", "1,002 tools; 58,227/7,278/7,278"),
}
EXTRA_TOOL_FIELDS = (("parameters", "Parameters"), ("return", "Returns"), ("returns", "Returns"))


def toolbank_name(name: str) -> tuple[str, str]:
    """``toolbank/numpy:dev`` → ``("numpy", "dev")``."""
    base, sep, split = name.partition(":")
    family, _, bank = base.partition("/")
    split = split or ("" if sep else "test")
    if family != "toolbank" or bank not in BANKS or split not in TOOLBANK_SPLITS:
        raise UnknownNameError(f"unknown ToolBank benchmark {name!r}; use toolbank/<bank>[:train|:dev] with bank "
                         f"one of {', '.join(BANKS)}")
    return bank, split


def query_file(bank: str, split: str) -> str:
    """``NumpyBank_val.json`` for ``("numpy", "dev")``."""
    return f"{BANKS[bank][0]}_{FILE_SPLIT[split]}.json"


def tool_text(entry: dict[str, Any], origin: Origin, where: str, description: str, with_class: bool) -> str:
    parts = [description.strip()]
    for key, label in EXTRA_TOOL_FIELDS:
        value = entry.get(key)
        if isinstance(value, dict):
            value = "; ".join(f"{k}: {v}" for k, v in value.items())
        if isinstance(value, str) and value.strip():
            parts.append(f"{label}: {value.strip()}")
    if with_class:
        parts.append(f"Class: {item_field(entry, 'class', origin, where, nonempty=True)}.")
    return " ".join(parts)


def read_tool_descriptions(path: Path, with_class: bool, on_repeat: str = "first"
                           ) -> tuple[Corpus, dict[str, list[str]], int]:
    """``(corpus, repeated names → folded original names, entries)`` of a Tool2Vec description file."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(path, None, f"expected a JSON object (original name → tool), got {type(data).__name__}")
    docs: list[Document] = []
    first: dict[str, str] = {}
    repeated: dict[str, list[str]] = {}
    for key, entry in data.items():
        where = f"entry {key!r}"
        name = item_field(entry, "new_func", path, where, nonempty=True).strip()
        description = item_field(entry, "description", path, where, nonempty=True)
        text = tool_text(entry, path, where, description, with_class)
        if name in first:
            if on_repeat == "error":
                raise DataError(path, None, f"{where}: 'new_func' {name!r} repeats entry {first[name]!r}")
            repeated.setdefault(name, [first[name]]).append(key)
            continue
        first[name] = key
        docs.append(Document(id=name, text=text, title=name))
    if not docs:
        raise DataError(path, None, "no tools found")
    return Corpus(docs), repeated, len(data)


def bank_queries(rows: Iterable[tuple[int, Any]], origin: Origin, bank: str, file_split: str,
                 tools: Corpus, tools_file: str) -> tuple[list[Query], dict[str, dict[str, int]]]:
    """Query records ``{refined_instruction, functions, …}`` → queries and binary judgments."""
    prefix = f"{BANKS[bank][0]}_{file_split}"
    queries: list[Query] = []
    relevance: dict[str, dict[str, int]] = {}
    for index, obj in rows:
        where = f"item {index}"
        text = item_field(obj, "refined_instruction", origin, where, kind=(str, type(None)), default=None)
        if not (text or "").strip():  # Tool2Vec falls back to the unrefined instruction
            text = item_field(obj, "instruction", origin, where, nonempty=True)
        functions = item_field(obj, "functions", origin, where, kind=list)
        if not functions:
            raise DataError(origin, None, f"{where}: field 'functions' is empty (a query needs at least one tool)")
        grades: dict[str, int] = {}
        for f in functions:
            if not isinstance(f, str) or not f.strip():
                raise DataError(origin, None, f"{where}: field 'functions' must hold tool names, got {f!r}")
            if f not in tools:
                raise DataError(origin, None, f"{where}: field 'functions' names unknown tool {f!r} "
                                              f"(no 'new_func' of {tools_file} has that name)")
            if f in grades:
                raise DataError(origin, None, f"{where}: field 'functions' lists tool {f!r} twice")
            grades[f] = 1
        qid = f"{prefix}_{index}"
        queries.append(Query(qid, text, {"index": index}))
        relevance[qid] = grades
    return queries, relevance


class ToolBank(LoaderBase):
    """ToolBank loader (entry point ``toolbank/*``); see the module docstring."""

    task: ClassVar[str] = "completeness"
    default_measures: ClassVar[tuple[str, ...]] = ("Comp@3", "Comp@5", "R@3", "R@5", "nDCG@10")
    relevance_threshold: ClassVar[int] = 1
    subdir: ClassVar[str] = "toolbank"
    license: ClassVar[str] = "MIT"
    duplicate_tool_names: ClassVar[str] = "first"  # or "error"

    @classmethod
    def variants(cls) -> list[str]:
        return [split_name(f"toolbank/{b}", s) for b in BANKS for s in TOOLBANK_SPLITS]

    @classmethod
    def source_of(cls, bank: str) -> str:
        released, desc, folder, _ = BANKS[bank]
        return (f"queries: Hugging Face dataset {TOOLBANK_HF} (https://huggingface.co/datasets/{TOOLBANK_HF}), "
                f"splits {released}_train/_val/_test, saved as <data_dir>/toolbank/{released}_<split>.json (JSON "
                f"lists); tool descriptions: Tool2Vec repository {TOOL2VEC_REPO}, file "
                f"toolrag/data_generation/{folder}/{desc} (no automatic download: copy it to <data_dir>/toolbank/)")

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        bank, split = toolbank_name(name)
        released, desc, _, paper = BANKS[bank]
        return cls.declare(
            name=split_name(f"toolbank/{bank}", split),
            task=cls.task,
            description=(f"ToolBank {released} ({split}): API-programming tasks, each needing a set of tools "
                         f"(NNN paper: {paper} train/val/test queries)."),
            source=cls.source_of(bank),
            license=cls.license,
            files=[f"{cls.subdir}/{desc}", f"{cls.subdir}/{query_file(bank, split)}"],
            subdir=cls.subdir,
            optional_files=[f"{cls.subdir}/{query_file(bank, s)}" for s in TOOLBANK_SPLITS if s != split],
        )

    @classmethod
    def scheme(cls, bank: str, data_dir: Path) -> str:
        """``released`` (all three query files present), ``resplit`` (only the val file) or ``missing``."""
        root = Path(data_dir) / cls.subdir
        present = {s: (root / query_file(bank, s)).is_file() for s in TOOLBANK_SPLITS}
        if all(present.values()):
            return "released"
        return "resplit" if present["dev"] else "missing"

    @classmethod
    def missing_files(cls, name: str, data_dir: Path) -> list[str]:
        bank, _ = toolbank_name(name)
        desc = f"{cls.subdir}/{BANKS[bank][1]}"
        missing = [] if (Path(data_dir) / desc).is_file() else [desc]
        if cls.scheme(bank, data_dir) == "missing":
            missing += [f"{cls.subdir}/{query_file(bank, s)}" for s in ("train", "dev", "test")
                        if not (Path(data_dir) / cls.subdir / query_file(bank, s)).is_file()]
        return missing

    @classmethod
    def files_in_use(cls, name: str, data_dir: Path) -> list[Path]:
        bank, split = toolbank_name(name)
        root = Path(data_dir) / cls.subdir
        scheme = cls.scheme(bank, data_dir)
        files = [root / BANKS[bank][1]]
        if scheme != "missing":
            files.append(root / query_file(bank, split if scheme == "released" else "dev"))
        return [p for p in files if p.is_file()]

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False,
             duplicate_tool_names: str | None = None) -> Benchmark:
        """Released split when all three query files are on disk; else, with ``online``, the split
        from the hub; else a re-split of the released validation file (see the module docstring).
        The tool descriptions are always read from disk."""
        bank, split = toolbank_name(name)
        bname = split_name(f"toolbank/{bank}", split)
        released, desc_file, _, paper = BANKS[bank]
        root = Path(data_dir) / cls.subdir
        scheme = cls.scheme(bank, data_dir)
        desc_path = root / desc_file
        if not desc_path.is_file() or (scheme == "missing" and not online):
            raise MissingDataError(bname, Path(data_dir), cls.missing_files(name, data_dir), cls.source_of(bank))
        on_repeat = duplicate_tool_names or cls.duplicate_tool_names
        if on_repeat not in ("first", "error"):
            raise ValueError(f"duplicate_tool_names must be 'first' or 'error', got {on_repeat!r}")
        tools, repeated, entries = read_tool_descriptions(desc_path, with_class=bank == "pandas", on_repeat=on_repeat)

        notes: dict[str, object] = {"tool_file": f"toolbank/{desc_file}", "tool_entries": entries}
        origin: Origin
        if scheme == "released" or online:
            file_split = FILE_SPLIT[split]
            if scheme == "released":
                origin = root / query_file(bank, split)
                rows: Iterable[tuple[int, Any]] = enumerate(json_list(origin))
                notes["query_source"] = f"toolbank/{query_file(bank, split)}"
            else:
                rows, origin = cls._hf_rows(f"{released}_{file_split}")
                notes["query_source"] = notes["online_source"] = str(origin)
            queries, relevance = bank_queries(rows, origin, bank, file_split, tools, desc_file)
            notes["split_scheme"] = "released"
            how = f"the released {released}_{file_split} split"
        else:
            origin = root / query_file(bank, "dev")
            queries, relevance = bank_queries(enumerate(json_list(origin)), origin, bank, "val", tools, desc_file)
            absent = [query_file(bank, s) for s in ("train", "test") if not (root / query_file(bank, s)).is_file()]
            source_queries = len(queries)
            parts = seeded_partition(relevance, RESPLIT_FRACTIONS, rest="train")
            keep = parts[split]
            if not keep:
                raise DataError(origin, None, f"the {split} part of the re-split is empty: {source_queries} "
                                              "queries are too few")
            queries = [q for q in queries if q.id in keep]
            relevance = {q.id: relevance[q.id] for q in queries}
            notes.update({
                "split_scheme": "resplit of the released validation set",
                "split_reason": f"released files absent: {', '.join(absent)}",
                "split_seed": SPLIT_SEED,
                "split_fractions": {"train": 0.6, "dev": 0.2, "test": 0.2},
                "split_source": f"toolbank/{query_file(bank, 'dev')}",
                "split_source_queries": source_queries,
                "split_sizes": {k: len(v) for k, v in parts.items()},
            })
            how = (f"the {split} part ({len(queries):,} of {source_queries:,} queries) of the released validation "
                   f"set {query_file(bank, 'dev')}, re-split because the released train/test files are absent "
                   f"(seeded, seed {SPLIT_SEED}, 60/20/20 train/dev/test)")
        if not queries:
            raise DataError(origin, None, "no queries found")
        queries = with_set_size(queries, relevance)
        stats = set_size_stats(relevance)
        n_repeat = sum(len(v) - 1 for v in repeated.values())
        notes.update({
            "tools": len(tools),
            "repeated_tool_names": repeated,
            "queries": len(queries),
            "items_per_query": stats,
            "paper_counts": paper,
        })
        folded = f"; {n_repeat} entries repeating an earlier 'new_func' name folded onto it" if n_repeat else ""
        description = (
            f"ToolBank {released}, {how}: {len(queries):,} API-programming queries over {len(tools):,} tools "
            f"({entries:,} entries in {desc_file}{folded}); each query needs a set of {stats['min']}-{stats['max']} "
            f"tools (mean {stats['mean']:.2f}), all graded 1."
        )
        return cls.build(bname, tools, queries, Judgments(relevance), splits={split: [q.id for q in queries]},
                         description=description, source=cls.source_of(bank), notes=notes)

    @staticmethod
    def _hf_rows(hf_split: str) -> tuple[Iterator[tuple[int, Any]], str]:
        """Rows of one split from the Hugging Face hub (imported here: the only network path)."""
        try:
            from datasets import load_dataset
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("online ToolBank loading needs the 'datasets' package: pip install datasets") from e
        ds = load_dataset(TOOLBANK_HF, split=hf_split)
        return ((i, dict(row)) for i, row in enumerate(ds)), f"hf:{TOOLBANK_HF}[{hf_split}]"
