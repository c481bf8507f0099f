#!/usr/bin/env python3
"""Writes a seeded random corpus for the parity test: N cases (separated by
"%%%" lines) of atoms chosen to stress the pre-tokenizer regexes, NFC, added
tokens and byte-level BPE: words, contractions in any case, whitespace runs
of several kinds, CR/LF, digits of several scripts, combining marks, CJK,
Hangul jamo, emoji sequences, near-miss and real special tokens.

  parity_random_corpus.py SEED N OUT [--rust-only-atoms-out]

--rust-only-atoms-out leaves out the atoms on which the JavaScript reference's
built-in pre-tokenizers differ from the Rust library (which ours follows):
non-ASCII numeric characters (JavaScript's Digits splits only \\d, Rust's
every char::is_numeric), U+0085 and U+FEFF (the first not \\s, the second \\s
in the GPT-2 regex of JavaScript's ByteLevel; the other way round in
Oniguruma's). Patterns from the file (Split)
are translated to Oniguruma semantics by the reference and need no such care.
"""
import random
import sys
import unicodedata

ATOMS = [
    "the", "The", "THE", "hello", "world", "a", "I", "x", "Zürich", "naïve",
    "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D",
    "'x", "'", "\"", "don't", "I'M", "you'Re",
    " ", " ", " ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n",
    "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u2003", "\u3000",
    "\u2028", "\u0085", "\u200b", "\u202f", "\u180e", "\ufeff", "0x1F",
    "0xdeadBEEF", "\\s",
    "0", "1", "7", "42", "123", "2026", "1234567", "3.14", "-1", "1e9",
    "\u0661\u0662\u0663", "\uff14\uff15", "\u00b2", "\u2155", "\u2167",
    ".", ",", "!", "?", "...", "!!!", "--", "->", "=>", "::", "()", "[]",
    "{}", "<", ">", "</", "/>", "#", "@", "$", "&&", "||", "_", "__init__",
    "\\", "\\n", "`", "~", "^", "*", "+", "=", ";", ":",
    "def", "return", "int", "std::vector<int>", "x+=1;", "if(a){b}",
    "e\u0301", "cafe\u0301", "o\u0308", "A\u030a", "\u0301", "\u0308\u0301",
    "\u1100\u1161\u11a8", "\u1112\u1161\u11ab",
    "\u4e16\u754c", "\u4f60\u597d", "\u4e2d\u6587", "\u4eba", "\u3002",
    "\uff0c", "\u3053\u3093\u306b\u3061\u306f", "\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4", "\u0416\u0438\u0437\u043d\u044c", "\u03b1\u03b2",
    "\u0645\u0631\u062d\u0628\u0627", "\u0928\u092e\u0938\u094d\u0924\u0947",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\U0001f600", "\U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1ef\U0001f1f5",
    "\u2764\ufe0f", "\u2728", "\U0001f9d1\u200d\U0001f4bb", "\u00a9",
    "\u2211", "\u221e", "\u2192", "\u00bd", "\u00df", "\u017f", "\u212a",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
    "<tool_call>", "<|im_start", "im_end|>", "<|", "|>",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "\u2581",
]


def main():
    seed, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    atoms = ATOMS
    if "--rust-only-atoms-out" in sys.argv[4:]:
        atoms = [a for a in ATOMS if not any(
            (unicodedata.category(c).startswith("N") and not c.isascii()) or
            c in "\u0085\ufeff" for c in a)]
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        k = rng.randint(1, 40)
        cases.append("".join(rng.choice(atoms) for _ in range(k)))
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write("\n%%%\n".join(cases) + "\n")


if __name__ == "__main__":
    main()
