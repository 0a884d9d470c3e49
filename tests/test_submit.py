"""`beyondsim submit`: the README's example retriever, installed with `pip install -e` from a
package outside the repository, submitted in one command; provenance of user packages; the
protocol check that lists every problem before any work."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import Store
from tests.conftest import SHARED_DATA

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLE_BLOCK = re.compile(r"<!-- submit-example: (\S+) -->\s*\n```[a-z]*\n(.*?)\n```", re.S)
README_MODULE, README_DIST = "neg_tfidf", "neg-tfidf"

# A tiny constraint benchmark in the diagnostic-set format: per query one satisfying (2), one
# violating (0) and some topical (1) documents.
DOCS = {
    "d1": "Aspirin reduces the risk of heart attack in adults.",
    "d2": "Aspirin with alcohol raises the risk of stomach bleeding in adults.",
    "d3": "Aspirin is given to adults after a heart attack.",
    "d4": "Green tea lowers cholesterol in adults who drink coffee.",
    "d5": "Green tea without caffeine lowers cholesterol.",
    "d6": "Regular exercise lowers blood pressure.",
    "d7": "Exercise with heavy weights raises blood pressure briefly.",
    "d8": "Smoking increases the risk of lung cancer.",
}
QUERIES = [  # (id, text, satisfying, violating, topical only)
    ("q1", "aspirin risk in adults without alcohol", "d1", "d2", ["d3"]),
    ("q2", "green tea cholesterol not coffee", "d5", "d4", []),
    ("q3", "exercise blood pressure without weights", "d6", "d7", []),
    ("q4", "aspirin heart attack not alcohol", "d3", "d2", ["d1"]),
]


def make_constraint_set(folder: Path) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "corpus_exclusion.jsonl", "w") as f:
        for i, t in DOCS.items():
            f.write(json.dumps({"doc_id": i, "text": t}) + "\n")
    with open(folder / "queries_exclusion.jsonl", "w") as f:
        for qid, text, sat, viol, topical in QUERIES:
            grades = {sat: 2.0, viol: 0.0, **{d: 1.0 for d in topical}}
            f.write(json.dumps({"query_id": qid, "query": text, "category": "exclusion",
                                "topical_relevant_doc_ids": sorted(grades), "constraint_satisfying_doc_ids": [sat],
                                "constraint_violating_doc_ids": [viol], "graded_relevance": grades}) + "\n")
    return folder


def readme_example() -> dict[str, str]:
    """``{relative path: text}`` of the README's example package (the fenced blocks after the
    ``<!-- submit-example: PATH -->`` markers)."""
    blocks = {path: body + "\n" for path, body in EXAMPLE_BLOCK.findall(README.read_text(encoding="utf-8"))}
    assert set(blocks) == {"my-retriever/neg_tfidf.py", "my-retriever/pyproject.toml"}, blocks.keys()
    return blocks


@pytest.fixture(scope="module")
def example_package(tmp_path_factory: pytest.TempPathFactory):
    """The README's example as a package outside the repository, `pip install -e`'d into this
    interpreter's environment under names unique to this test run, uninstalled afterwards."""
    uid = uuid.uuid4().hex[:8]
    module, dist = f"{README_MODULE}_{uid}", f"{README_DIST}-{uid}"
    root = tmp_path_factory.mktemp("user-package")
    for rel, text in readme_example().items():
        target = root / rel.replace(README_MODULE, module)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.replace(README_DIST, dist).replace(README_MODULE, module), encoding="utf-8")
    pkg = root / "my-retriever"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "-e", str(pkg)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        yield {"dir": pkg, "module": module, "dist": dist, "entry_point": dist, "version": "0.1.0"}
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", dist],
                       capture_output=True, text=True, env=env, timeout=300)
        sys.modules.pop(module, None)


def beyondsim_cli() -> list[str]:
    script = Path(sys.executable).with_name("beyondsim")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from harness.cli import main; main()"]


def ndcg10(qrels: dict[str, dict[str, int]], ranked: dict[str, list[str]]) -> dict[str, float]:
    """pytrec_eval's nDCG@10 of rankings given as ordered lists (rank-derived scores, so its re-sort
    keeps the order)."""
    import pytrec_eval

    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
        {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in ranked.items() if q in qrels})
    return {q: ref.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels}


SUITE, SUITE_QUERIES = "constraint", 5


def test_readme_example_submitted_end_to_end(example_package, tmp_path: Path) -> None:
    from harness.registry import get_suite, load_benchmark

    tiny = make_constraint_set(tmp_path / "tiny-constraint")
    home = tmp_path / "home"
    data_dir = SHARED_DATA if SHARED_DATA.is_dir() else tmp_path / "no-data"  # without data the suite is skipped
    env = dict(os.environ, BEYONDSIM_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    name = example_package["entry_point"]
    proc = subprocess.run([*beyondsim_cli(), "submit", name, "--suite", SUITE, "--max-queries", str(SUITE_QUERIES),
                           "--benchmark", str(tiny), "--data-dir", str(data_dir), "--device", "cpu"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = tmp_path / "leaderboard" / "index.html"  # the one default site location, as `leaderboard` writes it
    assert f"site: {site.resolve()}" in proc.stdout.replace("\n", "")

    with Store(home / "results.sqlite") as store:
        recs = {r.benchmark: r for r in store.results(full=True)}
    assert all(r.seed == 0 for r in recs.values())  # deterministic: one seed
    rec = recs.pop(str(tiny.resolve()))
    assert rec.retriever == name and rec.label == name
    for r in [rec, *recs.values()]:
        prov = r.provenance
        assert prov["package"] == example_package["dist"] and prov["package_version"] == example_package["version"]
        assert prov["entry_point"] == name and prov["class"] == f"{example_package['module']}:NegTfidf"
        assert prov["editable"] is True and "git_commit" not in prov  # the package is not in a git checkout
        assert r.environment["python"] == platform.python_version() and r.environment["device"] == "cpu"
        assert "torch" in r.environment and r.spec_hash == rec.spec_hash

    assert site.is_file() and name in site.read_text(encoding="utf-8")

    # the stored measures are what the stored rankings score on the benchmark
    qrels = {qid: {sat: 2, viol: 0, **{d: 1 for d in topical}} for qid, _, sat, viol, topical in QUERIES}
    violating = {qid: viol for qid, _, _, viol, _ in QUERIES}
    ranked = {q: [d for d, _ in r] for q, r in rec.rankings.items()}
    assert set(ranked) == set(qrels) and all(len(r) == len(DOCS) for r in ranked.values())
    ref = ndcg10(qrels, ranked)
    assert rec.per_query["nDCG@10"] == pytest.approx(ref)
    assert rec.measures["nDCG@10"].mean == pytest.approx(sum(ref.values()) / len(ref))
    for k in (1, 2):
        v_at_k = [float(violating[q] in ranked[q][:k]) for q in qrels]
        assert rec.measures[f"V@{k}"].mean == pytest.approx(sum(v_at_k) / len(v_at_k))
    r_at_1 = [float(ranked[q][0] == sat) for q, _, sat, _, _ in QUERIES]  # relevance threshold 2
    assert rec.measures["R@1"].mean == pytest.approx(sum(r_at_1) / len(r_at_1))
    assert rec.measures["V@1"].mean < 1.0  # the negation penalty keeps violating documents off the top

    # and on the suite's benchmarks that are on disk (each stored as its first queries)
    assert bool(recs) == SHARED_DATA.is_dir(), sorted(recs)
    for bname, r in recs.items():
        base = bname.rsplit("[:", 1)[0]
        assert base in get_suite(SUITE)["benchmarks"] and bname.endswith(f"[:{SUITE_QUERIES}]"), bname
        bench = load_benchmark(base, data_dir).head(SUITE_QUERIES)
        assert bench.version == r.benchmark_version
        ref = ndcg10(bench.judgments.relevance, {q: [d for d, _ in x] for q, x in r.rankings.items()})
        assert r.measures["nDCG@10"].mean == pytest.approx(sum(ref.values()) / len(ref)), bname


def test_module_class_of_editable_package_gets_its_provenance(example_package, tmp_path: Path, home: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(example_package["dir"]))  # what the editable install's finder does
    data = make_constraint_set(tmp_path / "tiny-constraint")
    spec = f"{example_package['module']}:NegTfidf"
    args = ["submit", spec, "-b", str(data), "-p", "penalty=0.5", "--label", "neg (p=0.5)", "--seeds", "2",
            "--out", str(tmp_path / "site")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "2 new result(s), 0 already stored" in res.output
    with Store(home / "results.sqlite") as store:
        recs = store.results()
    assert [r.seed for r in recs] == [0, 1] and {r.label for r in recs} == {"neg (p=0.5)"}
    assert recs[0].spec["params"] == {"penalty": 0.5}
    prov = recs[0].provenance
    assert prov["package"] == example_package["dist"] and prov["package_version"] == example_package["version"]
    assert prov["class"] == spec and prov["entry_point"] == example_package["entry_point"]
    assert "neg (p=0.5)" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    res = CliRunner().invoke(app, args)  # resumable: stored results are kept, not recomputed
    assert res.exit_code == 0 and "0 new result(s), 2 already stored" in res.output


BROKEN = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class P:
    alpha: float = 0.5


class NoSearch:
    Params = P

    def __init__(self, params=None):
        self.params = params

    def index(self, corpus):
        pass

    def fit(self, benchmark):
        pass


class NotADataclass:
    class Params:
        alpha = 1

    def index(self, corpus, ctx):
        pass

    def search(self, queries, k, ctx):
        return {}


class Explodes:
    Params = P

    def __init__(self, params):
        raise RuntimeError("needs a GPU cluster")

    def index(self, corpus, ctx):
        pass

    def search(self, queries, k, ctx):
        return {}
'''


@pytest.fixture
def broken_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "userpkg_broken.py").write_text(textwrap.dedent(BROKEN))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userpkg_broken"
    sys.modules.pop("userpkg_broken", None)


def test_validation_lists_every_problem_before_any_work(broken_module: str, home: Path) -> None:
    res = CliRunner().invoke(app, ["submit", f"{broken_module}:NoSearch", "--benchmark", "no-such-benchmark",
                                   "-p", "alpha=x", "-p", "beta=2"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"retriever '{broken_module}:NoSearch' cannot be submitted" in text
    assert "search(queries, k, ctx): not defined" in text
    assert "index(corpus, ctx): cannot be called with 2 positional argument(s); it is defined as index(corpus)" in text
    assert "fit(benchmark, ctx): cannot be called with 2 positional argument(s)" in text
    assert "unknown parameter(s) beta" in text
    assert "unknown benchmark" not in text  # nothing was loaded
    assert not (home / "results.sqlite").exists()

    res = CliRunner().invoke(app, ["submit", f"{broken_module}:NoSearch", "-p", "alpha=x"])
    assert res.exit_code == 2 and "alpha: could not convert string to float" in " ".join(res.output.split())

    res = CliRunner().invoke(app, ["submit", f"{broken_module}:NotADataclass"])
    assert res.exit_code == 2 and "is not a dataclass" in res.output

    res = CliRunner().invoke(app, ["submit", f"{broken_module}:Explodes"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "cannot instantiate Explodes with {'alpha': 0.5}: RuntimeError: needs a GPU cluster" in text

    res = CliRunner().invoke(app, ["submit", "no-such-retriever"])
    assert res.exit_code == 2 and "unknown retriever 'no-such-retriever'" in res.output
    assert not (home / "results.sqlite").exists()


def test_submit_config_file_and_seed_policy(broken_module: str, tmp_path: Path) -> None:
    from harness.run.submit import SUBMIT_SEEDS_DETERMINISTIC, SUBMIT_SEEDS_TRAINABLE, submit_seeds

    mod = __import__(broken_module)
    assert submit_seeds(mod.NoSearch) == SUBMIT_SEEDS_TRAINABLE == (0, 1, 2)  # has fit
    assert submit_seeds(mod.Explodes) == SUBMIT_SEEDS_DETERMINISTIC == (0,)
    cfg = tmp_path / "p.toml"
    cfg.write_text("[params]\nalpha = 0.7\ngamma = 1\n")
    res = CliRunner().invoke(app, ["submit", f"{broken_module}:Explodes", "--config", str(cfg)])
    assert res.exit_code == 2 and "unknown parameter(s) gamma" in " ".join(res.output.split())


def _fake_editable_dist(site: Path, project: Path, dist: str, version: str) -> None:
    """A dist-info as a non-setuptools backend writes for `pip install -e`: no top_level.txt, a
    direct_url.json pointing at the project folder."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "direct_url.json").write_text(json.dumps({"url": project.resolve().as_uri(), "dir_info": {"editable": True}}))
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{dist.replace('-', '_')}.pth,,\n")


def test_provenance_of_src_layout_editable_package_in_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.store.provenance import provenance

    uid = uuid.uuid4().hex[:8]
    pkg, dist = f"srcpkg_{uid}", f"src-pkg-{uid}"
    project = tmp_path / "proj"
    (project / "src" / pkg).mkdir(parents=True)
    (project / "src" / pkg / "__init__.py").write_text("")
    (project / "src" / pkg / "core.py").write_text("class R:\n    pass\n")
    (project / "src" / pkg / "extra.py").write_text("class S:\n    pass\n")
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    site = tmp_path / "site-packages"
    _fake_editable_dist(site, project, dist, "2.3.4")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(project / "src"))
    try:
        core = __import__(f"{pkg}.core", fromlist=["R"])
        prov = provenance(core.R)
        assert prov == {"class": f"{pkg}.core:R", "package": dist, "package_version": "2.3.4", "editable": True,
                        "git_commit": head, "git_dirty": False}
        (project / "src" / pkg / "extra.py").write_text("class S:\n    x = 1\n")
        extra = __import__(f"{pkg}.extra", fromlist=["S"])
        assert provenance(extra.S)["git_dirty"] is True
    finally:
        for m in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
            sys.modules.pop(m, None)


def test_one_identity_per_class_whether_named_by_entry_point_or_module_class(
        example_package, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's class submitted once by its entry point and once as ``module:Class`` is one
    configuration: the same stored name and spec hash, so the second submission resumes the first
    and the board has one row for it."""
    from harness.registry import canonical_retriever_name

    monkeypatch.syspath_prepend(str(example_package["dir"]))
    data = make_constraint_set(tmp_path / "tiny-constraint")
    by_ep, by_class = example_package["entry_point"], f"{example_package['module']}:NegTfidf"
    assert canonical_retriever_name(by_class) == by_ep
    assert canonical_retriever_name("json:JSONDecoder") == "json:JSONDecoder"  # unknown to the registry: as given
    site = tmp_path / "site"
    res = CliRunner().invoke(app, ["submit", by_ep, "-b", str(data), "--out", str(site)])
    assert res.exit_code == 0 and "1 new result(s), 0 already stored" in res.output, res.output
    res = CliRunner().invoke(app, ["submit", by_class, "-b", str(data), "--out", str(site)])
    assert res.exit_code == 0 and "0 new result(s), 1 already stored" in res.output, res.output
    with Store(home / "results.sqlite") as store:
        recs = store.results()
    assert [(r.retriever, r.label) for r in recs] == [(by_ep, by_ep)]
    page = (site / "index.html").read_text(encoding="utf-8")
    assert page.count(f">{by_ep}</a></td>") == 1 and by_class not in page
