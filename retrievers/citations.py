"""The papers of the registered methods, declared once and named by each ``@register(...,
citation=...)``. Every field comes from the repository: the ``paper=`` strings of the adapters
and the reference lists of the papers' texts kept with the project's design notes (CoDeR's
bibliography, NNN's bibliography, DEO's reading notes). A field those sources do not state is left
out (the NNN paper's text names no authors or year, so its entry has neither)."""

from __future__ import annotations

from harness.core.citation import Citation

CODER = Citation(
    "yin2026coder", "CoDeR: Local Constraint-Compatible Retrieval Beyond Semantic Similarity",
    ("Xingkun Yin", "Xuebin Tang", "Hongyang Du"), year=2026, venue="arXiv preprint", eprint="2606.13204")
DEO = Citation(
    "lee2026deo", "DEO: Training-Free Direct Embedding Optimization for Negation-Aware Retrieval",
    ("Lee, T.", "Park, J.", "Hwang, S.", "Jang, J."), year=2026, venue="arXiv preprint", eprint="2603.09185",
    doi="10.48550/arXiv.2603.09185")
NNN = Citation("nnn-decoding", "Non-negative Elastic Net Decoding for Information Retrieval")
MMR = Citation(
    "carbonell1998mmr", "The use of MMR, diversity-based reranking for reordering documents and producing summaries",
    ("Carbonell", "Goldstein"), year=1998, entry="inproceedings",
    venue="Proceedings of the 21st Annual International ACM SIGIR Conference on Research and Development in "
          "Information Retrieval", pages="335–336")
HYDE = Citation(
    "gao2023hyde", "Precise zero-shot dense retrieval without relevance labels",
    ("L. Gao", "X. Ma", "J. Lin", "J. Callan"), year=2023, entry="inproceedings",
    venue="Proceedings of the 61st Annual Meeting of the Association for Computational Linguistics "
          "(Volume 1: Long Papers)", pages="1762–1777", eprint="2212.10496")
NSIR = Citation(
    "xu2025nsir", "Logical consistency is vital: neural-symbolic information retrieval for negative-constraint queries",
    ("G. Xu", "Z. Zhang", "W. Mei", "J. Liang", "W. Lu", "X. Zhang", "Z. Yang", "X. Ma", "Y. Xiao", "D. Yang"),
    year=2025, entry="inproceedings", venue="Findings of the Association for Computational Linguistics: ACL 2025",
    pages="1828–1847", eprint="2505.22299")
COLT = Citation(
    "qu2024colt", "Towards completeness-oriented tool retrieval for large language models", ("Qu",), others=True,
    year=2024, entry="inproceedings",
    venue="Proceedings of the 33rd ACM International Conference on Information and Knowledge Management",
    pages="1930–1940", eprint="2405.16089")
BM25 = Citation(
    "robertson2009bm25", "The probabilistic relevance framework: BM25 and beyond", ("S. Robertson", "H. Zaragoza"),
    year=2009, entry="book", venue="Now Publishers Inc.", note="Vol. 4")
SBERT = Citation(
    "reimers2019sbert", "Sentence-BERT: Sentence embeddings using Siamese BERT-networks",
    ("N. Reimers", "I. Gurevych"), year=2019, entry="inproceedings",
    venue="Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing and the 9th "
          "International Joint Conference on Natural Language Processing (EMNLP-IJCNLP)",
    pages="3982–3992", eprint="1908.10084")
CONTRIEVER = Citation(
    "izacard2022contriever", "Unsupervised dense information retrieval with contrastive learning",
    ("G. Izacard", "M. Caron", "L. Hosseini", "S. Riedel", "P. Bojanowski", "A. Joulin", "E. Grave"), year=2022,
    entry="article", venue="Transactions on Machine Learning Research", eprint="2112.09118")
MONOBERT = Citation("nogueira2019monobert", "Passage re-ranking with BERT", ("Nogueira", "Cho"), year=2019,
                    venue="arXiv preprint", eprint="1901.04085")
