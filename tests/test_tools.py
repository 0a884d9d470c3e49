"""ToolLens and ToolBank loaders: real counts on the shared data, the seeded splits, strictness on
small fixtures in the real formats, the online path with a fake ``datasets`` module, the registry."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest

from benchmarks.tools import ToolBank, ToolLens, seeded_partition
from harness.data import DataError, MissingDataError
from harness.types import Benchmark

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _need(*files: str) -> pytest.MarkDecorator:
    missing = [f for f in files if not (DATA / f).exists()]
    where = ", ".join(str(DATA / f) for f in missing)
    return pytest.mark.skipif(bool(missing), reason=f"shared data not found: {where}")


TOOLLENS = _need("toollens/corpus.jsonl", "toollens/queries.jsonl", "toollens/qrels/train.tsv",
                 "toollens/qrels/test.tsv")
NUMPY = _need("toolbank/numpy_function_descriptions.json", "toolbank/NumpyBank_val.json")


def check_common(b: Benchmark) -> None:
    """Invariants every loaded benchmark must satisfy."""
    qids = {q.id for q in b.queries}
    assert len(qids) == len(b.queries)
    assert set(b.judgments.relevance) == qids  # every query is judged
    for docs in b.judgments.relevance.values():
        assert docs and all(d in b.corpus for d in docs)
    assert b.judgments.violating == {}
    assert re.fullmatch(r"[0-9a-f]{16}", b.version)
    assert b.source and b.license and b.description
    assert b.task == "completeness" and b.relevance_threshold == 1
    assert b.default_measures == ("Comp@3", "Comp@5", "R@3", "R@5", "nDCG@10")
    (split, ids), = b.splits.items()
    assert ids == [q.id for q in b.queries]
    assert all(q.meta["set_size"] == str(len(b.judgments.relevance[q.id])) for q in b.queries)


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def write_json(path: Path, obj: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# ToolLens on the shared data


@pytest.fixture(scope="module")
def toollens() -> dict[str, Benchmark]:
    return {n: ToolLens.load(n, DATA) for n in ("toollens", "toollens:train", "toollens:dev")}


@TOOLLENS
def test_toollens_test_counts(toollens: dict[str, Benchmark]) -> None:
    b = toollens["toollens"]
    check_common(b)
    assert b.name == "toollens" and list(b.splits) == ["test"]
    assert len(b.queries) == 1877 and len(b.corpus) == 464
    # qrels/test.tsv has 5,010 rows of which 23 repeat an earlier (query, tool) row; repeats count
    # once, so 4,987 judged pairs: 2.66 tools per query (the NNN paper's 2.66; the 2.67 quoted for
    # the COLT files counts the repeated rows, 5,010 / 1,877).
    assert b.notes["qrels_rows"] == 5010 and b.notes["repeated_qrels_rows"] == 23
    assert b.judgments.n_judged_pairs() == 4987
    assert b.notes["items_per_query"] == {"min": 1, "max": 3, "mean": pytest.approx(2.6569, abs=1e-4)}
    assert all(g == 1 for r in b.judgments.relevance.values() for g in r.values())
    assert "1,877 queries" in b.description and "COLT" in b.source


@TOOLLENS
def test_toollens_train_dev_partition(toollens: dict[str, Benchmark]) -> None:
    train, dev, test = toollens["toollens:train"], toollens["toollens:dev"], toollens["toollens"]
    for b in (train, dev):
        check_common(b)
        assert b.notes["split_seed"] == 0 and b.notes["split_source"] == "toollens/qrels/train.tsv"
        assert b.notes["split_fractions"] == {"train": 0.8, "dev": 0.2}
        assert "seeded (seed 0) 80/20" in b.description and len(b.corpus) == 464
    # the NNN paper's Table 3: 13,515 / 3,378 / 1,877
    assert len(train.queries) == 13515 and len(dev.queries) == 3378
    assert list(train.splits) == ["train"] and list(dev.splits) == ["dev"]
    tr, dv, te = ({q.id for q in b.queries} for b in (train, dev, test))
    assert not tr & dv and not tr & te and not dv & te
    with open(DATA / "toollens/qrels/train.tsv", encoding="utf-8") as f:
        source_ids = {ln.split("\t")[0] for ln in list(f)[1:] if ln.strip()}
    assert tr | dv == source_ids and len(source_ids) == 16893
    texts = {b: {q.text for q in toollens[b].queries} for b in toollens}
    assert not texts["toollens:train"] & texts["toollens"] and not texts["toollens:dev"] & texts["toollens"]
    assert train.version != dev.version != test.version


@TOOLLENS
def test_toollens_split_is_deterministic(toollens: dict[str, Benchmark]) -> None:
    again = ToolLens.load("toollens:dev", DATA)
    assert [q.id for q in again.queries] == [q.id for q in toollens["toollens:dev"].queries]
    assert again.version == toollens["toollens:dev"].version
    assert ToolLens.load("toollens:test", DATA).version == toollens["toollens"].version  # alias


@TOOLLENS
@pytest.mark.skipif(not (DATA / "toollens/query_tool_tune.txt").exists(), reason="COLT tune file absent")
def test_toollens_tune_file_is_the_test_set_and_unused() -> None:
    # COLT's "tune" files repeat the test split exactly: tuning on them would tune on the test set
    tune = (DATA / "toollens/query_tool_tune.txt").read_bytes()
    assert tune == (DATA / "toollens/query_tool_test.txt").read_bytes()
    for n in ToolLens.variants():
        assert not any("tune" in f for f in ToolLens.info(n).files)


def test_seeded_partition() -> None:
    ids = [f"q{i}" for i in range(16893)]
    a = seeded_partition(ids, [("dev", 0.2)], rest="train")
    b = seeded_partition(list(reversed(ids)), [("dev", 0.2)], rest="train")  # order does not matter
    assert a == b and (len(a["train"]), len(a["dev"])) == (13515, 3378)
    assert a != seeded_partition(ids, [("dev", 0.2)], rest="train", seed=1)
    c = seeded_partition([f"m{i}" for i in range(2255)], [("test", 0.1), ("dev", 0.1)], rest="train")
    assert (len(c["train"]), len(c["dev"]), len(c["test"])) == (1805, 225, 225)  # MultiHop-RAG sizes


# ---------------------------------------------------------------------------------------------
# ToolLens on fixtures


def make_toollens(root: Path, n_train: int = 10, test_rows: list[str] | None = None,
                  corpus: list | None = None) -> Path:
    corpus = corpus if corpus is not None else [
        {"_id": str(i), "title": "", "text": f"category_name:Tools, tool_name:T{i}, api_name:a{i}", "metadata": {}}
        for i in range(4)
    ]
    queries = [{"_id": str(100 + i), "text": f"train question {i}", "metadata": {}} for i in range(n_train)]
    queries += [{"_id": "900", "text": "test question a", "metadata": {}},
                {"_id": "901", "text": "test question b", "metadata": {}}]
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "queries.jsonl", queries)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    train = ["query-id\tcorpus-id\tscore"] + [f"{100 + i}\t{i % 4}\t1" for i in range(n_train)] + ["100\t3\t1"]
    (root / "qrels" / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    test = test_rows if test_rows is not None else ["900\t0\t1", "900\t1\t1", "900\t1\t1", "901\t2\t1"]
    (root / "qrels" / "test.tsv").write_text("\n".join(["query-id\tcorpus-id\tscore", *test]), encoding="utf-8")
    return root


def test_toollens_fixture(tmp_path: Path) -> None:
    make_toollens(tmp_path / "toollens")
    t = ToolLens.load("toollens", tmp_path)
    check_common(t)
    assert t.judgments.relevance == {"900": {"0": 1, "1": 1}, "901": {"2": 1}}
    assert t.notes["repeated_qrels_rows"] == 1 and t.notes["items_per_query"] == {"min": 1, "max": 2, "mean": 1.5}
    assert [q.meta["set_size"] for q in t.queries] == ["2", "1"]
    tr, dv = ToolLens.load("toollens:train", tmp_path), ToolLens.load("toollens:dev", tmp_path)
    check_common(tr)
    check_common(dv)
    assert (len(tr.queries), len(dv.queries)) == (8, 2) and tr.notes["split_sizes"] == {"dev": 2, "train": 8}
    assert not {q.id for q in tr.queries} & {q.id for q in dv.queries}
    assert tr.judgments.relevance.get("100", {"0": 1, "3": 1}) == {"0": 1, "3": 1}


def test_toollens_version_is_a_content_hash(tmp_path: Path) -> None:
    make_toollens(tmp_path / "toollens")
    a = ToolLens.load("toollens", tmp_path)
    assert ToolLens.load("toollens", tmp_path).version == a.version
    make_toollens(tmp_path / "toollens", test_rows=["900\t0\t1", "901\t2\t1"])
    assert ToolLens.load("toollens", tmp_path).version != a.version


@pytest.mark.parametrize("case, file, pattern", [
    ("unknown_tool", "test.tsv", r"test\.tsv:3: qrel of query '901' names unknown document '77'"),
    ("bad_json", "corpus.jsonl", r"corpus\.jsonl:2: invalid JSON"),
    ("missing_text", "corpus.jsonl", r"corpus\.jsonl:1: missing field 'text'"),
])
def test_toollens_malformed(tmp_path: Path, case: str, file: str, pattern: str) -> None:
    root = tmp_path / "toollens"
    if case == "unknown_tool":
        make_toollens(root, test_rows=["900\t0\t1", "901\t77\t1"])
    elif case == "bad_json":
        make_toollens(root, corpus=[{"_id": "0", "text": "a"}, '{"_id": "1", "text": '])
    else:
        make_toollens(root, corpus=[{"_id": "0", "title": "x"}])
    with pytest.raises(DataError, match=pattern) as e:
        ToolLens.load("toollens", tmp_path)
    assert e.value.path.endswith(file)


def test_toollens_missing_and_names(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as e:
        ToolLens.load("toollens:dev", tmp_path, online=True)  # no automatic download
    msg = str(e.value)
    assert "toollens/qrels/train.tsv" in msg and "quchangle1/COLT" in msg and "no automatic download" in msg
    assert ToolLens.info("toollens").files[-1] == "toollens/qrels/test.tsv"
    assert ToolLens.info("toollens:dev").name == "toollens:dev"
    for bad in ("toollens:tune", "toollens:val", "toolens", "toollens:"):
        with pytest.raises(ValueError):
            ToolLens.info(bad)


# ---------------------------------------------------------------------------------------------
# ToolBank on the shared data


@pytest.fixture(scope="module")
def numpy_bank() -> dict[str, Benchmark]:
    return {s: ToolBank.load(n, DATA) for s, n in
            (("test", "toolbank/numpy"), ("train", "toolbank/numpy:train"), ("dev", "toolbank/numpy:dev"))}


@NUMPY
def test_numpybank_tools(numpy_bank: dict[str, Benchmark]) -> None:
    b = numpy_bank["test"]
    # 527 description entries, 513 distinct 'new_func' names: 14 entries are aliases of an earlier
    # name (numpy.arccos after numpy.acos → inverse_cosine, …) and fold onto its document.
    assert b.notes["tool_entries"] == 527 and len(b.corpus) == 513
    repeated = b.notes["repeated_tool_names"]
    assert sum(len(v) - 1 for v in repeated.values()) == 14
    assert repeated["vector_product"] == ["numpy.cross", "numpy.linalg.cross", "numpy.linalg.outer"]
    raw = json.loads((DATA / "toolbank/numpy_function_descriptions.json").read_text(encoding="utf-8"))
    assert b.corpus.get("vector_product").text == raw["numpy.cross"]["description"]  # the first entry
    assert b.corpus.get("elemental_magnitude").title == "elemental_magnitude"
    all_tools = DATA / "toolbank/all_tools.json"
    if all_tools.exists():
        # the NNN paper's 511 NumPy tools are Tool2Vec's all_tools.json vocabulary, which leaves
        # out two names of the description file (used by no released validation query)
        vocab = set(json.loads(all_tools.read_text(encoding="utf-8")))
        names = set(b.corpus.ids)
        assert len(names & vocab) == 511
        assert names - vocab == {"array_operator_mixins", "element_wise_quotient"}


@NUMPY
def test_numpybank_resplit(numpy_bank: dict[str, Benchmark]) -> None:
    for split, b in numpy_bank.items():
        check_common(b)
        assert list(b.splits) == [split]
        assert b.notes["split_scheme"] == "resplit of the released validation set"
        assert b.notes["split_seed"] == 0 and b.notes["split_source"] == "toolbank/NumpyBank_val.json"
        assert "NumpyBank_train.json" in b.notes["split_reason"] and "NumpyBank_test.json" in b.notes["split_reason"]
        assert "re-split because the released train/test files are absent" in b.description
        assert all(q.id.startswith("NumpyBank_val_") for q in b.queries)
    sizes = {s: len(b.queries) for s, b in numpy_bank.items()}
    assert sizes == {"train": 1200, "dev": 399, "test": 399}  # 60/20/20 of the 1,998 released val queries
    ids = {s: {q.id for q in b.queries} for s, b in numpy_bank.items()}
    assert not ids["train"] & ids["dev"] and not ids["train"] & ids["test"] and not ids["dev"] & ids["test"]
    assert len(ids["train"] | ids["dev"] | ids["test"]) == 1998
    # items/query over the whole released val set: 2 / 6 / 2.89 (the NNN paper: 2 / 6 / 2.88 over all splits)
    rel = {q: r for b in numpy_bank.values() for q, r in b.judgments.relevance.items()}
    sizes_all = [len(r) for r in rel.values()]
    assert (min(sizes_all), max(sizes_all), round(sum(sizes_all) / len(sizes_all), 2)) == (2, 6, 2.89)
    assert numpy_bank["train"].notes["items_per_query"] == {"min": 2, "max": 6, "mean": pytest.approx(2.8708, abs=1e-4)}
    # the query text is the refined instruction; the id keeps the index in the released file
    val = json.loads((DATA / "toolbank/NumpyBank_val.json").read_text(encoding="utf-8"))
    q = numpy_bank["dev"].queries[0]
    i = int(q.id.rsplit("_", 1)[1])
    assert q.text == val[i]["refined_instruction"]
    assert set(numpy_bank["dev"].judgments.relevance[q.id]) == set(val[i]["functions"])


@NUMPY
def test_numpybank_deterministic(numpy_bank: dict[str, Benchmark]) -> None:
    again = ToolBank.load("toolbank/numpy:dev", DATA)
    assert [q.id for q in again.queries] == [q.id for q in numpy_bank["dev"].queries]
    assert again.version == numpy_bank["dev"].version
    assert ToolBank.load("toolbank/numpy:test", DATA).version == numpy_bank["test"].version
    assert len({b.version for b in numpy_bank.values()}) == 3


@NUMPY
def test_toolbank_registry_and_info() -> None:
    from harness.registry import get_benchmark_loader

    assert get_benchmark_loader("toolbank/numpy:dev") == (ToolBank, "toolbank/numpy:dev")
    assert get_benchmark_loader("toolbank/aws")[0] is ToolBank
    assert get_benchmark_loader("toollens:train") == (ToolLens, "toollens:train")
    loader, name = get_benchmark_loader("toolbank/numpy:dev")
    assert loader.load(name, DATA).name == "toolbank/numpy:dev"
    assert ToolBank.missing_files("toolbank/numpy:dev", DATA) == []
    assert ToolBank.missing_files("toolbank/numpy", DATA) == []  # the val file re-splits
    assert [p.name for p in ToolBank.files_in_use("toolbank/numpy", DATA)] == [
        "numpy_function_descriptions.json", "NumpyBank_val.json"]


def test_toolbank_info_for_every_name() -> None:
    for n in ToolBank.variants():
        info = ToolBank.info(n)
        assert info.name == n and info.task == "completeness" and info.license == "MIT"
        assert "squeeze-ai-lab/ToolBank" in info.source and "SqueezeAILab/Tool2Vec" in info.source
    assert len(ToolBank.variants()) == 9
    assert ToolBank.info("toolbank/pandas:dev").files == [
        "toolbank/pandas_function_descriptions_with_classes.json", "toolbank/PandasBank_val.json"]
    assert ToolBank.info("toolbank/aws").files[-1] == "toolbank/AWSBank_test.json"
    for bad in ("toolbank/torch", "toolbank/numpy:val", "toolbank", "toolbank/", "toolbank/numpy:"):
        with pytest.raises(ValueError):
            ToolBank.info(bad)


@pytest.mark.parametrize("bank, desc, released", [
    ("pandas", "pandas_function_descriptions_with_classes.json", "PandasBank"),
    ("aws", "aws_function_descriptions.json", "AWSBank"),
])
def test_toolbank_missing_queries(tmp_path: Path, bank: str, desc: str, released: str) -> None:
    write_json(tmp_path / "toolbank" / desc, {"x": {"new_func": "x", "description": "d", "class": "C"}})
    with pytest.raises(MissingDataError) as e:
        ToolBank.load(f"toolbank/{bank}:train", tmp_path)
    assert e.value.missing == [f"toolbank/{released}_{s}.json" for s in ("train", "val", "test")]
    assert "squeeze-ai-lab/ToolBank" in str(e.value) and "SqueezeAILab/Tool2Vec" in str(e.value)
    (tmp_path / "toolbank" / desc).unlink()
    with pytest.raises(MissingDataError) as e:
        ToolBank.load(f"toolbank/{bank}", tmp_path, online=True)  # descriptions are never downloaded
    assert e.value.missing[0] == f"toolbank/{desc}" and f"bank_{bank}/{desc}" in str(e.value)


@_need("toolbank/pandas_function_descriptions_with_classes.json", "toolbank/aws_function_descriptions.json")
def test_real_pandas_and_aws_descriptions(tmp_path: Path) -> None:
    """The real description files parse; queries come from a tiny fixture (none are on disk)."""
    from benchmarks.tools import read_tool_descriptions

    pandas, repeated, entries = read_tool_descriptions(
        DATA / "toolbank/pandas_function_descriptions_with_classes.json", with_class=True)
    assert entries == len(pandas) == 1655 and repeated == {}  # the NNN paper's 1,651: see the module docstring
    assert pandas.get("EnumeratedClassification").text.endswith("Class: CategoricalDtype.")
    assert "Returns: datetime" in pandas.get("compute_fiscal_year_closure").text  # extra fields kept
    aws, repeated, entries = read_tool_descriptions(DATA / "toolbank/aws_function_descriptions.json", with_class=False)
    assert entries == len(aws) == 1002 and repeated == {}


# ---------------------------------------------------------------------------------------------
# ToolBank on fixtures (the real formats)

PANDAS_TOOLS = {
    "pandas.DataFrame.merge": {"new_func": "TableJoiner", "description": "Joins two tables.", "class": "DataFrame"},
    "pandas.Series.sum": {"new_func": "ColumnTotal", "description": "Adds the values.", "class": "Series"},
    "pandas.read_csv": {"new_func": "TextTableReader", "description": "Reads a text table.", "class": "io"},
    "pandas.DataFrame.sort_values": {"new_func": "RowOrderer", "description": "Sorts rows.", "class": "DataFrame"},
}


def bank_query(i: int, functions: list[str]) -> dict:
    return {"refined_instruction": f"Task {i}: combine the tables and add up a column.", "functions": functions,
            "explanation": "First join, then add."}


def make_pandas(root: Path, splits: dict[str, list[dict]], tools: dict | None = None) -> Path:
    write_json(root / "pandas_function_descriptions_with_classes.json", tools if tools is not None else PANDAS_TOOLS)
    for s, rows in splits.items():
        write_json(root / f"PandasBank_{s}.json", rows)
    return root


def released_splits() -> dict[str, list[dict]]:
    return {
        "train": [bank_query(i, ["TableJoiner", "ColumnTotal"]) for i in range(3)],
        "val": [bank_query(10, ["TextTableReader", "RowOrderer"])],
        "test": [bank_query(20, ["TableJoiner", "RowOrderer", "ColumnTotal"]),
                 bank_query(21, ["ColumnTotal", "TextTableReader"])],
    }


def test_toolbank_released_splits(tmp_path: Path) -> None:
    make_pandas(tmp_path / "toolbank", released_splits())
    b = ToolBank.load("toolbank/pandas", tmp_path)
    check_common(b)
    assert b.name == "toolbank/pandas" and [q.id for q in b.queries] == ["PandasBank_test_0", "PandasBank_test_1"]
    assert b.judgments.relevance["PandasBank_test_0"] == {"TableJoiner": 1, "RowOrderer": 1, "ColumnTotal": 1}
    assert b.notes["split_scheme"] == "released" and "released PandasBank_test split" in b.description
    assert b.notes["items_per_query"] == {"min": 2, "max": 3, "mean": 2.5}
    assert len(b.corpus) == 4
    assert b.corpus.get("TableJoiner").full_text == "TableJoiner. Joins two tables. Class: DataFrame."
    dev = ToolBank.load("toolbank/pandas:dev", tmp_path)
    assert [q.id for q in dev.queries] == ["PandasBank_val_0"] and list(dev.splits) == ["dev"]
    assert len(ToolBank.load("toolbank/pandas:train", tmp_path).queries) == 3
    a = ToolBank.load("toolbank/pandas", tmp_path)
    assert a.version == b.version
    tools = dict(PANDAS_TOOLS)
    tools["pandas.Series.sum"] = {"new_func": "ColumnTotal", "description": "Sums.", "class": "Series"}
    make_pandas(tmp_path / "toolbank", released_splits(), tools)
    assert ToolBank.load("toolbank/pandas", tmp_path).version != a.version


def test_toolbank_resplit_of_val_only(tmp_path: Path) -> None:
    rows = [bank_query(i, ["TableJoiner", "ColumnTotal"] if i % 2 else ["RowOrderer", "TextTableReader", "ColumnTotal"])
            for i in range(10)]
    make_pandas(tmp_path / "toolbank", {"val": rows})
    parts = {s: ToolBank.load(n, tmp_path) for s, n in
             (("train", "toolbank/pandas:train"), ("dev", "toolbank/pandas:dev"), ("test", "toolbank/pandas"))}
    assert {s: len(b.queries) for s, b in parts.items()} == {"train": 6, "dev": 2, "test": 2}
    ids = [{q.id for q in b.queries} for b in parts.values()]
    assert set.union(*ids) == {f"PandasBank_val_{i}" for i in range(10)} and sum(map(len, ids)) == 10
    assert parts["test"].notes["split_sizes"] == {"test": 2, "dev": 2, "train": 6}


def test_toolbank_query_falls_back_to_instruction(tmp_path: Path) -> None:
    row = {"refined_instruction": "", "instruction": "Read the table.", "functions": ["TextTableReader"]}
    make_pandas(tmp_path / "toolbank", {**released_splits(), "test": [row]})
    assert ToolBank.load("toolbank/pandas", tmp_path).queries[0].text == "Read the table."


@pytest.mark.parametrize("case, file, pattern", [
    ("unknown_function", "PandasBank_test.json",
     r"PandasBank_test\.json: item 1: field 'functions' names unknown tool 'Plotter'"),
    ("no_functions", "PandasBank_test.json",
     r"PandasBank_test\.json: item 0: field 'functions' is empty \(a query needs at least one tool\)"),
    ("repeated_function", "PandasBank_test.json", r"PandasBank_test\.json: item 0: .*'ColumnTotal' twice"),
    ("missing_functions", "PandasBank_test.json", r"PandasBank_test\.json: item 0: missing field 'functions'"),
    ("no_text", "PandasBank_test.json", r"PandasBank_test\.json: item 0: missing field 'instruction'"),
    ("not_a_list", "PandasBank_test.json", r"PandasBank_test\.json: expected a JSON list, got dict"),
    ("bad_json", "PandasBank_test.json", r"PandasBank_test\.json:1: invalid JSON"),
    ("missing_description", "pandas_function_descriptions_with_classes.json",
     r"with_classes\.json: entry 'pandas\.Series\.sum': missing field 'description'"),
    ("missing_class", "pandas_function_descriptions_with_classes.json",
     r"with_classes\.json: entry 'pandas\.Series\.sum': missing field 'class'"),
    ("empty_name", "pandas_function_descriptions_with_classes.json",
     r"with_classes\.json: entry 'pandas\.Series\.sum': field 'new_func' is empty"),
])
def test_toolbank_malformed(tmp_path: Path, case: str, file: str, pattern: str) -> None:
    root = tmp_path / "toolbank"
    splits = released_splits()
    tools = json.loads(json.dumps(PANDAS_TOOLS))
    if case == "unknown_function":
        splits["test"][1]["functions"] = ["ColumnTotal", "Plotter"]
    elif case == "no_functions":
        splits["test"][0]["functions"] = []
    elif case == "repeated_function":
        splits["test"][0]["functions"] = ["ColumnTotal", "ColumnTotal"]
    elif case == "missing_functions":
        del splits["test"][0]["functions"]
    elif case == "no_text":
        splits["test"][0]["refined_instruction"] = None
    elif case == "missing_description":
        del tools["pandas.Series.sum"]["description"]
    elif case == "missing_class":
        del tools["pandas.Series.sum"]["class"]
    elif case == "empty_name":
        tools["pandas.Series.sum"]["new_func"] = " "
    make_pandas(root, splits, tools)
    if case == "not_a_list":
        write_json(root / "PandasBank_test.json", {"0": splits["test"][0]})
    elif case == "bad_json":
        (root / "PandasBank_test.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DataError, match=pattern) as e:
        ToolBank.load("toolbank/pandas", tmp_path)
    assert e.value.path.endswith(file)


def test_toolbank_repeated_tool_names(tmp_path: Path) -> None:
    tools = dict(PANDAS_TOOLS, **{"pandas.DataFrame.join": {"new_func": "TableJoiner", "description": "Also joins.",
                                                             "class": "DataFrame"}})
    make_pandas(tmp_path / "toolbank", released_splits(), tools)
    b = ToolBank.load("toolbank/pandas", tmp_path)  # default: fold onto the first entry
    assert len(b.corpus) == 4 and b.corpus.get("TableJoiner").text.startswith("Joins two tables.")
    assert b.notes["repeated_tool_names"] == {"TableJoiner": ["pandas.DataFrame.merge", "pandas.DataFrame.join"]}
    with pytest.raises(DataError, match=r"entry 'pandas\.DataFrame\.join': 'new_func' 'TableJoiner' repeats entry "
                                        r"'pandas\.DataFrame\.merge'") as e:
        ToolBank.load("toolbank/pandas", tmp_path, duplicate_tool_names="error")
    assert e.value.path.endswith("pandas_function_descriptions_with_classes.json")


def test_toolbank_online_with_fake_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []

    def load_dataset(name: str, split: str) -> list[dict]:
        calls.append((name, split))
        return [bank_query(0, ["TableJoiner", "ColumnTotal"]), bank_query(1, ["RowOrderer", "TextTableReader"])]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    make_pandas(tmp_path / "toolbank", {})  # descriptions only
    b = ToolBank.load("toolbank/pandas:dev", tmp_path, online=True)
    check_common(b)
    assert calls == [("squeeze-ai-lab/ToolBank", "PandasBank_val")]
    assert [q.id for q in b.queries] == ["PandasBank_val_0", "PandasBank_val_1"]
    assert b.notes["online_source"] == "hf:squeeze-ai-lab/ToolBank[PandasBank_val]"
    with pytest.raises(MissingDataError):  # offline: never touches the hub
        ToolBank.load("toolbank/pandas:dev", tmp_path)

    def broken(name: str, split: str) -> list[dict]:
        return [bank_query(0, ["Nope"])]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=broken))
    with pytest.raises(DataError, match=r"hf:squeeze-ai-lab/ToolBank\[PandasBank_test\]: item 0: "
                                        r".*unknown tool 'Nope'"):
        ToolBank.load("toolbank/pandas", tmp_path, online=True)
