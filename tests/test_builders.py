"""Diagnostic-set builders (antonym, negation, exclusion): the three sets built from the real
BEIR SciFact corpus and checked record by record, the rules on hand-made sentences, the queries
for CoDeR's released negation passages, and offline WordNet loading."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from benchmarks import builders as B
from benchmarks.beir import BeirBenchmark
from harness.types import Corpus, Document

from conftest import tarball_with_member

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SCIFACT_FILES = ("beir/scifact/corpus.jsonl", "beir/scifact/queries.jsonl", "beir/scifact/qrels/test.tsv")
RELEASED_NEGATION = DATA / "diag" / "negation" / "corpus.jsonl"
WORDNET_TARBALL = DATA / B.WORDNET_TARBALL
SET_NAMES = ("antonym", "negation", "exclusion")


def _missing(*files: str) -> list[str]:
    return [str(DATA / f) for f in files if not (DATA / f).exists()]


# ---------------------------------------------------------------------------------------------
# fixtures: WordNet, SciFact and the three default builds are made once per module


@pytest.fixture(scope="module")
def wordnet(tmp_path_factory: pytest.TempPathFactory):
    """NLTK's WordNet, offline; the tarball (if needed) is unpacked into a temporary home."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BEYONDSIM_HOME", str(tmp_path_factory.mktemp("wordnet-home")))
        try:
            return B.load_wordnet(DATA)
        except B.WordNetUnavailable as exc:
            pytest.skip(f"WordNet not available offline: {exc}")


@pytest.fixture(scope="module")
def wn(wordnet) -> B._WN:
    return B._WN(wordnet)


@pytest.fixture(scope="module")
def scifact() -> Corpus:
    missing = _missing(*SCIFACT_FILES)
    if missing:
        pytest.skip(f"BEIR SciFact not found: {', '.join(missing)}")
    return BeirBenchmark.load("beir/scifact", DATA).corpus


@pytest.fixture(scope="module")
def built(scifact: Corpus, wordnet) -> dict[str, B.BuiltSet]:
    return {name: B.BUILDERS[name](scifact, source="beir/scifact", wordnet=wordnet) for name in SET_NAMES}


@pytest.fixture(scope="module")
def released() -> B.BuiltSet:
    if not RELEASED_NEGATION.exists():
        pytest.skip(f"CoDeR negation passages not found: {RELEASED_NEGATION}")
    return B.negation_from_released(RELEASED_NEGATION)


def _texts(s: B.BuiltSet) -> dict[str, str]:
    return {d["doc_id"]: d["text"] for d in s.corpus}


def _whole_word(term: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(term) + r"(?![A-Za-z0-9])", re.I)


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _negations(text: str) -> int:
    return len(re.findall(r"\b(?:not|no)\b", text))


def _pairs(s: B.BuiltSet) -> list[tuple[dict, dict]]:
    by_pair: dict[str, list[dict]] = defaultdict(list)
    for q in s.queries:
        by_pair[q["pair_id"]].append(q)
    assert all(len(v) == 2 for v in by_pair.values())
    return [(v[0], v[1]) for v in by_pair.values()]


# ---------------------------------------------------------------------------------------------
# the three sets built from SciFact


@pytest.mark.parametrize("name", SET_NAMES)
def test_counts_and_shape(built: dict[str, B.BuiltSet], name: str) -> None:
    s = built[name]
    assert s.name == name
    n = len(s.queries)
    assert n >= 60, f"{name}: only {n} queries ({s.params['rejected']})"
    assert n <= 104
    if name == "exclusion":
        assert n == min(104, s.params["candidate_documents"])
        assert len(s.corpus) == 3 * n  # satisfying, violating, neutral per query (CoDeR: 104/312)
        assert len({q["source_doc_id"] for q in s.queries}) == n
    else:
        assert n % 2 == 0
        assert n == 2 * min(52, s.params["candidate_documents"])
        pools = {q["pair_id"]: len(q["graded_relevance"]) for q in s.queries}
        assert all(4 <= k <= 6 for k in pools.values())  # 3–5 passages + the modified copy
        assert len(s.corpus) == sum(pools.values())
    assert len({q["query_id"] for q in s.queries}) == n
    assert len({d["doc_id"] for d in s.corpus}) == len(s.corpus)
    assert all(d["text"].strip() and d["source_doc_id"] for d in s.corpus)
    assert all(q["category"] == name for q in s.queries)


@pytest.mark.parametrize("name", SET_NAMES)
def test_judgments_are_consistent(built: dict[str, B.BuiltSet], name: str) -> None:
    s = built[name]
    ids = {d["doc_id"]: d for d in s.corpus}
    for q in s.queries:
        graded = q["graded_relevance"]
        sat, vio = q["constraint_satisfying_doc_ids"], q["constraint_violating_doc_ids"]
        assert len(sat) == 1 and len(vio) == 1 and sat != vio
        assert set(graded) == set(q["topical_relevant_doc_ids"])
        assert all(d in ids for d in graded)
        assert graded[sat[0]] == 2.0 and graded[vio[0]] == 0.0
        neutral = [d for d in graded if d not in sat + vio]
        assert neutral and all(graded[d] == 1.0 for d in neutral)
        assert all(ids[d]["source_doc_id"] == q["source_doc_id"] for d in graded)
        assert re.fullmatch(rf"{name}-q\d+", q["query_id"])
        assert all(d.startswith(f"{name}-{q['source_doc_id']}-p") for d in graded)


def _differing(a: str, b: str) -> list[tuple[str, str]]:
    ta, tb = a.split(), b.split()
    assert len(ta) == len(tb), (a, b)
    return [(x, y) for x, y in zip(ta, tb) if x != y]


def test_antonym_pairs(built: dict[str, B.BuiltSet], wordnet) -> None:
    s = built["antonym"]
    texts = _texts(s)
    for q1, q2 in _pairs(s):
        assert (q1["polarity"], q2["polarity"]) == ("original", "antonym")
        kw, ant = q1["keyword"], q1["antonym"]
        assert q2["keyword"] == kw and q2["antonym"] == ant
        # a real WordNet antonym pair, both directions
        direct = {a.name() for syn in wordnet.synsets(kw) for lem in syn.lemmas() if lem.name() == kw
                  for a in lem.antonyms()}
        back = {a.name() for syn in wordnet.synsets(ant) for lem in syn.lemmas() if lem.name() == ant
                for a in lem.antonyms()}
        assert direct == {ant} and back == {kw}
        sat, vio = q1["constraint_satisfying_doc_ids"][0], q1["constraint_violating_doc_ids"][0]
        assert q2["constraint_satisfying_doc_ids"] == [vio] and q2["constraint_violating_doc_ids"] == [sat]
        assert vio == f"{sat}-ant"
        for a, b in ((texts[sat], texts[vio]), (q1["query"], q2["query"])):
            diff = _differing(a, b)
            words = [(x.strip(".,;:").lower(), y.strip(".,;:").lower()) for x, y in diff]
            assert (kw, ant) in words, (a, b)
            rest = [p for p in words if p != (kw, ant)]
            assert rest in ([], [("a", "an")], [("an", "a")]), (a, b)  # only the article may change
            if rest:
                tb = b.split()
                i = next(i for i, w in enumerate(tb) if w.strip(".,;:").lower() == ant)
                assert tb[i - 1].lower() == B.indefinite_article(ant)
        assert len(_whole_word(kw).findall(texts[sat])) == 1
        # the antonym is new to the whole source document (all of its passages)
        pool = q1["graded_relevance"]
        assert not any(_whole_word(ant).search(texts[d]) for d in pool if d != vio)
        assert q1["query"] == "Find evidence that " + q1["query"][len("Find evidence that "):]
        assert q1["query"].endswith(".")


NEG_AUX = {"is", "are", "was", "were", "has", "have", "had", "could", "may", "might", "will", "would",
           "should", "must", "does", "do", "did"}


def _negation_edit(a: str, b: str, wordnet) -> str | None:
    """How ``b`` negates ``a`` (word tokens): the rule name, or None if it is anything else."""
    ta, tb = a.split(), b.split()
    if len(tb) == len(ta) + 1:
        for i in range(1, len(tb)):
            if tb[i] == "not" and tb[:i] + tb[i + 1:] == ta and ta[i - 1] in NEG_AUX:
                return "aux_not"
        return None
    if len(tb) == len(ta):
        diff = [(x, y) for x, y in zip(ta, tb) if x != y]
        return "can_cannot" if diff == [("can", "cannot")] else None
    if len(tb) == len(ta) + 2:
        for i in range(1, len(tb) - 1):
            if tb[i + 1] == "not" and tb[i] in ("does", "did"):
                rest = tb[:i] + tb[i + 2:]
                diff = [(j, x, y) for j, (x, y) in enumerate(zip(ta, rest)) if x != y]
                if len(diff) != 1:
                    return None
                j, inflected, base = diff[0]
                if j not in (i, i + 1) or base not in wordnet._morphy(inflected, "v"):
                    return None
                if tb[i] == "does" and inflected.endswith("s"):
                    return "does_not"
                if tb[i] == "did" and inflected.endswith("ed"):
                    return "did_not"
    return None


def test_negation_pairs(built: dict[str, B.BuiltSet], wordnet) -> None:
    s = built["negation"]
    texts = _texts(s)
    rules = Counter()
    for q1, q2 in _pairs(s):
        assert (q1["polarity"], q2["polarity"]) == ("affirmed", "negated")
        sat, vio = q1["constraint_satisfying_doc_ids"][0], q1["constraint_violating_doc_ids"][0]
        assert vio == f"{sat}-neg"
        assert q2["constraint_satisfying_doc_ids"] == [vio] and q2["constraint_violating_doc_ids"] == [sat]
        rule = _negation_edit(texts[sat], texts[vio], wordnet)
        assert rule is not None and rule == q1["negation_rule"], (texts[sat], texts[vio])
        assert _negation_edit(q1["query"], q2["query"], wordnet) == rule
        assert not B.has_negation(q1["sentence"])
        rules[rule] += 1
    assert rules["aux_not"] > 0


def test_exclusion_terms(built: dict[str, B.BuiltSet]) -> None:
    s = built["exclusion"]
    texts = _texts(s)
    for q in s.queries:
        x, y = q["included_term"], q["excluded_term"]
        assert q["query"] == f"Find passages about {x} that do not mention {y}."
        sat, vio = q["constraint_satisfying_doc_ids"][0], q["constraint_violating_doc_ids"][0]
        neutral = [d for d, g in q["graded_relevance"].items() if g == 1.0]
        assert len(neutral) == 1
        px, py = _whole_word(x), _whole_word(y)
        assert px.search(texts[sat]) and px.search(texts[vio])
        assert py.search(texts[vio]) and not py.search(texts[sat])
        assert not px.search(texts[neutral[0]]) and not py.search(texts[neutral[0]])
        assert x.lower() not in y.lower() and y.lower() not in x.lower()
        assert y.lower() not in B.STOPWORDS and x.lower() not in B.STOPWORDS


def test_same_seed_same_set_other_seed_other_sample(scifact: Corpus, wordnet) -> None:
    subset = Corpus(list(scifact)[:500])
    for name in SET_NAMES:
        build = B.BUILDERS[name]
        a = build(subset, seed=3, max_queries=12, wordnet=wordnet)
        b = build(subset, seed=3, max_queries=12, wordnet=wordnet)
        c = build(subset, seed=4, max_queries=12, wordnet=wordnet)
        assert (a.corpus, a.queries, a.params) == (b.corpus, b.queries, b.params)
        assert {q["source_doc_id"] for q in a.queries} != {q["source_doc_id"] for q in c.queries}
        assert len(a.queries) == 12
    full = B.build_antonym(subset, max_queries=None, wordnet=wordnet)  # None = every candidate
    assert len(full.queries) == 2 * full.params["candidate_documents"] > 12


@pytest.mark.parametrize("name", SET_NAMES)
def test_stats_match_records(built: dict[str, B.BuiltSet], name: str) -> None:
    s = built[name]
    st = s.stats()
    grades = Counter(str(int(g)) for q in s.queries for g in q["graded_relevance"].values())
    assert st["queries"] == len(s.queries) and st["passages"] == len(s.corpus)
    assert st["source_documents"] == len({d["source_doc_id"] for d in s.corpus})
    assert st["judged"] == {"2": grades["2"], "1": grades["1"], "0": grades["0"]}
    assert st["judged"]["2"] == st["judged"]["0"] == len(s.queries)
    assert st["avg_passages_per_query"] == pytest.approx(
        sum(len(q["graded_relevance"]) for q in s.queries) / len(s.queries), abs=1e-3)
    assert st["avg_query_words"] == pytest.approx(
        sum(len(q["query"].split()) for q in s.queries) / len(s.queries), abs=1e-3)
    assert st["rejected"] == s.params["rejected"] and sum(st["rejected"].values()) > 0
    assert s.params["seed"] == 0 and s.params["max_queries"] == 104 and s.params["source"] == "beir/scifact"
    assert s.params["version"] == B.BUILDER_VERSION


@pytest.mark.parametrize("name", SET_NAMES)
def test_write_and_read_back(built: dict[str, B.BuiltSet], name: str, tmp_path: Path) -> None:
    s = built[name]
    paths = s.write(tmp_path / "out")
    assert [p.name for p in paths] == [f"corpus_{name}.jsonl", f"queries_{name}.jsonl", "build.json"]
    assert _read_jsonl(paths[0]) == s.corpus
    assert _read_jsonl(paths[1]) == s.queries
    meta = json.loads(paths[2].read_text(encoding="utf-8"))
    assert meta["params"] == s.params and meta["stats"] == s.stats()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]
    s.write(tmp_path / "out")  # overwriting in place works
    assert _read_jsonl(paths[1]) == s.queries


# ---------------------------------------------------------------------------------------------
# rules on hand-made text


def test_split_sentences_respects_abbreviations() -> None:
    text = ("Mice (e.g. C57BL/6 and BALB/c) were used, i.e. two strains, as described by Smith et al. "
            "in 2001. Levels rose from 1.8 to 2.4 mg/dL vs. baseline (Fig. 2). J. Smith and A. B. Jones "
            "confirmed it in the U.S. population. Was it significant? Yes! The p value was 0.05.")
    assert B.split_sentences(text) == [
        "Mice (e.g. C57BL/6 and BALB/c) were used, i.e. two strains, as described by Smith et al. in 2001.",
        "Levels rose from 1.8 to 2.4 mg/dL vs. baseline (Fig. 2).",
        "J. Smith and A. B. Jones confirmed it in the U.S. population.",
        "Was it significant?",
        "Yes!",
        "The p value was 0.05.",
    ]
    structured = "BACKGROUND Obesity is common.   \n DESIGN, SETTING, AND PATIENTS Adults were enrolled. [Results] It worked."
    assert B.split_sentences(structured) == ["Obesity is common.", "Adults were enrolled.", "It worked."]
    assert B.split_sentences("COPD is common. KRAS Mutations were found.") == [
        "COPD is common.", "KRAS Mutations were found."]


def test_passage_partition() -> None:
    assert B.passage_partition(4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert B.passage_partition(7) == [(0, 2), (2, 4), (4, 5), (5, 6), (6, 7)]
    spans = B.passage_partition(17)
    assert len(spans) == 6 and all(1 <= b - a <= 3 for a, b in spans) and spans[-1][1] == 17


def test_article_fix() -> None:
    assert B.indefinite_article("atypical") == "an"
    assert B.indefinite_article("typical") == "a"
    assert B.indefinite_article("unilateral") == "a"
    assert B.indefinite_article("unimportant") == "an"
    assert B.indefinite_article("hour") == "an"
    assert B.indefinite_article("MRI") == "an" and B.indefinite_article("CT") == "a"
    s = "This is a typical case."
    i = s.index("typical")
    assert B.antonym_swap(s, i, i + len("typical"), "atypical") == "This is an atypical case."
    s = "An efficient method and an unusual result."
    i = s.index("unusual")
    assert B.antonym_swap(s, i, i + len("unusual"), "usual") == "An efficient method and a usual result."
    i = s.index("efficient")
    assert B.antonym_swap(s, i, i + len("efficient"), "inefficient") == "An inefficient method and an unusual result."
    s = "Strong effects were seen."
    assert B.antonym_swap(s, 0, 6, "weak") == "Weak effects were seen."


def test_antonym_ambiguity_rejected(wn: B._WN, wordnet) -> None:
    # "present" has adjective, noun and verb senses: swapping it for "absent" is unsafe
    assert {s.pos() for s in wordnet.synsets("present")} >= {"a", "n", "v"}
    assert wn.unambiguous_antonym("present") == (None, "several_parts_of_speech")
    # "significant" has two antonyms (insignificant, nonsignificant)
    assert wn.unambiguous_antonym("significant") == (None, "several_antonyms")
    # "higher" is an inflected form (its antonym would be "lower", not "low")
    assert wn.unambiguous_antonym("higher")[0] is None
    assert wn.unambiguous_antonym("efficient") == ("inefficient", "ok")
    assert wn.unambiguous_antonym("inefficient") == ("efficient", "ok")
    assert wn.unambiguous_antonym("weak") == ("strong", "ok")


def test_antonym_candidates_on_a_small_document(wn: B._WN) -> None:
    doc = B._split_doc(Document("d1", "The first step is slow. The enzyme is efficient in yeast cells at "
                                      "room temperature. Growth stops. Cells divide. Nothing else happens."))
    rejected: Counter[str] = Counter()
    cands = B._antonym_candidates(doc, wn, rejected, Counter({"inefficient": 5}))
    assert [(dict(c.info)["keyword"], c.modified) for c in cands] == [
        ("efficient", "The enzyme is inefficient in yeast cells at room temperature.")]
    # the antonym already in the document: rejected
    doc2 = B._split_doc(Document("d2", doc.full_text + " An inefficient variant exists."))
    rejected2: Counter[str] = Counter()
    assert B._antonym_candidates(doc2, wn, rejected2, Counter({"inefficient": 5})) == []
    assert rejected2["antonym_in_document"] == 1


@pytest.mark.parametrize("sentence, negated, rule", [
    ("The drug is effective against resistant strains in mice.",
     "The drug is not effective against resistant strains in mice.", "aux_not"),
    ("Tumor cells can escape immune surveillance through PD-L1 expression.",
     "Tumor cells cannot escape immune surveillance through PD-L1 expression.", "can_cannot"),
    ("Vitamin D supplementation has reduced fracture risk in older women.",
     "Vitamin D supplementation has not reduced fracture risk in older women.", "aux_not"),
    ("MAVS transduces signals from the cytosolic RIG-I-like receptors.",
     "MAVS does not transduce signals from the cytosolic RIG-I-like receptors.", "does_not"),
    ("Caspase-1 specifically cleaves the linker between the two domains.",
     "Caspase-1 does not specifically cleave the linker between the two domains.", "does_not"),
    ("Rapamycin inhibited the growth of the xenografts in nude mice.",
     "Rapamycin did not inhibit the growth of the xenografts in nude mice.", "did_not"),
])
def test_negation_rules(wn: B._WN, sentence: str, negated: str, rule: str) -> None:
    assert B.negate(sentence, wn) == (negated, rule)


@pytest.mark.parametrize("sentence, reason", [
    ("The drug is not effective against resistant strains.", "already_negated"),
    ("Patients never recovered from the infection.", "already_negated"),
    ("Patients who were treated with aspirin had fewer events.", "verb_in_subordinate_clause"),
    ("In older adults, exercise is associated with better memory.", "verb_in_subordinate_clause"),
    ("Smokers have higher rates of lung cancer than nonsmokers.", "have_as_main_verb"),
    ("The protein is also expressed in the liver.", "awkward_after_auxiliary"),
    ("Mice treated with the compound gained weight.", "participle_or_passive"),
    ("Infection of the subcultured cells with the virus was unsuccessful.", "double_negative"),
])
def test_negation_refuses_unsafe_sentences(wn: B._WN, sentence: str, reason: str) -> None:
    assert B.negate(sentence, wn) == (None, reason)


@pytest.mark.parametrize("sentence, problem", [
    ("We found that the enzyme is active in yeast cells at room temperature.", "clause_anaphora"),
    ("However, the enzyme is active in yeast cells at room temperature.", "clause_start"),
    ("The enzyme (EC 3.1) is active in yeast cells at room temperature.", "clause_punctuation"),
    ("The enzyme is active.", "clause_length"),
    ("This enzyme is active in yeast cells at room temperature and pressure.", "clause_anaphora"),
    ("Levels were 12.5, 13.1 and 14.2 in yeast cells at room temperature.", "clause_numbers"),
    ("The present study investigated the enzyme in yeast cells at room temperature.", "clause_start"),
])
def test_query_clause_filter(wn: B._WN, sentence: str, problem: str) -> None:
    assert B.clause_problem(sentence, wn) == problem
    assert B.clause_problem("The enzyme is active in yeast cells at room temperature.", wn) is None


def test_query_keeps_names_and_lowercases_words(wn: B._WN) -> None:
    case = B.CaseModel(["Infection with Salmonella is common. We saw that cathelicidins are peptides."])
    assert B.make_query("Cathelicidins are a family of peptides.", wn, case) == \
        "Find evidence that cathelicidins are a family of peptides."
    assert B.make_query("Salmonella typhimurium causes enteric infection.", wn, case) == \
        "Find evidence that Salmonella typhimurium causes enteric infection."
    assert B.make_query("MAVS transduces signals.", wn, case) == "Find evidence that MAVS transduces signals."
    assert B.make_query("The inhibitor stabilizes TG2.", wn, case) == "Find evidence that the inhibitor stabilizes TG2."


def test_exclusion_rejects_variants(wn: B._WN) -> None:
    assert B._related("insulin resistance", "insulin", wn)
    assert B._related("tumor", "tumors", wn)
    assert B._related("inhibitor", "inhibition", wn)
    assert not B._related("Cas9", "adeno-associated virus", wn)
    assert B._related("EPA", "eicosapentaenoic acid", wn)  # an acronym and its long form
    assert B.abbreviates("TCR", "T cell receptor") and not B.abbreviates("MRA", "intracranial aneurysm")
    defs = B._definitions("Coarctation raises the risk of intracranial aneurysm (IA). This magnetic resonance "
                          "angiography (MRA) study found no IAs.")
    assert B._aliases("intracranial aneurysm", defs) == {"ia"}
    assert B._aliases("MRA", defs) == {"magnetic resonance angiography"}
    assert B._aliases("IAs", defs) == {"intracranial aneurysm"}
    assert B._aliases("aneurysm", defs) == {"ia"}
    defs = B._definitions("the receptor Epstein-Barr virus-induced gene 2 (EBI2, also known as GPR183) by B cells")
    assert B._aliases("EBI2", defs) == {"epstein-barr virus-induced gene 2"}
    assert B._synonyms("EBI2", "GPR183", "EBI2, aka GPR183, is a receptor.")
    assert B._synonyms("GPR183", "EBI2", "the gene 2 (EBI2, also known as GPR183) by B cells")
    assert B._synonyms("EBI2", "GPR183", "induced gene 2 (EBI2; GPR183), in guiding")
    assert B._synonyms("EBI2", "GPR183", "the receptor EBI2 (also known as GPR183) guides B cells")
    assert not B._synonyms("mice", "rats", "Mice and rats were used.")
    assert B.contains_word("Dicer-dependent cleavage", "dicer")
    assert not B.contains_word("Dicers2 cleavage", "dicer")


# ---------------------------------------------------------------------------------------------
# CoDeR's released negation passages


def test_negation_from_released(released: B.BuiltSet) -> None:
    groups: dict[str, list[str]] = defaultdict(list)
    for d in released.corpus:
        groups[d["source_doc_id"]].append(d["doc_id"])
    assert len(groups) == 51 and len(released.corpus) == 303
    assert Counter(len(v) for v in groups.values()) == {6: 48, 5: 3}
    assert released.params["group_sizes"] == {"5": 3, "6": 48}
    assert released.params["unpaired_groups"] == []
    assert len(released.queries) == 2 * 51
    texts = _texts(released)
    for q1, q2 in _pairs(released):
        members = sorted(groups[q1["source_doc_id"]], key=lambda i: int(i.rsplit("-", 1)[1]))
        # the negated copy is the last passage of its group: "-6", or "-5" in the three
        # five-passage groups (documents that were split into four passages)
        neg = q1["constraint_violating_doc_ids"][0]
        assert neg == members[-1] and q2["constraint_satisfying_doc_ids"] == [neg]
        orig = q1["constraint_satisfying_doc_ids"][0]
        assert orig in members[:-1] and q2["constraint_violating_doc_ids"] == [orig]
        assert set(q1["graded_relevance"]) == set(members)
        assert q1["sentence"] in texts[orig] and q2["sentence"] in texts[neg]
        assert _negations(q2["sentence"]) > _negations(q1["sentence"])
        assert q1["query"].startswith("Find evidence that ") and q2["query"].startswith("Find evidence that ")
    five = [k for k, v in groups.items() if len(v) == 5]
    assert all(sorted(int(i.rsplit("-", 1)[1]) for i in groups[k]) == [1, 2, 3, 4, 5] for k in five)


# ---------------------------------------------------------------------------------------------
# WordNet loading


def test_wordnet_reader_is_cached(wordnet) -> None:
    assert B.load_wordnet(DATA) is wordnet
    assert wordnet.synsets("dog")


def test_wordnet_tarball_extracts_safely(tmp_path: Path) -> None:
    if not WORDNET_TARBALL.exists():
        pytest.skip(f"WordNet tarball not found: {WORDNET_TARBALL}")
    target = B.extract_wordnet_tarball(WORDNET_TARBALL, tmp_path / "nltk_data")
    assert target == tmp_path / "nltk_data" / "corpora" / "wordnet"
    assert {"data.noun", "index.adj", "lexnames", "adj.exc"} <= {p.name for p in target.iterdir()}
    assert not [p for p in (tmp_path / "nltk_data").iterdir() if p.name.startswith(".wordnet-")]

    evil = tarball_with_member(tmp_path / "evil.tar.gz", "nltk_data/corpora/wordnet/../../../escape.txt")
    with pytest.raises(ValueError, match="unsafe member"):
        B.extract_wordnet_tarball(evil, tmp_path / "other")
    assert not (tmp_path / "escape.txt").exists()


def test_wordnet_missing_says_where_it_looked(tmp_path: Path) -> None:
    from harness.data.wordnet import _find_wordnet

    with pytest.raises(B.WordNetUnavailable) as err:
        _find_wordnet(tmp_path / "no-data", False, home=tmp_path / "home", system_dirs=(tmp_path / "nowhere",),
                        try_nltk=False)
    msg = str(err.value)
    assert str(tmp_path / "no-data" / B.WORDNET_TARBALL) in msg and str(tmp_path / "nowhere") in msg
    assert "apt-get install wordnet-base" in msg and "--online" in msg
