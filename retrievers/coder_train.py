"""Training CoDeR's constraint-compatibility encoder ``E_C`` (CoDeR appendix B;
docs/methods/coder.md#training-the-compatibility-encoder).

Two stages, each one epoch, continuing from the previous stage's weights:

1. **Word-level polarity triplets** ``(word, synonym, antonym)`` from WordNet: by default the
   authors' released ``<data>/coder_train/stage1_lexical_train_triplets.jsonl`` (17,201 triplets),
   ``stage1="wordnet"`` derives them from NLTK WordNet with :mod:`retrievers.coder_wordnet`
   (online: ``nltk.download("wordnet")``; offline: ``nltk_data`` = a directory or the
   ``nltk_data-wordnet.tar.gz`` tarball), or ``stage1=PATH`` reads any JSON-lines file with
   ``query``/``positive``/``hard_negative``.
2. **Sentence-level triplets** ``(q, d+, d−)`` from the *train* splits of NevIR and ExcluIR
   (``stage2="nevir:train,excluir:train"``): ``stage2_per_source`` (800) queries sampled per source
   with the seed; ``d+`` a satisfying document (label ≥ the benchmark's relevance threshold),
   ``d−`` a violating one (``Judgments.violating``) — one triplet per query.

Loss: sentence-transformers' ``MultipleNegativesRankingLoss`` (cosine similarity, scale β = 20):
for each anchor, cross-entropy over the batch's positives and hard negatives with its own
positive as the target — the violating document is the explicit hard negative and every other
document in the batch an in-batch negative. AdamW (lr 2e-5, weight decay 0.01), batch 16, linear
warm-up over the first 10 % of each stage's steps then linear decay (the authors' script), max
length 128, a fresh optimiser per stage. Batches never hold the same anchor or positive text
twice (``no_duplicates``; sentence-transformers' ``NO_DUPLICATES`` sampler), because a repeated
text would be its own in-batch negative. The query prefix (BGE's instruction for
``BAAI/bge-large-en-v1.5``) is put before every anchor, in training as at inference. Pooling is a
parameter: ``mean`` (the paper's choice for BGE, whose released pooling is CLS).

The artifact is a sentence-transformers model directory plus ``coder_card.json``: base model and
its fingerprint, configuration, per-stage data hashes, triplet and step counts, loss curve and
wall time, seed, library versions, device, and the training data (benchmark versions, the query
and document ids used, and SHA-256 digests of their texts) that the runner checks before it
scores the encoder anywhere (:mod:`harness.core.leakage`). Artifacts live under
``$BEYONDSIM_HOME/models/coder/<config hash>/`` and are written atomically (saved into a temporary
directory, then renamed: :func:`harness.core.files.replacing_folder`), so a crash never leaves a
half-written model that looks finished.

``beyondsim train coder [-p KEY=VALUE ...]`` trains one; ``coder-seq``/``coder-union`` with
``compat_model="auto"`` train (or reuse) the one their parameters describe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from harness.models.pool import load_encoder
from harness.models.resolve import DEFAULT_ENCODER, default_device, model_fingerprint
from harness.protocols import NullProgress
from harness.store.provenance import environment
from harness.run.runner import seed_everything
from harness.core.leakage import TrainingData, digests, family, text_digest
from harness.core.files import replacing_folder

from .train_step import MnrlSteps, no_duplicate_batches

CARD = "coder_card.json"
CARD_FORMAT = "beyondsim.coder-card/1"
STAGE1_RELEASED = Path("coder_train") / "stage1_lexical_train_triplets.jsonl"
BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class CoderTrainConfig:
    base_model: str = DEFAULT_ENCODER
    pooling: str | None = "mean"
    query_prefix: str = ""
    stage1: str = "released"  # "released" | "wordnet" | "none" | path to a JSON-lines triplet file
    stage1_max: int | None = None  # cap on stage-1 triplets (seeded sample); None = all
    nltk_data: str | None = None  # WordNet for stage1="wordnet": a directory or the tarball
    stage2: str = "nevir:train,excluir:train"  # comma-separated benchmark splits; "" = none
    stage2_per_source: int | None = 800  # None = every usable query
    # evaluation splits whose queries/documents (ids of the same family, or texts) a training
    # triplet must not touch: "auto" = each source's own evaluation split (nevir, excluir); "" = none
    stage2_exclude: str = "auto"
    batch_size: int = 16
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup: float = 0.1
    max_length: int = 128
    scale: float = 20.0
    no_duplicates: bool = True
    seed: int = 42

    def validate(self) -> None:
        if self.batch_size < 2:
            raise ValueError("batch_size must be ≥ 2 (in-batch negatives need other examples)")
        if not 0 <= self.warmup < 1:
            raise ValueError("warmup is a fraction of the steps, in [0, 1)")
        if self.lr <= 0 or self.max_length < 8 or self.scale <= 0:
            raise ValueError("lr and scale must be > 0 and max_length ≥ 8")
        if self.stage1 == "none" and not self.sources():
            raise ValueError("nothing to train on: stage1='none' and no stage2 sources")

    def sources(self) -> list[str]:
        return [s.strip() for s in self.stage2.split(",") if s.strip()]


@dataclass
class Triplet:
    query: str
    positive: str
    negative: str


def read_triplets(path: Path) -> list[Triplet]:
    """``{"query", "positive", "hard_negative"}`` per line; a bad line is a ``DataError`` naming
    the file, the line and the field (:func:`retrievers.coder_wordnet.read_triplets`)."""
    from .coder_wordnet import read_triplets as read_rows

    return [Triplet(r["query"], r["positive"], r["hard_negative"]) for r in read_rows(path)]


def triplets_digest(triplets: Sequence[Triplet]) -> str:
    h = hashlib.sha256()
    for t in triplets:
        h.update(json.dumps([t.query, t.positive, t.negative], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def stage1_triplets(cfg: CoderTrainConfig, data_dir: Path | None, cache_dir: Path) -> tuple[list[Triplet], str]:
    """The stage-1 triplets and a description of where they came from."""
    if cfg.stage1 == "none":
        return [], "none"
    if cfg.stage1 == "released":
        if data_dir is None or not (data_dir / STAGE1_RELEASED).is_file():
            where = data_dir / STAGE1_RELEASED if data_dir else STAGE1_RELEASED
            raise FileNotFoundError(f"stage-1 triplets not found at {where} (the authors' release, "
                                    "nice-hku-coder/coder_data); use stage1=wordnet to derive them from WordNet")
        path = data_dir / STAGE1_RELEASED
        trips, source = read_triplets(path), f"released:{path.name}"
    elif cfg.stage1 == "wordnet":
        from . import coder_wordnet as cw

        if cfg.nltk_data:
            wn = cw.load_wordnet(Path(cfg.nltk_data), download=False, cache_dir=cache_dir / "nltk_data")
        else:  # NLTK's path, the tarball in the data directory, Debian's wordnet-base
            from harness.data.wordnet import load_wordnet

            wn = load_wordnet(data_dir, online=False)
        # val_ratio 0: the authors' released file holds every anchor (train and val together)
        train, _val = cw.build_stage1_triplets(cw.synonym_pairs(wn), cw.antonym_pairs(wn), seed=42, val_ratio=0.0)
        trips = [Triplet(r["query"], r["positive"], r["hard_negative"]) for r in train]
        source = "wordnet:nltk"
    else:
        path = Path(cfg.stage1).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"stage1: no such triplet file {path}")
        trips, source = read_triplets(path), f"file:{path.name}"
    if cfg.stage1_max is not None and len(trips) > cfg.stage1_max:
        rng = random.Random(cfg.seed)
        keep = sorted(rng.sample(range(len(trips)), cfg.stage1_max))
        trips = [trips[i] for i in keep]
    return trips, source


def stage2_triplets(cfg: CoderTrainConfig, load: Callable[[str], Any]) -> tuple[list[Triplet], TrainingData, list[dict]]:
    """Sentence triplets from the train splits in ``cfg.stage2``; ``load(name)`` returns a Benchmark.
    Returns the triplets, what they were drawn from (for the leakage check) and per-source facts."""
    trips: list[Triplet] = []
    seen = TrainingData()
    facts: list[dict] = []
    for name in cfg.sources():
        if ":" not in name or name.split(":", 1)[1] not in ("train", "dev"):
            raise ValueError(f"stage2 source {name!r}: CoDeR trains only on train splits (e.g. 'nevir:train')")
        bench = load(name)
        rng = random.Random(f"{cfg.seed}:{name}")
        banned = _banned(cfg, name, load)
        usable, excluded = [], 0
        for q in bench.eval_queries:
            sat = sorted(bench.judgments.relevant(q.id, bench.relevance_threshold))
            viol = sorted(bench.judgments.violating.get(q.id, ()))
            viol = [d for d in viol if d not in sat and d in bench.corpus and not banned(bench, d)]
            sat = [d for d in sat if d in bench.corpus and not banned(bench, d)]
            if banned(bench, None, q):
                sat = []
            if sat and viol:
                usable.append((q, sat, viol))
            elif bench.judgments.violating.get(q.id):
                excluded += 1
        n_usable = len(usable)
        if cfg.stage2_per_source is not None and len(usable) > cfg.stage2_per_source:
            idx = sorted(rng.sample(range(len(usable)), cfg.stage2_per_source))
            usable = [usable[i] for i in idx]
        fam = family(bench.name)
        qids, dids, qtexts, dtexts = set(), set(), [], []
        src_trips = []
        for q, sat, viol in usable:
            dp, dn = bench.corpus.get(rng.choice(sat)), bench.corpus.get(rng.choice(viol))
            src_trips.append(Triplet(q.text, dp.full_text, dn.full_text))
            qids.add(q.id)
            dids.update((dp.id, dn.id))
            qtexts.append(q.text)
            dtexts += [dp.full_text, dp.text, dn.full_text, dn.text]
        fact = {"benchmark": bench.name, "version": bench.version, "queries": len(usable),
                "usable_queries": n_usable,
                "excluded_queries": excluded, "sha256": triplets_digest(src_trips)}
        facts.append(fact)
        seen = seen.merge(TrainingData((fact,), {fam: frozenset(qids)}, {fam: frozenset(dids)},
                                       digests(qtexts), digests(dtexts)))
        trips += src_trips
    return trips, seen, facts


def _banned(cfg: CoderTrainConfig, source: str, load: Callable[[str], Any]) -> Callable[..., bool]:
    """A predicate: does this document (or query) of ``source`` appear in an excluded evaluation
    split, by id within the same benchmark family or by normalised text anywhere?"""
    if cfg.stage2_exclude == "auto":
        names = [family(source)]
    else:
        names = [n.strip() for n in cfg.stage2_exclude.split(",") if n.strip()]
    ids: dict[str, set[str]] = {}
    texts: set[str] = set()
    for n in names:
        ev = load(n)
        fam = family(ev.name)
        ids.setdefault(fam, set()).update(d for d in ev.corpus.ids)
        ids[fam].update(q.id for q in ev.eval_queries)
        texts |= digests(q.text for q in ev.eval_queries)
        texts |= digests(d.full_text for d in ev.corpus) | digests(d.text for d in ev.corpus)
    fam_ids = ids.get(family(source), set())

    def banned(bench: Any, doc_id: str | None, query: Any = None) -> bool:
        if query is not None:
            return query.id in fam_ids or text_digest(query.text) in texts
        d = bench.corpus.get(doc_id)
        return doc_id in fam_ids or text_digest(d.full_text) in texts or text_digest(d.text) in texts

    return banned


def config_hash(cfg: CoderTrainConfig, base_fingerprint: str) -> str:
    blob = json.dumps({"config": dataclasses.asdict(cfg), "base": base_fingerprint, "format": CARD_FORMAT},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def artifact_dir(home: Path, cfg: CoderTrainConfig) -> Path:
    return Path(home) / "models" / "coder" / config_hash(cfg, model_fingerprint(cfg.base_model))


def read_card(path: Path) -> dict[str, Any] | None:
    f = Path(path) / CARD
    if not f.is_file():
        return None
    try:
        card = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{f}: not a valid CoDeR card ({e.msg} at line {e.lineno})") from None
    if card.get("format") != CARD_FORMAT:
        raise ValueError(f"{f}: unknown card format {card.get('format')!r} (expected {CARD_FORMAT})")
    return card


def batches(triplets: Sequence[Triplet], batch_size: int, rng: random.Random, no_duplicates: bool) -> list[list[int]]:
    """Shuffled mini-batches of indices; with ``no_duplicates`` no batch holds the same text twice
    (:func:`retrievers.train_step.no_duplicate_batches`, the rule of sentence-transformers'
    NO_DUPLICATES batch sampler)."""
    if no_duplicates:
        return no_duplicate_batches([(t.query, t.positive, t.negative) for t in triplets], batch_size, rng)
    order = list(range(len(triplets)))
    rng.shuffle(order)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def mnrl_reference(q: np.ndarray, p: np.ndarray, n: np.ndarray, scale: float = 20.0) -> float:
    """Multiple-negatives ranking loss written out (numpy), for checking the library's: anchors
    ``q`` (B × d) against candidates ``[p; n]`` (2B × d) by cosine, cross-entropy with target i."""
    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    cand = unit(np.concatenate([p, n]))
    logits = scale * unit(q) @ cand.T
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-np.mean(logp[np.arange(len(q)), np.arange(len(q))]))


def train_stage(model: Any, triplets: Sequence[Triplet], cfg: CoderTrainConfig, device: str, *, seed: int,
                prefix: str, progress: Any = None, label: str = "training") -> dict[str, Any]:
    """One epoch of MNRL over ``triplets`` (:class:`retrievers.train_step.MnrlSteps`: the violating
    document is each anchor's hard negative); returns steps, loss curve and wall time."""
    rng = random.Random(seed)
    plan = batches(triplets, cfg.batch_size, rng, cfg.no_duplicates)
    mnrl = MnrlSteps(model, len(plan), lr=cfg.lr, weight_decay=cfg.weight_decay, warmup=cfg.warmup,
                     scale=cfg.scale, device=device)
    model.train()
    curve: list[float] = []
    window: list[float] = []
    every = max(1, len(plan) // 50)
    t0 = time.perf_counter()
    with (progress or NullProgress()).track(len(plan), label) as advance:
        for b in plan:
            window.append(mnrl.step(([prefix + triplets[i].query for i in b], [triplets[i].positive for i in b],
                                     [triplets[i].negative for i in b])))
            if len(window) == every:
                curve.append(round(sum(window) / len(window), 5))
                window = []
            advance(1)
    if window:
        curve.append(round(sum(window) / len(window), 5))
    model.eval()
    return {"triplets": len(triplets), "steps": len(plan), "loss_every": every, "loss_curve": curve,
            "wall_s": round(time.perf_counter() - t0, 3)}


def train_coder(cfg: CoderTrainConfig, *, home: Path, data_dir: Path | None, load_benchmark: Callable[[str], Any],
                device: str | None = None, progress: Any = None, log: Callable[[str], None] = print,
                out_dir: Path | None = None, force: bool = False) -> Path:
    """Train (or find) the artifact ``cfg`` describes; returns its directory."""
    cfg.validate()
    device = device or default_device()
    target = Path(out_dir) if out_dir else artifact_dir(home, cfg)
    if not force and read_card(target) is not None:
        return target
    seed_everything(cfg.seed)
    t0 = time.perf_counter()
    s1, s1_source = stage1_triplets(cfg, data_dir, Path(home) / "cache")
    s2, seen, facts = stage2_triplets(cfg, load_benchmark)
    log(f"training the CoDeR compatibility encoder from {cfg.base_model} on {device}: stage 1 {len(s1):,} "
        f"word triplets ({s1_source}), stage 2 {len(s2):,} sentence triplets "
        f"({', '.join(f['benchmark'] + ' ' + str(f['queries']) for f in facts) or 'none'}) -> {target}")
    model = load_encoder(cfg.base_model, device, cfg.max_length, cfg.pooling)
    stages = []
    for i, (name, trips, source) in enumerate((("stage1", s1, s1_source), ("stage2", s2, "benchmarks"))):
        if not trips:
            continue
        st = train_stage(model, trips, cfg, device, seed=cfg.seed + i, prefix=cfg.query_prefix,
                         progress=progress, label=f"CoDeR {name}")
        st.update(name=name, source=source, sha256=triplets_digest(trips))
        if name == "stage2":
            st["sources"] = facts
        stages.append(st)
    card = {
        "format": CARD_FORMAT, "base_model": cfg.base_model, "base_fingerprint": model_fingerprint(cfg.base_model),
        "config": dataclasses.asdict(cfg), "pooling": cfg.pooling, "query_prefix": cfg.query_prefix,
        "max_length": cfg.max_length, "seed": cfg.seed, "device": device, "versions": environment(device),
        "stages": stages, "steps": sum(s["steps"] for s in stages),
        "wall_s": round(time.perf_counter() - t0, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "training_data": seen.to_dict(),
    }
    with replacing_folder(target) as tmp:
        model.save(str(tmp), create_model_card=False)
        (tmp / CARD).write_text(json.dumps(card, indent=1, sort_keys=True), encoding="utf-8")
    log(f"CoDeR compatibility encoder written to {target} ({card['steps']} steps, {card['wall_s']:.0f} s)")
    return target


def config_from_params(params: dict[str, Any]) -> CoderTrainConfig:
    from harness.registry import build_params

    return build_params(CoderTrainConfig, params, "train coder", "coder")


class CoderTrainer:
    """The ``beyondsim train coder`` entry point (group ``beyondsim.trainers``)."""

    name = "coder"
    Params = CoderTrainConfig
    description = "CoDeR's constraint-compatibility encoder (two-stage MNRL on WordNet and NevIR/ExcluIR train)"

    def train(self, params: dict[str, Any], *, home: Path, data_dir: Path | None, load_benchmark: Callable[[str], Any],
              device: str | None, progress: Any, log: Callable[[str], None], out_dir: Path | None,
              force: bool) -> tuple[Path, dict[str, Any]]:
        cfg = config_from_params(params)
        path = train_coder(cfg, home=home, data_dir=data_dir, load_benchmark=load_benchmark, device=device,
                           progress=progress, log=log, out_dir=out_dir, force=force)
        return path, read_card(path) or {}


TRAINER = CoderTrainer()


def summarise_card(card: dict[str, Any]) -> dict[str, Any]:
    """The parts of a card worth keeping with every result (no id lists)."""
    return {k: card.get(k) for k in ("base_model", "base_fingerprint", "pooling", "query_prefix", "seed", "steps",
                                     "wall_s", "device", "created")} | {
        "stages": [{k: s.get(k) for k in ("name", "source", "sha256", "triplets", "steps", "wall_s", "sources")}
                   for s in card.get("stages", [])]}
