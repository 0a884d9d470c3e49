"""English word lists shared by the text rules of the method packages: one stopword list for the
rule-based query decomposer (``retrievers/decompose/cues.py``) and the diagnostic-set builders
(``benchmarks/builders/words.py``), which may not import each other."""

from __future__ import annotations

STOPWORDS = frozenset("""
a about above across after again against all almost alone along already also although always am
among an and another any anybody anyone anything anywhere are around as at be became because
become becomes been before being below beside besides between beyond both but by can cannot
could did do does doing done down during each either else enough etc even ever every few for
from further had has have having he her here hers herself him himself his how however i if in
into is it its itself just least less many may me might more most much must my myself near
neither never no nobody none nor not nothing now of off often on once one only onto or other
others otherwise our ours ourselves out over own per perhaps rather same several shall she
should since so some something sometimes still such than that the their theirs them themselves
then there thereby therefore these they this those though through throughout thus to together
too toward towards under unless until up upon us very via was we well were what whatever when
whenever where whereas whereby wherein whether which while who whoever whole whom whose why will
with within without would yet you your yours yourself yourselves
""".split())
