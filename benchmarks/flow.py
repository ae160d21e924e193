"""The cost of substring provenance (the `flow` rule's quotation check), per call.

    .venv/bin/python benchmarks/flow.py [--rounds 5]

A client's own call is checked against its kept untrusted results: at most 16 of 64 KiB each
(`policy/taint.py`), 1 MiB in all. The figures are the CPU time of one check over that much text
(web-like prose that the arguments do not quote, the worst case: nothing stops the search early)
for arguments of several sizes, and of one over a single 16 KiB page. A plan's check by reference
costs nothing of the kind: labels are joined per reference, never searched.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time

from toolscore.trust.labels import quoted

_WORDS = ["the", "page", "account", "settings", "navigation", "privacy", "search", "results", "about", "contact"]


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS) if rng.random() < 0.7 else "".join(rng.choices(string.ascii_lowercase, k=7))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def arguments(rng: random.Random, chars: int) -> dict[str, str]:
    # Digits and capitals: nothing of it is in the prose, so every text is searched to its end.
    return {"body": "".join(rng.choices(string.digits + "XYZ", k=chars))}


def measure(args: dict[str, str], texts: list[tuple[str, str]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.process_time()
        assert quoted(args, texts) is None
        times.append(time.process_time() - began)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    rng = random.Random(28)
    history = [(prose(rng, 64 * 1024), f"result {n}") for n in range(16)]
    page = [(prose(rng, 16 * 1024), "page")]
    print("arguments  | 1 MiB kept (16 x 64 KiB) | one 16 KiB page")
    for chars in (40, 400, 4000, 40000):
        args = arguments(rng, chars)
        full = measure(args, history, options.rounds)
        one = measure(args, page, options.rounds)
        print(f"{chars:>6} ch  | {full:>10.1f} ms CPU        | {one:>7.2f} ms CPU")


if __name__ == "__main__":
    main()
