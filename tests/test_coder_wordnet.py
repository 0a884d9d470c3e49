"""CoDeR stage-1 lexical triplets from WordNet: loading WordNet offline (tarball, folder, missing,
download), the antonym / synonym pairs against the released ``ant_pairs.jsonl``, the triplet
build against the released ``stage1_lexical_train_triplets.jsonl`` (exact reproduction), its
invariants, caps, split and determinism, the JSONL files and the command (`beyondsim coder wordnet`)."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import nltk
import pytest
from typer.testing import CliRunner

import retrievers.coder_wordnet as cw
from conftest import tarball_with_member
from harness.cli import app

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TARBALL = DATA / "nltk_data-wordnet.tar.gz"
RELEASED_ANT = DATA / "coder_train" / "ant_pairs.jsonl"
RELEASED_TRIPLETS = DATA / "coder_train" / "stage1_lexical_train_triplets.jsonl"


def _need(*files: str) -> pytest.MarkDecorator:
    missing = [f for f in files if not (DATA / f).exists()]
    where = ", ".join(str(DATA / f) for f in missing)
    return pytest.mark.skipif(bool(missing), reason=f"shared data not found: {where}")


RELEASED = _need("coder_train/ant_pairs.jsonl", "coder_train/stage1_lexical_train_triplets.jsonl")

# figures measured on WordNet 3.0 (the shared tarball), documented in the module docstring
N_ANT_PAIRS, N_SYN_PAIRS = 7_110, 304_438
N_ANCHORS, N_TRIPLETS = 4_176, 17_201
N_TRAIN, N_VAL, N_TRAIN_ANCHORS, N_VAL_ANCHORS = 15_537, 1_664, 3_758, 418


def as_set(rows: list[dict]) -> set[tuple[str, str, str]]:
    return {(r["query"], r["positive"], r["hard_negative"]) for r in rows}


def by_anchor(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["query"]].append(r)
    return out


# ---------------------------------------------------------------------------------------------
# fixtures: WordNet is unpacked and read once per module (the first pass over it is ~10 s)


@pytest.fixture(scope="module")
def wn_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TARBALL.exists():
        pytest.skip(f"shared data not found: {TARBALL}")
    return tmp_path_factory.mktemp("wordnet") / "nltk_data"


@pytest.fixture(scope="module")
def wordnet(wn_cache: Path):
    wn = cw.load_wordnet(TARBALL, cache_dir=wn_cache)
    yield wn
    if str(wn_cache) in nltk.data.path:
        nltk.data.path.remove(str(wn_cache))


@pytest.fixture(scope="module")
def ants(wordnet) -> list[tuple[str, str]]:
    return cw.antonym_pairs(wordnet)


@pytest.fixture(scope="module")
def syns(wordnet) -> list[tuple[str, str]]:
    return cw.synonym_pairs(wordnet)


@pytest.fixture(scope="module")
def build(syns, ants) -> tuple[list[dict], list[dict]]:
    return cw.build_stage1_triplets(syns, ants)


@pytest.fixture(scope="module")
def released_triplets() -> list[dict]:
    if not RELEASED_TRIPLETS.exists():
        pytest.skip(f"shared data not found: {RELEASED_TRIPLETS}")
    return cw.read_triplets(RELEASED_TRIPLETS)


# ---------------------------------------------------------------------------------------------
# loading WordNet


def test_load_wordnet_from_tarball(wordnet, wn_cache: Path) -> None:
    assert wordnet.get_version() == "3.0"
    assert {"data.noun", "index.adj", "lexnames"} <= {p.name for p in (wn_cache / "corpora" / "wordnet").iterdir()}
    assert not [p for p in wn_cache.iterdir() if p.name.startswith(".wordnet-")]  # no half-extracted leftovers
    assert "domestic_dog" in wordnet.synset("dog.n.01").lemma_names()
    # the folder forms accepted for --nltk-data
    assert cw.wordnet_root(wn_cache) == wn_cache
    assert cw.wordnet_root(wn_cache.parent) == wn_cache  # <dir>/nltk_data/corpora/wordnet
    assert cw.wordnet_root(wn_cache / "corpora" / "wordnet") == wn_cache
    assert cw.wordnet_root(wn_cache / "corpora") is None


def test_load_wordnet_missing_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(cw.WordNetUnavailable) as err:
        cw.load_wordnet(tmp_path)
    assert str(tmp_path) in str(err.value) and "python -m nltk.downloader wordnet" in str(err.value)
    assert isinstance(err.value, LookupError)

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nowhere")])
    with pytest.raises(cw.WordNetUnavailable, match="NLTK's data path") as err:
        cw.load_wordnet()
    assert str(tmp_path / "nowhere") in str(err.value) and "nltk.downloader wordnet" in str(err.value)


def test_load_wordnet_download_goes_to_the_given_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple, dict]] = []

    def fake_download(*args, **kwargs):
        calls.append((args, kwargs))
        return False  # what nltk.download returns when the package could not be fetched

    monkeypatch.setattr(nltk, "download", fake_download)
    target = tmp_path / "nd"
    with pytest.raises(cw.WordNetUnavailable, match=r"nltk.download\('wordnet'\) failed"):
        cw.load_wordnet(target, download=True)
    assert calls == [(("wordnet",), {"quiet": True, "raise_on_error": True, "download_dir": str(target)})]
    calls.clear()
    with pytest.raises(cw.WordNetUnavailable):
        cw.load_wordnet(tmp_path / "other")  # download=False: never fetches
    assert calls == []


def test_load_wordnet_refuses_unsafe_tarball(tmp_path: Path) -> None:
    evil = tarball_with_member(tmp_path / "evil.tar.gz", "nltk_data/corpora/wordnet/../../../escape.txt")
    with pytest.raises(ValueError, match="unsafe member"):
        cw.load_wordnet(evil, cache_dir=tmp_path / "cache" / "nltk_data")
    absolute = tarball_with_member(tmp_path / "abs.tar.gz", str(tmp_path / "abs-escape.txt"))
    with pytest.raises(ValueError, match="unsafe member"):
        cw.load_wordnet(absolute, cache_dir=tmp_path / "cache2" / "nltk_data")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "abs-escape.txt").exists()


# ---------------------------------------------------------------------------------------------
# pairs


def check_pairs(pairs: list[tuple[str, str]]) -> None:
    assert pairs == sorted(set(pairs))  # deduplicated, sorted
    s = set(pairs)
    assert all((b, a) in s for a, b in pairs)  # both directions
    assert all(a != b for a, b in pairs)
    assert not [w for p in pairs for w in p if "_" in w or w != w.lower()]


def test_antonym_pairs(ants) -> None:
    check_pairs(ants)
    assert len(ants) == N_ANT_PAIRS
    assert {("able", "unable"), ("high", "low"), ("heaven", "hell"), ("arabic numeral", "roman numeral")} <= set(ants)


@RELEASED
def test_antonym_pairs_reproduce_the_released_file(ants) -> None:
    rows = [json.loads(line) for line in RELEASED_ANT.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 7_979  # one line per WordNet antonym link, duplicates included
    released = {(r["w1"], r["w2"]) for r in rows}
    lowered = {(a.lower(), b.lower()) for a, b in released}
    assert len(released) == len(lowered) == 7_106
    ours = set(ants)
    # measured: 7,105 / 7,106 after lowercasing (99.99 %), 7,085 letter for letter (99.7 %)
    assert len(lowered & ours) / len(lowered) >= 0.999
    assert len(released & ours) / len(released) >= 0.995
    assert lowered - ours == {("kern", "kern")}  # the released self-pair, dropped on purpose
    extra = ours - lowered
    assert len(extra) == 5 and all((b, a) in lowered for a, b in extra)  # reverses upstream lacks


def test_synonym_pairs(syns, wordnet) -> None:
    check_pairs(syns)
    assert len(syns) == N_SYN_PAIRS
    s = set(syns)
    assert {("high", "high-pitched"), ("ravel", "ravel out"), ("dog", "domestic dog"), ("able", "capable")} <= s
    # every pair shares a synset
    for a, b in syns[::5000]:
        la, lb = a.replace(" ", "_"), b.replace(" ", "_")
        assert {x.name() for x in wordnet.synsets(la)} & {x.name() for x in wordnet.synsets(lb)}, (a, b)


# ---------------------------------------------------------------------------------------------
# triplets


def check_triplets(rows: list[dict], syns, ants, max_pos: int, max_neg: int, max_trip: int) -> None:
    s_syn, s_ant = set(syns), set(ants)
    assert all(list(r) == ["query", "positive", "hard_negative"] for r in rows)
    assert len(as_set(rows)) == len(rows)  # no duplicate triplet
    for r in rows:
        q, p, n = r["query"], r["positive"], r["hard_negative"]
        assert p != q and n != q and p != n, r
        assert (q, p) in s_syn and (q, n) in s_ant, r
        assert (q, p) not in s_ant, r  # a positive is never an antonym of the query
    for q, group in by_anchor(rows).items():
        assert len(group) <= max_trip, q
        assert len({r["positive"] for r in group}) <= max_pos, q
        assert len({r["hard_negative"] for r in group}) <= max_neg, q


def test_build_invariants_and_caps(build, syns, ants) -> None:
    train, val = build
    assert (len(train), len(val)) == (N_TRAIN, N_VAL)
    check_triplets(train + val, syns, ants, 10, 10, 20)
    groups = by_anchor(train + val)
    assert len(groups) == N_ANCHORS
    assert max(len(g) for g in groups.values()) == 20  # the cap binds
    assert max(len({r["positive"] for r in g}) for g in groups.values()) == 10

    small_train, small_val = cw.build_stage1_triplets(syns, ants, max_pos_per_anchor=2, max_neg_per_anchor=1,
                                                      max_triplets_per_anchor=3)
    check_triplets(small_train + small_val, syns, ants, 2, 1, 3)
    small = by_anchor(small_train + small_val)
    assert set(small) == set(groups)  # caps never drop an anchor
    assert max(len(g) for g in small.values()) == 2  # 2 positives x 1 negative


def test_build_split_by_anchor(build, syns, ants) -> None:
    train, val = build
    ta, va = set(by_anchor(train)), set(by_anchor(val))
    assert not ta & va
    assert (len(ta), len(va)) == (N_TRAIN_ANCHORS, N_VAL_ANCHORS)
    assert abs(len(va) / (len(ta) + len(va)) - 0.1) < 0.001
    t3, v3 = cw.build_stage1_triplets(syns, ants, val_ratio=0.3)
    a3 = set(by_anchor(v3))
    assert abs(len(a3) / N_ANCHORS - 0.3) < 0.001 and not a3 & set(by_anchor(t3))
    # the split does not change which triplets are drawn
    assert as_set(t3) | as_set(v3) == as_set(train) | as_set(val)


def test_build_is_deterministic(build, syns, ants) -> None:
    train, val = build
    again = cw.build_stage1_triplets(syns, ants, seed=42)
    assert again == (train, val)  # same rows, same order
    other_train, other_val = cw.build_stage1_triplets(syns, ants, seed=43)
    ours, other = as_set(train + val), as_set(other_train + other_val)
    assert other != ours and set(by_anchor(other_train)) != set(by_anchor(train))
    # anchors under every cap draw nothing random, so the seeds share most triplets (measured ~85 %)
    assert 0.75 < len(ours & other) / len(ours) < 0.95
    assert len(other) == N_TRIPLETS  # caps fix each anchor's count, whatever the seed


@RELEASED
def test_build_reproduces_the_released_triplets(build, syns, ants, released_triplets) -> None:
    train, val = build
    released = as_set(released_triplets)
    assert len(released_triplets) == len(released) == N_TRIPLETS
    # every released triplet is explained by our WordNet pairs (measured: 100 % and 100 %)
    s_syn, s_ant = set(syns), set(ants)
    assert sum((q, n) in s_ant for q, _, n in released) / len(released) == 1.0
    assert sum((q, p) in s_syn for q, p, _ in released) / len(released) == 1.0
    # and the build reproduces the file exactly: the released "train" file holds all anchors
    assert as_set(train) | as_set(val) == released
    full_train, no_val = cw.build_stage1_triplets(syns, ants, val_ratio=0.0)
    assert no_val == [] and as_set(full_train) == released


@RELEASED
def test_build_from_the_released_antonym_file(build, syns) -> None:
    """The upstream ant_pairs file (case kept, 5 pairs one-way, a self-pair, duplicates) gives
    the same triplets once lowercased: the build symmetrises and drops self-pairs."""
    rows = [json.loads(line) for line in RELEASED_ANT.read_text(encoding="utf-8").splitlines()]
    released_ants = [(r["w1"].lower(), r["w2"].lower()) for r in rows]
    assert cw.build_stage1_triplets(syns, released_ants) == build


def test_build_rules_on_a_toy_vocabulary() -> None:
    syn = [("big", "large"), ("big", "huge"), ("big", "small"), ("large", "big"), ("tiny", "small"),
           ("cold", "chilly"), ("cold", "cold")]
    ant = [("big", "small"), ("small", "big"), ("hot", "cold")]
    train, val = cw.build_stage1_triplets(syn, ant, val_ratio=0.0)
    assert val == []
    got = as_set(train)
    # big: "small" is both a synonym and an antonym -> only a negative; small: synonyms big (an
    # antonym, excluded) and tiny; cold: chilly (the self-pair is ignored); hot has no synonym
    assert got == {("big", "large", "small"), ("big", "huge", "small"), ("small", "tiny", "big"),
                   ("cold", "chilly", "hot")}
    for bad in ({"val_ratio": 1.0}, {"val_ratio": -0.1}, {"max_pos_per_anchor": 0}, {"max_triplets_per_anchor": 2.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            cw.build_stage1_triplets(syn, ant, **bad)


# ---------------------------------------------------------------------------------------------
# files


def test_write_jsonl_is_atomic_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "t.jsonl"
    rows = [{"query": "hot", "positive": "blistering", "hard_negative": "cold"},
            {"query": "naïve", "positive": "unsophisticated", "hard_negative": "sophisticated"}]
    assert cw.write_jsonl(path, rows) == path
    assert cw.read_triplets(path) == rows
    assert "naïve" in path.read_text(encoding="utf-8")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600

    def failing():
        yield {"query": "a", "positive": "b", "hard_negative": "c"}
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cw.write_jsonl(path, failing())
    assert cw.read_triplets(path) == rows  # the old file is untouched
    assert [p.name for p in path.parent.iterdir()] == ["t.jsonl"]  # no temporary file left


@pytest.mark.parametrize("line, pattern", [
    ('{"query": "a", "positive": "b"}', r"missing field 'hard_negative'"),
    ('{"query": "a", "positive": 3, "hard_negative": "c"}', r"field 'positive' must be a non-empty string"),
    ('{"query": "", "positive": "b", "hard_negative": "c"}', r"field 'query' must be a non-empty string"),
    ('{"query": "a", "positive": "b", "hard_negative": "c"', r"invalid JSON"),
    ('["a", "b", "c"]', r"expected a JSON object"),
    ("", r"empty line"),
])
def test_read_triplets_names_file_line_and_field(tmp_path: Path, line: str, pattern: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"query": "up", "positive": "upward", "hard_negative": "down"})
    path.write_text(f"{good}\n{good}\n{line}\n{good}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3: ") + pattern):
        cw.read_triplets(path)


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_writes_the_four_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wordnet, ants, syns) -> None:
    seen: dict = {}

    def fake_load(nltk_data=None, download=False, cache_dir=None):
        seen.update(nltk_data=nltk_data, download=download, cache_dir=cache_dir)
        return wordnet

    # WordNet and its pairs are the module's (a second pass over WordNet would cost seconds)
    monkeypatch.setattr(cw, "load_wordnet", fake_load)
    monkeypatch.setattr(cw, "antonym_pairs", lambda wn: ants if wn is wordnet else None)
    monkeypatch.setattr(cw, "synonym_pairs", lambda wn: syns if wn is wordnet else None)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["coder", "wordnet", "--out", str(out), "--nltk-data", str(TARBALL),
                                   "--cache-dir", str(tmp_path / "c"), "--val-ratio", "0.2", "--seed", "7"])
    assert res.exit_code == 0, res.output
    assert seen == {"nltk_data": TARBALL, "download": False, "cache_dir": tmp_path / "c"}
    assert sorted(p.name for p in out.iterdir()) == [
        "ant_pairs.jsonl", "stage1_lexical_train_triplets.jsonl", "stage1_lexical_val_triplets.jsonl",
        "syn_pairs.jsonl"]
    ant_rows = [json.loads(x) for x in (out / "ant_pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["w1"], r["w2"]) for r in ant_rows] == ants
    assert sum(1 for _ in open(out / "syn_pairs.jsonl", encoding="utf-8")) == N_SYN_PAIRS
    train = cw.read_triplets(out / "stage1_lexical_train_triplets.jsonl")
    val = cw.read_triplets(out / "stage1_lexical_val_triplets.jsonl")
    assert (train, val) == cw.build_stage1_triplets(syns, ants, seed=7, val_ratio=0.2)
    printed = res.stdout
    assert f"{N_ANT_PAIRS:,}" in printed and f"{N_SYN_PAIRS:,}" in printed
    assert f"{len(train):,}" in printed and f"{len(val):,}" in printed


def test_cli_without_wordnet_fails_clearly(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["coder", "wordnet", "--out", str(tmp_path / "out"), "--nltk-data",
                                   str(tmp_path / "empty")])
    assert res.exit_code == 2
    err = res.stderr
    assert "python -m nltk.downloader wordnet" in err and str(tmp_path / "empty") in err
    assert not (tmp_path / "out").exists()
