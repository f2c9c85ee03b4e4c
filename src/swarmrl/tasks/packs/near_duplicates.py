"""Near-duplicate prompts across collections: MinHash LSH (datasketch) over word 3-grams, checked exactly.

A prompt is lower-cased and cut into word and punctuation tokens; its shingles are the 3-grams of tokens. In a
collection of at least `TEMPLATE_MIN_ROWS` prompts, the shingles present in more than half of them are the
collection's template ("Solve the following problem ...") and are left out — the templates of every indexed
collection and of the collection looked up — so two collections sharing an instruction are not taken for copies
of each other, and a prompt copied into another template is still found; what remains is each prompt's
content. Candidates come from
an LSH index of MinHash signatures (sub-linear in the size of the index), its bands tuned for a similarity
`LSH_MARGIN` below the threshold: a pair right at the threshold becomes a candidate with probability 0.99 (at
the threshold itself the bands would find it about half the time). Each candidate is then confirmed by the exact
Jaccard similarity of the two shingle sets, so no verdict rests on the signatures' sampling error.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datasketch import MinHash

SHINGLE_TOKENS = 3
TEMPLATE_MIN_ROWS = 8
TEMPLATE_SHARE = 0.5
NUM_PERM = 128
LSH_MARGIN = 0.2
_TOKEN = re.compile(r"\w+|[^\w\s]")


def shingles(text: str) -> frozenset[str]:
    tokens = _TOKEN.findall(text.lower())
    if len(tokens) < SHINGLE_TOKENS:
        return frozenset({" ".join(tokens)}) if tokens else frozenset()
    return frozenset(
        " ".join(tokens[i : i + SHINGLE_TOKENS]) for i in range(len(tokens) - SHINGLE_TOKENS + 1)
    )


def template_shingles(sets: Sequence[frozenset[str]]) -> frozenset[str]:
    """The shingles of more than half of a collection's prompts (none for a collection under the minimum)."""
    if len(sets) < TEMPLATE_MIN_ROWS:
        return frozenset()
    counts = Counter(shingle for shingle_set in sets for shingle in shingle_set)
    return frozenset(shingle for shingle, count in counts.items() if count > TEMPLATE_SHARE * len(sets))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


@dataclass(frozen=True)
class Match:
    label: str  # the collection and row of the prompt it duplicates
    similarity: float


class NearDuplicateIndex:
    """Prompts of held-out evals and admitted packs, each collection added whole (its template left out)."""

    def __init__(self, threshold: float) -> None:
        from datasketch import MinHashLSH  # with scipy, a second to import: only where prompts are compared

        self.threshold = threshold
        self._lsh = MinHashLSH(threshold=max(0.05, threshold - LSH_MARGIN), num_perm=NUM_PERM)
        self._sets: dict[str, frozenset[str]] = {}
        self._template: frozenset[str] = frozenset()
        self.collections: list[str] = []

    def __len__(self) -> int:
        return len(self._sets)

    def add(self, collection: str, texts: Sequence[str]) -> None:
        sets = [shingles(text) for text in texts]
        template = template_shingles(sets)
        self._template |= template
        sets = [shingle_set - template for shingle_set in sets]
        with self._lsh.insertion_session() as session:
            for index, (shingle_set, signature) in enumerate(zip(sets, _signatures(sets), strict=True)):
                key = f"{collection}#{index}"
                if shingle_set and key not in self._sets:
                    self._sets[key] = shingle_set
                    session.insert(key, signature)
        self.collections.append(collection)

    def matches(self, texts: Sequence[str]) -> list[Match | None]:
        """For each text (one collection), the most similar indexed prompt at or over the threshold.

        Candidates are looked up twice, by the whole prompt and by its content (its collection's template and
        the indexed ones left out): a copy with the template it was copied with, and a copy in a new one.
        Each is then compared with every template left out of both sides."""
        whole = [shingles(text) for text in texts]
        template = template_shingles(whole) | self._template
        content = [shingle_set - template for shingle_set in whole]
        found: list[Match | None] = []
        for own, lookups in zip(
            content, zip(_signatures(whole), _signatures(content), strict=True), strict=True
        ):
            best: Match | None = None
            keys = {key for signature in lookups for key in self._lsh.query(signature)} if own else set()
            for key in sorted(keys):
                similarity = jaccard(own, self._sets[key] - template)
                if similarity >= self.threshold and (best is None or similarity > best.similarity):
                    best = Match(key, similarity)
            found.append(best)
        return found


def _signatures(sets: Sequence[frozenset[str]]) -> list[MinHash]:
    from datasketch import MinHash

    return MinHash.bulk([[shingle.encode() for shingle in sorted(s)] for s in sets], num_perm=NUM_PERM)
