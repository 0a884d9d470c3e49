"""Where a result was computed and where its retriever comes from: the environment (Python,
platform, library versions, device, GPU) and the retriever class's provenance (entry point,
installed distribution and version, editable install, git commit and dirty flag)."""

from __future__ import annotations

import functools
import importlib.metadata as md
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import __version__ as HARNESS_VERSION
from ..core.registry import RETRIEVER_GROUP


def _pkg_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def environment(device: str) -> dict[str, Any]:
    """Where a result was computed: Python, platform, the harness and library versions, the device
    and, on CUDA, the GPU's name and torch's CUDA version."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "device": device,
        "harness": HARNESS_VERSION,
    }
    for pkg in ("torch", "numpy", "faiss-cpu", "bm25s", "sentence-transformers", "transformers",
                "pytrec-eval-terrier"):
        v = _pkg_version(pkg)
        if v:
            env[pkg] = v
    if device.startswith("cuda"):
        try:
            import torch

            index = int(device.partition(":")[2] or torch.cuda.current_device())
            env["gpu"] = torch.cuda.get_device_name(index)
            env["cuda"] = torch.version.cuda
        except Exception:  # noqa: BLE001 - a result without a GPU name is still a result
            pass
    return env


def _entry_point_target(value: str) -> str:
    """``module:Attr`` of an entry point value, without extras (``module:Attr [extra]``) or spaces."""
    return value.split("[", 1)[0].replace(" ", "")


def _editable_root(dist: md.Distribution) -> Path | None:
    """The project folder of an editable (``pip install -e``) install, from its direct_url.json."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except (ValueError, OSError):
        return None
    url = info.get("url", "")
    if not info.get("dir_info", {}).get("editable") or not url.startswith("file:"):
        return None
    return Path(unquote(urlparse(url).path))


def _provides(dist: md.Distribution, module: str, src: Path | None) -> bool:
    """Whether ``dist`` installed the file ``src`` of ``module`` (a listed file, or a file under the
    project folder of an editable install: a single-file module, a package, a ``src/`` layout)."""
    if src is None:
        return False
    root = _editable_root(dist)
    if root is not None and src.is_relative_to(root.resolve()):
        return True
    rel = module.replace(".", "/")
    wanted = {f"{rel}.py", f"{rel}/__init__.py"}
    for f in dist.files or ():
        if str(f) in wanted:
            try:
                if Path(str(f.locate())).resolve() == src:
                    return True
            except OSError:
                continue
    return False


def _distribution_of(module: str, src: Path | None, entry_points: list[Any]) -> md.Distribution | None:
    """The installed distribution that provides ``module`` (its top-level name in the installed
    packages' metadata; else an editable install whose project folder holds the source; else the
    distribution declaring the entry point)."""
    top = module.split(".")[0]
    candidates = []
    for name in md.packages_distributions().get(top, []):
        try:
            candidates.append(md.distribution(name))
        except md.PackageNotFoundError:
            continue
    if len(candidates) > 1:
        exact = [d for d in candidates if _provides(d, module, src)]
        candidates = exact or candidates
    if candidates:
        return candidates[0]
    if src is not None and not src.is_relative_to(Path(sys.prefix).resolve()):
        for dist in md.distributions():
            root = _editable_root(dist)
            if root is not None and src.is_relative_to(root.resolve()):
                return dist
    for dist in md.distributions() if src is not None else ():
        if _provides(dist, module, src):
            return dist
    for ep in entry_points:
        if getattr(ep, "dist", None) is not None:
            return ep.dist
    return None


def _git_state(folder: Path) -> dict[str, Any]:
    """Commit and dirty flag of the git checkout holding ``folder``; empty outside one."""
    try:
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return {}
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {}
    out: dict[str, Any] = {"git_commit": commit.stdout.strip()}
    if dirty.returncode == 0:
        out["git_dirty"] = bool(dirty.stdout.strip())
    return out


@functools.cache
def provenance(cls: type) -> dict[str, Any]:
    """Where a retriever class comes from (once per class): ``class`` (module:Class); the
    ``entry_point`` of group ``beyondsim.retrievers`` that names it (``entry_points`` when several
    do); the ``package`` and ``package_version`` of the installed distribution that provides its
    module, ``editable`` when that is a ``pip install -e``; and ``git_commit`` / ``git_dirty`` when
    its source lives in a git checkout."""
    module = getattr(cls, "__module__", "")
    target = f"{module}:{cls.__qualname__}"
    out: dict[str, Any] = {"class": target}
    eps = [ep for ep in md.entry_points(group=RETRIEVER_GROUP) if _entry_point_target(ep.value) == target]
    names = sorted({ep.name for ep in eps})
    if len(names) == 1:
        out["entry_point"] = names[0]
    elif names:
        out["entry_points"] = names
    file = getattr(sys.modules.get(module), "__file__", None)
    src = Path(file).resolve() if file else None
    dist = _distribution_of(module, src, eps)
    if dist is not None:
        out["package"] = dist.metadata["Name"]
        out["package_version"] = dist.version
        if _editable_root(dist) is not None:
            out["editable"] = True
    if src is not None:
        out.update(_git_state(src.parent))
    return out


_PARAM_KEY = r"[A-Za-z_][A-Za-z0-9_]*"  # a parameter name -p can give (a dataclass field's)


def _one_line(text: str) -> bool:
    """Whether ``text`` can stand in a command line: no control, format or line-separator character
    (a newline in a quoted word would still break the line a page shows or a shell reads)."""
    import unicodedata

    return not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text)


def _word(text: str) -> str:
    """``text`` as one shell word; a text that cannot stand in a command line (:func:`_one_line`) as
    its ``ascii()`` escapes, quoted: shown, never able to end the line."""
    import shlex

    return shlex.quote(text if _one_line(text) else ascii(text)[1:-1])


def run_command(spec: Mapping[str, Any], benchmark: str | Sequence[str], seed: int, k: int) -> str:
    """The ``beyondsim run`` command line that recomputes a stored result: its retriever, every
    scalar parameter as ``-p name.key=value`` (so the spec, and with it the result key, is the same),
    the benchmark (a query slice ``name[:N]`` as ``--max-queries N``; several benchmarks, as an
    overview row averages, as one ``-b`` each), the seed (``--seeds`` runs
    seeds 0..N-1, so ``--seeds seed+1``; the earlier seeds are skipped when stored) and the depth. A
    parameter that is a list or a table cannot be given with ``-p``: it is named in a trailing
    comment (give it in a ``--config`` file), and so is one whose value holds a control character.
    A parameter whose name is not an identifier (no retriever has one; a results file may) is never
    written, only counted in the comment. The line is always one line: every word is quoted, and a
    text holding a control character is written as its escapes."""
    import re

    name = str(spec.get("retriever") or "")
    parts = ["beyondsim", "run", _word(name)]
    complex_params: list[str] = []
    unnamed = 0
    params = spec.get("params") or {}
    for key, value in sorted(params.items(), key=lambda kv: str(kv[0])) if isinstance(params, Mapping) else ():
        if not isinstance(key, str) or not re.fullmatch(_PARAM_KEY, key):
            unnamed += 1
            continue
        if isinstance(value, (list, tuple, dict)):
            complex_params.append(key)
            continue
        text = "none" if value is None else ("true" if value is True else "false" if value is False else str(value))
        if not _one_line(text) or not _one_line(name):
            complex_params.append(key)
            continue
        parts += ["-p", _word(f"{name}.{key}={text}")]
    if not isinstance(benchmark, str):
        for b in benchmark:
            parts += ["-b", _word(str(b))]
        benchmark = ""
    m = re.fullmatch(r"(.*)\[:(\d+)\]", benchmark)
    if benchmark:
        parts += ["-b", _word(m.group(1) if m else benchmark)]
    if m:
        parts += ["--max-queries", m.group(2)]
    parts += ["--seeds", str(int(seed) + 1), "--k", str(int(k))]
    line = " ".join(parts)
    notes = []
    if complex_params:
        notes.append(f"and in a --config file: {', '.join(complex_params)}")
    if unnamed:
        notes.append(f"{unnamed} parameter(s) whose names are not identifiers left out")
    return line + (f"  # {'; '.join(notes)}" if notes else "")
