"""The poisoning scan on its labelled corpus: recall, false positives, and what a scan costs.

    .venv/bin/python benchmarks/poisoning.py [--rounds 200] [--verbose] [--unseal]

The corpus (`benchmarks/data/poisoning_corpus.json`, docs/security.md says how it was made) holds
malicious definitions modelled on published tool-poisoning examples and benign ones: the shipped
stack's own definitions as its pinned packages list them, and hard negatives written after
reference and widely used servers. A definition counts as flagged when the scan finds anything.

The corpus comes in parts (an entry's `set`; `original` where it has none), each reported on its
own. A part whose name begins `sealed` is held out: written before the checks it measures were
changed, and reported in aggregate only (no entry named) unless `--unseal` is given, so that the
checks are not tuned on its misses.

The costs, per 100 of the shipped stack's tools, in CPU time (best and median of the rounds):
the scan alone (no memo); pinning at a first connect (each definition hashed and judged, new
pins saved to a fresh pins.json) and at a restart (pins.json read back, each definition hashed
and judged, nothing to save). Pinning hashes the definition's canonical JSON, which the registry
encodes once per definition for its schema-check memo as well: that encoding is printed apart.

Targets (issue "Trust in what flows through"): recall >= 0.95, at most one benign definition
flagged, none of the shipped stack's, and scan and pin <= 5 ms per 100 tools at connect.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from toolscore.trust.pins import PinBook
from toolscore.trust.poison import Finding, scan
from toolscore.trust.verdict import canonical_json

CORPUS = Path(__file__).parent / "data" / "poisoning_corpus.json"


_STACK_OTHERS: dict[str, frozenset[str]] = {}


def others_of(entry: dict[str, Any], entries: list[dict[str, Any]]) -> frozenset[str]:
    """The other servers' tool names the entry is scanned against: its own list, or for a shipped
    server's definition the shipped stack's other servers' tools (one set per server, as the
    registry passes them)."""
    if entry.get("stack"):
        server = entry["server"]
        if server not in _STACK_OTHERS:
            _STACK_OTHERS[server] = frozenset(
                e["definition"]["name"].lower()
                for e in entries
                if e.get("stack") and e["kind"] == "tool" and e["server"] != server
            )
        return _STACK_OTHERS[server]
    return frozenset(name.lower() for names in entry.get("others", {}).values() for name in names)


Scanned = list[tuple[dict[str, Any], tuple[Finding, ...]]]


def run(entries: list[dict[str, Any]]) -> dict[str, dict[str, Scanned]]:
    """Every entry with its findings, by part (`set`) and label."""
    parts: dict[str, dict[str, Scanned]] = {}
    for entry in entries:
        found = scan(entry["kind"], entry["definition"], others=others_of(entry, entries))
        part = parts.setdefault(entry.get("set", "original"), {"malicious": [], "benign": []})
        part[entry["label"]].append((entry, found))
    return parts


def report(name: str, malicious: Scanned, benign: Scanned, *, detail: bool, verbose: bool) -> None:
    """One part's recall and false positives; with `detail`, the entries missed and flagged."""
    caught = [e for e, f in malicious if f]
    flagged = [(e, f) for e, f in benign if f]
    stack = [(e, f) for e, f in benign if e.get("stack")]
    recall = f"{len(caught)}/{len(malicious)} = {len(caught) / len(malicious):.3f}" if malicious else "-"
    print(
        f"[{name}] {len(malicious)} malicious, {len(benign)} benign"
        + (f" ({len(stack)} of them the shipped stack's)" if stack else "")
        + f": recall {recall}; false positives {len(flagged)} of {len(benign)}"
        + (f" (shipped stack: {sum(1 for _, f in stack if f)} of {len(stack)})" if stack else "")
    )
    checks = Counter(f.check for _, found in malicious for f in {f.check: f for f in found}.values())
    print("  checks firing on malicious definitions:", ", ".join(f"{c} {n}" for c, n in sorted(checks.items())))
    if not detail:
        print("  (sealed: entries not named; --unseal names them)")
        return
    for entry, found in malicious:
        if not found:
            print(f"  missed: {entry['id']}")
    for entry, found in flagged:
        print(f"  flagged benign: {entry['id']}: {', '.join(sorted({f.check for f in found}))}")
    if verbose:
        for entry, found in malicious + benign:
            for f in found:
                print(f"  {entry['id']}: {f.check} {f.severity} {f.where} {f.excerpt!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="scans of the whole stack for the cost figure")
    parser.add_argument("--verbose", action="store_true", help="print every finding")
    parser.add_argument("--unseal", action="store_true", help="name the entries of the sealed parts too")
    args = parser.parse_args()

    entries = json.loads(CORPUS.read_text(encoding="utf-8"))["entries"]
    parts = run(entries)
    print(f"corpus: {len(entries)} definitions in {len(parts)} parts")
    for name, part in parts.items():
        detail = args.unseal or not name.startswith("sealed")
        report(name, part["malicious"], part["benign"], detail=detail, verbose=args.verbose)

    stack = [e for e in entries if e.get("stack") and e["kind"] == "tool"]
    tools = [(e["definition"], others_of(e, entries)) for e in stack]
    named = [(e["server"], e["definition"]["name"], e["definition"]) for e in stack]
    canonical = [canonical_json(definition) for _, _, definition in named]

    def scanning() -> None:
        for definition, others in tools:
            scan("tool", definition, others=others)

    def encoding() -> None:
        for _, _, definition in named:
            canonical_json(definition)

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "pins.json")

        def pinning(fresh: bool) -> None:
            if fresh and os.path.exists(path):
                os.unlink(path)
            book = PinBook(path)
            for (server, name, definition), text in zip(named, canonical, strict=True):
                book.judge(server, name, definition, text)
            book.save()

        costs = {
            "scan": cost(scanning, args.rounds, len(tools)),
            "pin, first connect": cost(lambda: pinning(True), args.rounds, len(tools)),
            "pin, restart": cost(lambda: pinning(False), args.rounds, len(tools)),
            "canonical JSON (shared)": cost(encoding, args.rounds, len(tools)),
        }
    print(f"CPU time per 100 tools, best / median of {args.rounds} rounds over the stack's {len(tools)} tools:")
    for label, (best, median) in costs.items():
        print(f"  {label:24s} {best:6.2f} / {median:6.2f} ms")
    connect = [costs["scan"][i] + costs["pin, first connect"][i] for i in (0, 1)]
    print(f"  {'scan + pin at connect':24s} {connect[0]:6.2f} / {connect[1]:6.2f} ms (target <= 5)")


def cost(work: Any, rounds: int, tools: int) -> tuple[float, float]:
    """(best, median) CPU milliseconds of `work` per 100 tools."""
    spent = []
    for _ in range(rounds):
        began = time.process_time()
        work()
        spent.append((time.process_time() - began) * 1000 / tools * 100)
    return min(spent), statistics.median(spent)


if __name__ == "__main__":
    main()
