"""Deterministic synthetic text: the tokenizer's training corpus and the load generator's prompts.

No text can be downloaded on the machines this runs on, and a fixed text would let a configuration be tuned to
it. So text is *generated*: a lexicon of pseudo-words built from syllables, and sentences drawn from it with a
Zipf-like word frequency (so BPE finds frequent pieces to merge, as on natural text). Everything is driven by
``random.Random(seed)``, whose generator (Mersenne Twister, ``random()``, ``randrange``) is stable across
Python versions: the same seed gives the same text everywhere.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

_ONSETS = ("", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "cr", "dr", "fl", "gr", "pl", "pr", "sk", "sl", "sp", "st", "str", "th", "tr", "ch", "sh")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "ou", "oo", "y")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "rt", "x")
_PUNCT = (".", ".", ".", "?", "!", ";")

#: the lexicon of every text, built once from this seed (prompts differ by the seed of their sentences)
LEXICON_SEED = 0x5EED


@dataclass(frozen=True)
class Lexicon:
    words: tuple[str, ...]
    cumulative: tuple[float, ...]  # Zipf weights, cumulative (for Random.choices)

    @classmethod
    def build(cls, seed: int = LEXICON_SEED, size: int = 4000) -> "Lexicon":
        rng = random.Random(seed)
        seen: set[str] = set()
        words: list[str] = []
        while len(words) < size:
            n_syll = 1 + min(3, int(rng.expovariate(1.3)))
            w = "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(n_syll))
            if w not in seen:
                seen.add(w)
                words.append(w)
        total = 0.0
        cum = []
        for rank in range(1, size + 1):
            total += 1.0 / rank ** 1.07
            cum.append(total)
        return cls(tuple(words), tuple(cum))


@lru_cache(maxsize=4)
def lexicon(seed: int = LEXICON_SEED) -> Lexicon:
    return Lexicon.build(seed)


def sentence(rng: random.Random, lex: Lexicon) -> str:
    n = 4 + int(rng.expovariate(1 / 9))
    words = rng.choices(lex.words, cum_weights=lex.cumulative, k=n)
    if rng.random() < 0.15:
        words[rng.randrange(n)] = str(rng.randrange(10_000))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(_PUNCT)


def paragraph(rng: random.Random, n_words: int, lex: Lexicon | None = None) -> str:
    """About ``n_words`` words of sentences (never fewer)."""
    lex = lex or lexicon()
    out: list[str] = []
    count = 0
    while count < n_words:
        s = sentence(rng, lex)
        out.append(s)
        count += s.count(" ") + 1
    return " ".join(out)


def corpus(seed: int, n_chars: int) -> list[str]:
    """Training corpus: paragraphs totalling at least ``n_chars`` characters."""
    rng = random.Random(seed)
    lex = lexicon()
    out: list[str] = []
    total = 0
    while total < n_chars:
        p = paragraph(rng, 40 + rng.randrange(120), lex)
        out.append(p)
        total += len(p) + 1
    return out
