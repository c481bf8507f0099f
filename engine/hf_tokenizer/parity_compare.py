#!/usr/bin/env python3
"""Compares the parity test's two JSON files (ours, the reference's): per
case, identical ids, decoded text and decoded text without special tokens.
Prints each difference and a closing 'N passed, N failed' line."""
import json
import sys


def main():
    ours = json.load(open(sys.argv[1], encoding="utf-8"))
    ref = json.load(open(sys.argv[2], encoding="utf-8"))
    if len(ours) != len(ref):
        print(f"case count differs: ours {len(ours)}, reference {len(ref)}")
        return 1
    passed = failed = 0
    for i, (a, b) in enumerate(zip(ours, ref)):
        problems = []
        if a["text"] != b["text"]:
            problems.append("the corpus was split differently")
        for key in ("ids", "decoded", "decoded_skip"):
            if a[key] != b[key]:
                problems.append(f"{key}: ours {a[key]!r}\n    reference {b[key]!r}")
        if b["decoded"] != b["text"]:
            # Not a failure: NFC normalization changes such a text.
            print(f"note: case {i}: decode(encode(text)) != text for the "
                  "reference too (NFC)")
        if problems:
            failed += 1
            print(f"case {i} {a['text'][:60]!r}:")
            for p in problems:
                print("  " + p)
        else:
            passed += 1
    tokens = sum(len(c["ids"]) for c in ours)
    print(f"parity: {len(ours)} cases, {tokens} tokens")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
