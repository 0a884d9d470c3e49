"""WordNet for the diagnostic-set builders and CoDeR's stage-1 triplets, offline or online.

``load_wordnet`` looks for WordNet 3.0, in order: NLTK's own data path; the
``nltk_data-wordnet.tar.gz`` tarball in the data directory (extracted safely into
``$BEYONDSIM_HOME/nltk_data``); Debian's ``wordnet-base`` files (``/usr/share/wordnet``, given the
``lexnames`` file NLTK expects); and, with ``online``, ``nltk.download("wordnet")``.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

from .readers import default_data_dir, default_home


class WordNetUnavailable(LookupError):
    """WordNet data could not be found (or fetched)."""


WORDNET_TARBALL = "nltk_data-wordnet.tar.gz"
DEBIAN_WORDNET_DIRS = (Path("/usr/share/wordnet"),)
_WORDNET: Any = None

# The ``lexnames`` file NLTK's reader expects (Debian's wordnet-base does not ship it).
LEXNAMES = [
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time",
    "verb.body", "verb.change", "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather",
    "adj.ppl",
]


def _lexname_category(name: str) -> int:
    return {"adj": 3, "adv": 4, "noun": 1, "verb": 2}[name.split(".")[0]]


def load_wordnet(data_dir: Path | None = None, online: bool = False):
    """NLTK's WordNet corpus reader, found offline when possible and cached in-process.

    Looks, in order: ``nltk.corpus.wordnet`` as configured (``NLTK_DATA``); an unpacked
    ``$BEYONDSIM_HOME/nltk_data``; ``<data_dir>/nltk_data-wordnet.tar.gz`` (extracted once into
    ``$BEYONDSIM_HOME/nltk_data``); Debian's ``/usr/share/wordnet`` (``apt-get install
    wordnet-base``); with ``online=True``, ``nltk.download("wordnet")`` into the same folder.
    """
    global _WORDNET
    if _WORDNET is None:
        _WORDNET = _find_wordnet(data_dir, online)
    return _WORDNET


def _find_wordnet(data_dir: Path | None, online: bool, *, home: Path | None = None,
                  system_dirs: Sequence[Path] = DEBIAN_WORDNET_DIRS, try_nltk: bool = True):
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    looked: list[str] = []
    if try_nltk:
        try:
            from nltk.corpus import wordnet

            wordnet.ensure_loaded()
            return wordnet
        except LookupError:
            looked.append("nltk.data.path: " + ", ".join(map(str, nltk.data.path)))
    home = Path(home) if home is not None else default_home()
    cache = home / "nltk_data"
    wn_dir = cache / "corpora" / "wordnet"

    def reader(root: Path):
        if str(root.parents[1]) not in nltk.data.path:
            nltk.data.path.append(str(root.parents[1]))
        with warnings.catch_warnings():  # no Open Multilingual WordNet: English only is fine
            warnings.filterwarnings("ignore", message="The multilingual functions")
            return WordNetCorpusReader(str(root), None)

    if (wn_dir / "data.noun").is_file():
        return reader(wn_dir)
    looked.append(str(wn_dir))
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    tarball = data_dir / WORDNET_TARBALL
    if tarball.is_file():
        extract_wordnet_tarball(tarball, cache)
        if (wn_dir / "data.noun").is_file():
            return reader(wn_dir)
    looked.append(str(tarball))
    for sys_dir in system_dirs:
        sys_dir = Path(sys_dir)
        if (sys_dir / "data.noun").is_file():
            return reader(_debian_shim(sys_dir, home / "nltk_data-system" / "corpora" / "wordnet"))
        looked.append(str(sys_dir))
    if online:
        try:
            ok = nltk.download("wordnet", download_dir=str(cache), quiet=True, raise_on_error=True)
        except Exception as exc:  # network errors, bad zip, …
            raise WordNetUnavailable(f"downloading WordNet with nltk failed: {exc}") from exc
        if ok and not (wn_dir / "data.noun").is_file():
            zipped = cache / "corpora" / "wordnet.zip"
            if zipped.is_file():
                shutil.unpack_archive(str(zipped), str(cache / "corpora"))
        if (wn_dir / "data.noun").is_file():
            return reader(wn_dir)
        looked.append(f"nltk.download('wordnet') into {cache}")
    raise WordNetUnavailable(
        "WordNet is needed to build the diagnostic sets but was not found. Looked in:\n"
        + "\n".join(f"  - {p}" for p in looked)
        + "\nGet it with one of: `apt-get install wordnet-base` (Debian/Ubuntu); put "
        f"{WORDNET_TARBALL} (nltk_data/corpora/wordnet/...) in the data directory; "
        "`python -m nltk.downloader wordnet` and set NLTK_DATA; or pass --online."
    )


def extract_wordnet_tarball(tarball: Path, cache: Path) -> Path:
    """Extract ``nltk_data/corpora/wordnet/*`` from ``tarball`` into ``cache`` (a folder that
    plays the role of ``nltk_data/``). Members with absolute paths, ``..`` parts, links or
    special files are refused. Extraction goes to a temporary folder first and is moved into
    place, so a crash leaves no half-written corpus."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / "corpora" / "wordnet"
    with tarfile.open(tarball, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            parts = Path(m.name).parts
            if m.name.startswith(("/", "\\")) or os.path.isabs(m.name) or ".." in parts:
                raise ValueError(f"{tarball}: unsafe member path {m.name!r}")
            if not (m.isfile() or m.isdir()):
                raise ValueError(f"{tarball}: member {m.name!r} is not a plain file or folder")
        wanted = [m for m in members if "/corpora/wordnet/" in f"/{m.name}" and m.isfile()]
        if not wanted:
            raise ValueError(f"{tarball}: no corpora/wordnet/ files inside")
        with tempfile.TemporaryDirectory(dir=cache, prefix=".wordnet-") as tmp:
            out = Path(tmp) / "wordnet"
            out.mkdir()
            for m in wanted:
                src = tar.extractfile(m)
                if src is None:
                    continue
                name = Path(m.name).name
                with src, open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            if not (out / "lexnames").exists():
                (out / "lexnames").write_text(_lexnames_text())
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(out, target)
    return target


def _lexnames_text() -> str:
    return "".join(f"{i:02d}\t{n}\t{_lexname_category(n)}\n" for i, n in enumerate(LEXNAMES))


def _debian_shim(src: Path, dst: Path) -> Path:
    """A copy of Debian's WordNet files plus the ``lexnames`` file NLTK needs (copied, not
    linked: NLTK refuses corpus files outside the reader's root)."""
    if (dst / "data.noun").exists() and (dst / "lexnames").exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=".wordnet-") as tmp:
        out = Path(tmp) / "wordnet"
        out.mkdir()
        for f in src.iterdir():
            if f.is_file():
                shutil.copyfile(f, out / f.name)
        if not (out / "lexnames").exists():
            (out / "lexnames").write_text(_lexnames_text())
        if dst.exists():
            shutil.rmtree(dst)
        os.replace(out, dst)
    return dst
