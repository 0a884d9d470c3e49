"""CoDeR stage-1 word-level polarity triplets, rebuilt from NLTK WordNet.

CoDeR trains its compatibility bi-encoder first on word-level triplets (``query`` = an anchor
word, ``positive`` = a WordNet synonym, ``hard_negative`` = a WordNet antonym). The authors
released ``ant_pairs.jsonl`` and ``stage1_lexical_train_triplets.jsonl`` (in the shared data
folder, ``coder_train/``) and the command line of their unreleased builder::

    build_stage1_lexical_triplets.py --syn_file syn_pairs.jsonl --ant_file ant_pairs.jsonl \\
        --seed 42 --val_ratio 0.1 --max_pos_per_anchor 10 --max_neg_per_anchor 10 \\
        --max_triplets_per_anchor 20

This module regenerates all of it from WordNet 3.0:

* :func:`antonym_pairs` — every ``lemma.antonyms()`` link of every lemma of every synset, names
  lowercased with ``_`` → space, both directions, self-pairs dropped, deduplicated, sorted.
* :func:`synonym_pairs` — for each synset, every ordered pair of distinct (normalised) lemma
  names; deduplicated, sorted.
* :func:`build_stage1_triplets` — the (train, val) triplets.
* :func:`write_jsonl` (atomic) and :func:`read_triplets` (strict) for the files, and
  :func:`build_stage1_files` behind the command::

      beyondsim coder wordnet --out DIR [--nltk-data PATH] [--download] [--seed 42]

  writing ``DIR/{ant_pairs,syn_pairs,stage1_lexical_train_triplets,
  stage1_lexical_val_triplets}.jsonl``.

The triplet construction is **[derived]**: our reading of the unreleased script from its
arguments and from the released output, not a copy of it (it does reproduce the released
triplets exactly, see below):

1. Both relations are treated as symmetric (a pair ``(a, b)`` also gives ``(b, a)``); a word is
   never its own synonym or antonym.
2. For every word ``w``: negatives = antonyms of ``w``; positives = synonyms of ``w`` that are
   *not* also antonyms of ``w`` (WordNet has a few words that are both, e.g. ``ravel`` /
   ``unravel``). Anchors are the words with ≥ 1 positive and ≥ 1 negative.
3. Sampling uses one ``random.Random(seed)``, visiting the anchors in sorted order: when an
   anchor has more than ``max_pos_per_anchor`` positives (sorted), ``sorted(rng.sample(...))``
   keeps that many; the same for negatives with ``max_neg_per_anchor``; the (positive, negative)
   product, positive-major, is kept whole when it has at most ``max_triplets_per_anchor``
   combinations, else ``rng.sample(product, max_triplets_per_anchor)``. No random draw is made
   for an anchor under the caps.
4. The split is by anchor, with a second ``random.Random(seed)``: the sorted anchors are
   shuffled and the first ``round(len(anchors) * val_ratio)`` are the validation anchors (no
   anchor is in both lists). The split does not change the sampling: train ∪ val is the same
   set for every ``val_ratio``.
5. Each list is then shuffled with the split generator (the released file is shuffled, not
   grouped by anchor; its exact order is not reproduced).

Measured against the released files (WordNet 3.0 from ``nltk_data-wordnet.tar.gz``, seed 42,
the upstream caps):

* antonyms: the released ``ant_pairs.jsonl`` has 7,979 lines but 7,106 distinct pairs: it keeps
  one line per WordNet antonym link (WordNet 3.0 has exactly 7,979 ``lemma.antonyms()`` links),
  duplicates included; it keeps case (``Heaven``/``Hell``) and is not fully symmetric (5 pairs
  lack their reverse). We produce 7,110 pairs; 7,105 of the 7,106 released pairs (99.99 %) are
  among them after lowercasing (7,085 = 99.7 % letter for letter, 20 differ only by case); the
  one missed is the self-pair ``kern``/``kern``, which we drop. Our 5 extra pairs are the
  missing reverses (``have``/``lack``, ``centralise``/``decentralize``, …).
* synonyms: 304,438 ordered pairs (the upstream ``syn_pairs.jsonl`` was not released).
* triplets: 4,176 anchors, 17,201 triplets in all; with ``val_ratio=0.1`` 15,537 train triplets
  (3,758 anchors) and 1,664 val (418 anchors). The released "train" file has 17,201 triplets
  over the same 4,176 anchors, and **train ∪ val equals it exactly** (as a set; every anchor's
  triplets identical, sampled anchors included): the released file evidently holds every
  anchor, i.e. no validation anchors were held out of it. ``val_ratio=0`` (``--val-ratio 0``)
  gives it as the train file. Hence 100 % of the released triplets have a (query,
  hard_negative) among our antonym pairs and a (query, positive) among our synonym pairs. Other
  seeds share ~85 % of the triplets (the 3,706 anchors under the caps have no random draw).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.data.wordnet import WordNetUnavailable, extract_wordnet_tarball
from harness.data import default_home

__all__ = [
    "TRIPLET_FIELDS", "WordNetUnavailable", "load_wordnet", "wordnet_root", "normalise",
    "antonym_pairs", "synonym_pairs", "build_stage1_triplets", "write_jsonl", "read_triplets",
]

TRIPLET_FIELDS = ("query", "positive", "hard_negative")
ANT_FILE = "ant_pairs.jsonl"
SYN_FILE = "syn_pairs.jsonl"
TRAIN_FILE = "stage1_lexical_train_triplets.jsonl"
VAL_FILE = "stage1_lexical_val_triplets.jsonl"

_HOW_TO_GET = (
    "Get WordNet with `python -m nltk.downloader wordnet` (then it is found on NLTK's default "
    "path or through NLTK_DATA), pass download=True / --download, or pass the folder that holds "
    "corpora/wordnet (or the nltk_data-wordnet.tar.gz tarball) as nltk_data / --nltk-data."
)


# --------------------------------------------------------------------------------------------
# WordNet
# --------------------------------------------------------------------------------------------

def wordnet_root(path: Path) -> Path | None:
    """The NLTK data folder (the one holding ``corpora/wordnet`` or ``corpora/wordnet.zip``) at or
    just under ``path``: ``path`` itself, ``path/nltk_data`` (a tarball unpacked in place), or
    ``path``'s grandparent when ``path`` is the ``corpora/wordnet`` folder. ``None`` if none."""
    path = Path(path)
    candidates = [path, path / "nltk_data"]
    if path.name == "wordnet" and path.parent.name == "corpora":
        candidates.append(path.parent.parent)
    for root in candidates:
        if (root / "corpora" / "wordnet" / "data.noun").is_file() or (root / "corpora" / "wordnet.zip").is_file():
            return root
    return None


def load_wordnet(nltk_data: Path | None = None, download: bool = False, cache_dir: Path | None = None):
    """An NLTK WordNet corpus reader.

    ``nltk_data`` may be a folder holding ``corpora/wordnet`` (see :func:`wordnet_root`) or the
    ``nltk_data-wordnet.tar.gz`` tarball, which is extracted (members with absolute paths, ``..``
    parts, links or special files are refused) into ``cache_dir`` (default
    ``$BEYONDSIM_HOME/nltk_data``) unless ``cache_dir`` already holds WordNet. Without
    ``nltk_data`` WordNet is looked up on NLTK's own path (``NLTK_DATA``, ``~/nltk_data``, …).
    With ``download=True`` a WordNet that is not found is fetched with ``nltk.download`` (into
    the ``nltk_data`` folder when one is given). Raises :class:`WordNetUnavailable` (a
    ``LookupError``) saying where it looked and how to get WordNet.
    """
    import nltk

    root: Path | None = None
    if nltk_data is not None:
        nltk_data = Path(nltk_data).expanduser()
        if nltk_data.is_file():
            cache = Path(cache_dir).expanduser() if cache_dir is not None else default_home() / "nltk_data"
            root = wordnet_root(cache)
            if root is None:
                extract_wordnet_tarball(nltk_data, cache)
                root = wordnet_root(cache)
            if root is None:  # pragma: no cover - extract_wordnet_tarball raises first
                raise WordNetUnavailable(f"{nltk_data}: no corpora/wordnet inside. {_HOW_TO_GET}")
        else:
            root = wordnet_root(nltk_data)
            if root is None and download:
                _download(nltk, nltk_data)
                root = wordnet_root(nltk_data)
            if root is None:
                raise WordNetUnavailable(
                    f"WordNet not found in {nltk_data} (looked for {nltk_data}/corpora/wordnet, "
                    f"{nltk_data}/nltk_data/corpora/wordnet and a .tar.gz). {_HOW_TO_GET}"
                )
    else:
        try:
            pointer = nltk.data.find("corpora/wordnet")
        except LookupError:
            if not download:
                raise WordNetUnavailable(
                    "WordNet not found on NLTK's data path ("
                    + ", ".join(map(str, nltk.data.path)) + f"). {_HOW_TO_GET}"
                ) from None
            _download(nltk, None)
            try:
                pointer = nltk.data.find("corpora/wordnet")
            except LookupError:
                raise WordNetUnavailable(
                    f"nltk.download('wordnet') finished but WordNet is still not found. {_HOW_TO_GET}"
                ) from None
        return _reader(pointer)
    # NLTK (3.9+) only reads corpora under a folder on nltk.data.path.
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    return _reader(nltk.data.find("corpora/wordnet", paths=[str(root)]))


def _download(nltk: Any, into: Path | None) -> None:
    kwargs: dict[str, Any] = {"quiet": True, "raise_on_error": True}
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
        kwargs["download_dir"] = str(into)
    try:
        ok = nltk.download("wordnet", **kwargs)
    except Exception as exc:  # network errors, bad zip, …
        raise WordNetUnavailable(f"nltk.download('wordnet') failed: {exc}. {_HOW_TO_GET}") from exc
    if not ok:
        raise WordNetUnavailable(f"nltk.download('wordnet') failed. {_HOW_TO_GET}")


def _reader(pointer: Any):
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    with warnings.catch_warnings():  # no Open Multilingual WordNet: English only is fine
        warnings.filterwarnings("ignore", message="The multilingual functions")
        return WordNetCorpusReader(pointer, None)


def normalise(name: str) -> str:
    """A lemma name as a word: lowercased, ``_`` → space."""
    return name.lower().replace("_", " ")


def antonym_pairs(wn: Any) -> list[tuple[str, str]]:
    """Every WordNet antonym link (``lemma.antonyms()`` of every lemma of every synset) as
    normalised ``(word, antonym)`` pairs, both directions, without self-pairs, sorted."""
    pairs: set[tuple[str, str]] = set()
    for synset in wn.all_synsets():
        for lemma in synset.lemmas():
            a = normalise(lemma.name())
            for ant in lemma.antonyms():
                b = normalise(ant.name())
                if a != b:
                    pairs.add((a, b))
                    pairs.add((b, a))
    return sorted(pairs)


def synonym_pairs(wn: Any) -> list[tuple[str, str]]:
    """For each synset, every ordered pair of distinct normalised lemma names; sorted."""
    pairs: set[tuple[str, str]] = set()
    for synset in wn.all_synsets():
        names = sorted({normalise(n) for n in synset.lemma_names()})
        pairs.update((a, b) for a in names for b in names if a != b)
    return sorted(pairs)


# --------------------------------------------------------------------------------------------
# Triplets
# --------------------------------------------------------------------------------------------

def _neighbours(pairs: Iterable[Sequence[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for a, b in pairs:
        if a != b:
            out[a].add(b)
            out[b].add(a)
    return out


def build_stage1_triplets(
    syn_pairs: Iterable[Sequence[str]],
    ant_pairs: Iterable[Sequence[str]],
    *,
    seed: int = 42,
    val_ratio: float = 0.1,
    max_pos_per_anchor: int = 10,
    max_neg_per_anchor: int = 10,
    max_triplets_per_anchor: int = 20,
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train, val) triplets ``{"query", "positive", "hard_negative"}``; see the module
    docstring for the rules ([derived] from the unreleased upstream script)."""
    if not 0.0 <= val_ratio < 1.0:
        raise ValueError(f"val_ratio must be in [0, 1), got {val_ratio}")
    for name, cap in (("max_pos_per_anchor", max_pos_per_anchor), ("max_neg_per_anchor", max_neg_per_anchor),
                      ("max_triplets_per_anchor", max_triplets_per_anchor)):
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ValueError(f"{name} must be a positive integer, got {cap!r}")
    syn = _neighbours(syn_pairs)
    ant = _neighbours(ant_pairs)

    candidates: dict[str, tuple[list[str], list[str]]] = {}
    for word in sorted(syn.keys() & ant.keys()):
        positives = sorted(syn[word] - ant[word])
        negatives = sorted(ant[word])
        if positives and negatives:
            candidates[word] = (positives, negatives)

    # Sampling: one generator, anchors in sorted order (this reproduces the released file).
    rng = random.Random(seed)
    sampled: dict[str, list[tuple[str, str]]] = {}
    for word in sorted(candidates):
        positives, negatives = candidates[word]
        if len(positives) > max_pos_per_anchor:
            positives = sorted(rng.sample(positives, max_pos_per_anchor))
        if len(negatives) > max_neg_per_anchor:
            negatives = sorted(rng.sample(negatives, max_neg_per_anchor))
        combos = [(p, n) for p in positives for n in negatives]
        if len(combos) > max_triplets_per_anchor:
            combos = rng.sample(combos, max_triplets_per_anchor)
        sampled[word] = combos

    # Split by anchor with a second generator, so the split does not change the sampling.
    split_rng = random.Random(seed)
    anchors = sorted(sampled)
    split_rng.shuffle(anchors)
    n_val = round(len(anchors) * val_ratio)
    val_anchors = set(anchors[:n_val])
    train: list[dict[str, str]] = []
    val: list[dict[str, str]] = []
    for word, combos in sampled.items():
        out = val if word in val_anchors else train
        out.extend({"query": word, "positive": p, "hard_negative": n} for p, n in combos)
    split_rng.shuffle(train)
    split_rng.shuffle(val)
    return train, val


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------

def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    """Write ``rows`` as JSON lines (UTF-8, one object per line) atomically: to a temporary file
    in the same folder, then ``os.replace`` (a failure leaves any old file untouched and no
    temporary file behind). The file gets the usual ``0666 & ~umask`` mode. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_triplets(path: Path) -> list[dict[str, str]]:
    """Read a triplet file strictly: every line a JSON object whose ``query``, ``positive`` and
    ``hard_negative`` are non-empty strings (other keys are ignored and dropped). A bad line
    raises ``ValueError`` (``harness.data.DataError``) naming the file, the line and the field."""
    from harness.data import DataError, iter_jsonl

    path = Path(path)
    rows: list[dict[str, str]] = []
    for lineno, obj in iter_jsonl(path, blank_lines=False):
        for key in TRIPLET_FIELDS:
            if key not in obj:
                raise DataError(path, lineno, f"missing field {key!r}")
            value = obj[key]
            if not isinstance(value, str) or not value.strip():
                raise DataError(path, lineno, f"field {key!r} must be a non-empty string, got {value!r}")
        rows.append({key: obj[key] for key in TRIPLET_FIELDS})
    return rows


def build_stage1_files(out: Path, *, nltk_data: Path | None = None, cache_dir: Path | None = None,
                       download: bool = False, seed: int = 42, val_ratio: float = 0.1, max_pos_per_anchor: int = 10,
                       max_neg_per_anchor: int = 10, max_triplets_per_anchor: int = 20) -> dict[str, int]:
    """``beyondsim coder wordnet``: the antonym and synonym pairs and the train/val triplets, from
    WordNet, written to ``out`` (:data:`ANT_FILE`, :data:`SYN_FILE`, :data:`TRAIN_FILE`,
    :data:`VAL_FILE`); their counts. :class:`WordNetUnavailable` or ``ValueError`` before anything
    is written."""
    wn = load_wordnet(nltk_data, download=download, cache_dir=cache_dir)
    ants = antonym_pairs(wn)
    syns = synonym_pairs(wn)
    train, val = build_stage1_triplets(
        syns, ants, seed=seed, val_ratio=val_ratio, max_pos_per_anchor=max_pos_per_anchor,
        max_neg_per_anchor=max_neg_per_anchor, max_triplets_per_anchor=max_triplets_per_anchor,
    )
    write_jsonl(out / ANT_FILE, ({"w1": a, "w2": b} for a, b in ants))
    write_jsonl(out / SYN_FILE, ({"w1": a, "w2": b} for a, b in syns))
    write_jsonl(out / TRAIN_FILE, train)
    write_jsonl(out / VAL_FILE, val)
    return {"antonym_pairs": len(ants), "synonym_pairs": len(syns), "train_triplets": len(train),
            "train_anchors": len({t["query"] for t in train}), "val_triplets": len(val),
            "val_anchors": len({t["query"] for t in val})}
