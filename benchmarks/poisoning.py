"""The poisoning scan on its labelled corpus: recall, false positives, and what a scan costs.

    .venv/bin/python benchmarks/poisoning.py [--rounds 200] [--verbose]

The corpus (`benchmarks/data/poisoning_corpus.json`, docs/security.md says how it was made) holds
malicious definitions modelled on published tool-poisoning examples and benign ones: the shipped
stack's own definitions as its pinned packages list them, and hard negatives written after
reference and widely used servers. A definition counts as flagged when the scan finds anything.
The cost is the scan alone (no memo) over the shipped stack's tools, per 100 tools.

Targets (issue "Trust in what flows through"): recall >= 0.95, at most one benign definition
flagged, none of the shipped stack's, and <= 5 ms per 100 tools.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from toolscore.trust.poison import Finding, scan

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


def run(entries: list[dict[str, Any]]) -> dict[str, list[tuple[dict[str, Any], tuple[Finding, ...]]]]:
    """Every entry with its findings, by label."""
    by_label: dict[str, list[tuple[dict[str, Any], tuple[Finding, ...]]]] = {"malicious": [], "benign": []}
    for entry in entries:
        found = scan(entry["kind"], entry["definition"], others=others_of(entry, entries))
        by_label[entry["label"]].append((entry, found))
    return by_label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="scans of the whole stack for the cost figure")
    parser.add_argument("--verbose", action="store_true", help="print every finding")
    args = parser.parse_args()

    entries = json.loads(CORPUS.read_text(encoding="utf-8"))["entries"]
    by_label = run(entries)
    malicious, benign = by_label["malicious"], by_label["benign"]
    caught = [e for e, f in malicious if f]
    flagged = [(e, f) for e, f in benign if f]
    stack = [(e, f) for e, f in benign if e.get("stack")]
    print(
        f"corpus: {len(entries)} definitions, {len(malicious)} malicious, {len(benign)} benign "
        f"({len(stack)} of them the shipped stack's)"
    )
    print(f"recall: {len(caught)}/{len(malicious)} = {len(caught) / len(malicious):.3f}")
    print(
        f"false positives: {len(flagged)} of {len(benign)} benign; "
        f"shipped stack: {sum(1 for _, f in stack if f)} of {len(stack)}"
    )
    for entry, _ in malicious:
        if entry not in caught:
            print(f"  missed: {entry['id']}")
    for entry, found in flagged:
        print(f"  flagged benign: {entry['id']}: {', '.join(sorted({f.check for f in found}))}")
    checks = Counter(f.check for _, found in malicious for f in {f.check: f for f in found}.values())
    print("checks firing on malicious definitions:", ", ".join(f"{c} {n}" for c, n in sorted(checks.items())))
    if args.verbose:
        for entry, found in malicious + benign:
            for f in found:
                print(f"  {entry['id']}: {f.check} {f.severity} {f.where} {f.excerpt!r}")

    tools = [(e["definition"], others_of(e, entries)) for e in entries if e.get("stack") and e["kind"] == "tool"]
    wall, cpu = [], []
    for _ in range(args.rounds):
        began, began_cpu = time.perf_counter(), time.process_time()
        for definition, others in tools:
            scan("tool", definition, others=others)
        wall.append((time.perf_counter() - began) * 1000 / len(tools) * 100)
        cpu.append((time.process_time() - began_cpu) * 1000 / len(tools) * 100)
    print(
        f"cost per 100 tools: {statistics.median(wall):.2f} ms wall, {statistics.median(cpu):.2f} ms CPU "
        f"(medians of {args.rounds} scans of the shipped stack's {len(tools)} tools; best wall {min(wall):.2f})"
    )


if __name__ == "__main__":
    main()
