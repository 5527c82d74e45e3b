#!/usr/bin/env python3
"""Reference encodings of a T5-style SentencePiece Unigram tokenizer for tests/tokenizer/t5.rs.

Octo's language encoder is T5-base, whose tokenizer is a SentencePiece Unigram model with
the `nmt_nfkc` normalization, converted by transformers (`T5Converter`) into a
`tokenizer.json`: normalizer `Precompiled(charsmap)` then `Strip(right)` and
`Replace(" {2,}", "▁")`, pre-tokenizer `Metaspace`, model `Unigram`, post-processor
`$A </s>`, and `<extra_id_N>` sentinels as added tokens. The stand-in is made the same way,
only smaller:

1. The `nmt_nfkc` rules are read out of the charsmap SentencePiece compiles (a darts-clone
   trie: every key and its replacement), and a subset is kept (controls, whitespace,
   Latin-1 and Latin Extended with their combining sequences, general punctuation, super-
   and subscripts, letterlike and number forms, enclosed alphanumerics, ligatures,
   full-width forms, Hangul compatibility jamo, ...), so the fixture's charsmap stays small
   (the full one is 240 KB) yet is built by SentencePiece's own compiler from its own rules.
2. SentencePiece trains a Unigram model with those rules as `normalization_rule_tsv`
   (pad 0, eos 1, unk 2, no bos, as T5's) on a few hundred varied sentences; character
   coverage below 1, so rare characters are left out and become `<unk>`.
3. transformers' T5TokenizerFast converts it (add_prefix_space=True, legacy: prepend scheme
   `always`, as t5-base's), with 20 `<extra_id_N>` sentinels.
4. Hugging Face `tokenizers` encodes ~150 chosen inputs and 250 random strings, with the
   converted tokenizer.json and with the normalizer / pre-tokenizer variants older
   conversions wrote (files on the hub as old as t5-base's may hold those).

Outputs, in tests/fixtures/tokenizer/t5-unigram/:

  tokenizer.json  the converted tokenizer (compact, as tokenizers writes it)
  golden.json     texts; HF's ids for each; the Precompiled normalizer's output where it
                  changes the text; per variant, its normalizer (the charsmap left out:
                  the tokenizer.json's), pre-tokenizer and any pieces appended to the
                  vocabulary, and the ids where they differ from the converted tokenizer's

Needs sentencepiece, protobuf, transformers 4.x (its slow-to-fast conversion; made with
4.57.6) and tokenizers. Run from the repository root:

  python3 -m venv /tmp/venv-t5
  /tmp/venv-t5/bin/pip install sentencepiece protobuf "transformers<5" tokenizers
  /tmp/venv-t5/bin/python tools/golden/tokenizer_t5.py

Training is deterministic for a fixed corpus and version, but the committed files are the
reference: rerun only to extend the cases, and commit both outputs together.

`--all-rules` keeps every nmt_nfkc rule (T5's own normalization; a 240 KB charsmap, 320 KB
of base64): a one-off check of the Rust side against the full trie, not to be committed.
"""

import base64
import json
import os
import random
import struct
import tempfile

import sys

import sentencepiece as spm
import tokenizers
import transformers
from sentencepiece import sentencepiece_model_pb2
from transformers import T5TokenizerFast
from _golden_json import compact

OUT = os.path.join("tests", "fixtures", "tokenizer", "t5-unigram")
ALL_RULES = "--all-rules" in sys.argv[1:]
VOCAB_SIZE = 700
EXTRA_IDS = 20

# Code point ranges whose nmt_nfkc rules the fixture keeps (a key is kept when all its
# characters are in them).
KEEP = [
    (0x0000, 0x024F),  # controls, Latin-1, Latin Extended-A/B
    (0x02B0, 0x036F),  # spacing modifiers, combining diacritics
    (0x0370, 0x03FF),  # Greek (tonos, final forms)
    (0x061C, 0x061C),  # Arabic letter mark (a space)
    (0x1680, 0x1680),  # Ogham space
    (0x1E00, 0x1EFF),  # Latin Extended Additional
    (0x2000, 0x218F),  # spaces, punctuation, super/subscripts, letterlike, number forms
    (0x2460, 0x24FF),  # enclosed alphanumerics
    (0x2581, 0x2581),  # "▁" itself (a space)
    (0x3000, 0x303F),  # CJK symbols (ideographic space)
    (0x3380, 0x33FF),  # CJK compatibility (units)
    (0xFB00, 0xFB06),  # Latin ligatures
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFEFF, 0xFEFF),  # BOM (a space)
    (0xFF00, 0xFF9F),  # full-width ASCII, half-width katakana
    (0xFFFD, 0xFFFD),  # replacement character (a space)
    (0x1D400, 0x1D433),  # mathematical bold letters
    (0x1F100, 0x1F1FF),  # enclosed alphanumeric supplement
]

BASE = [
    "pick up the red cube and place it in the blue bowl",
    "Pick up the green block, then put it on the left tray.",
    "open the top drawer and put the sponge inside",
    "close the microwave door; turn the knob to 3 minutes",
    "stack the cups: red on blue, blue on green",
    "move the arm 25 cm to the right and lower the gripper by 4.5 cm",
    "The robot should grasp the handle, rotate 90 degrees, and release.",
    "I'm sure it's fine, don't worry: we'll see what they've done.",
    "wipe the table with the towel, then fold the towel in half",
    "push the button twice and wait for the green light",
    "Café, naïve, résumé, façade, déjà vu. Über straße! Æsir Øre",
    "Ｆｕｌｌ ｗｉｄｔｈ ｔｅｘｔ １２３ and ﬁne ﬂour, ①②③ Ⅻ ㎏ ™",
    "Роботу нужно взять кубик и положить его в коробку.",
    "Temperature: 21.5°C, humidity 40%, pressure 1013 hPa",
    "put the spoon in the cup x² and H₂O ½ cup",
]
OBJECTS = ["red cube", "blue bowl", "green block", "yellow cup", "sponge", "towel", "drawer", "banana"]
VERBS = ["pick up", "put down", "push", "open", "close", "grasp", "lift", "move"]


def corpus():
    """The base sentences, robot instructions from a small grammar, and English prose: the
    docstrings of a few standard library modules (any Python 3 has them; the committed
    fixture, not a rerun, is the reference)."""
    lines = list(BASE) * 6
    import argparse, collections, difflib, json as json_, textwrap, unittest
    for mod in [argparse, collections, difflib, json_, textwrap, unittest]:
        for obj in [mod] + [getattr(mod, n) for n in sorted(dir(mod)) if not n.startswith("_")]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str):
                lines.extend(l.strip() for l in doc.splitlines() if len(l.strip()) > 20)
    for i in range(200):
        verb = VERBS[i % len(VERBS)]
        obj = OBJECTS[(i * 3) % len(OBJECTS)]
        lines.append(f"{verb} the {obj} and place it next to the {OBJECTS[i % len(OBJECTS)]}.")
        lines.append(f"In: What action should the robot take to {verb} the {obj}?")
    return lines


def charsmap_rules(charsmap):
    """Every (key, replacement) of a compiled charsmap: u32 trie size, darts-clone units, then
    the NUL-terminated replacements the leaves point into."""
    n = struct.unpack("<I", charsmap[:4])[0]
    units = struct.unpack("<%dI" % (n // 4), charsmap[4 : 4 + n])
    strings = charsmap[4 + n :]

    def offset(u):
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    rules = {}
    stack = [(0, b"")]
    while stack:
        pos, key = stack.pop()
        base = pos ^ offset(units[pos])
        for c in range(1, 256):
            child = base ^ c
            if child >= len(units) or units[child] & ((1 << 31) | 0xFF) != c:
                continue
            unit = units[child]
            if (unit >> 8) & 1:
                v = units[child ^ offset(unit)] & ((1 << 31) - 1)
                rules[key + bytes([c])] = strings[v : strings.index(b"\0", v)]
            stack.append((child, key + bytes([c])))
    return {k.decode(): v.decode() for k, v in rules.items()}


def nmt_nfkc_subset(dir):
    """nmt_nfkc's rules (compiled by SentencePiece for a throwaway model), the kept subset
    as a normalization_rule_tsv file."""
    m = os.path.join(dir, "probe")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_prefix=m, vocab_size=300, hard_vocab_limit=False, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, num_threads=1,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    with open(m + ".model", "rb") as f:
        proto.ParseFromString(f.read())
    assert proto.normalizer_spec.name == "nmt_nfkc"
    rules = charsmap_rules(proto.normalizer_spec.precompiled_charsmap)
    kept = {
        k: v for k, v in rules.items()
        if ALL_RULES or all(any(lo <= ord(c) <= hi for lo, hi in KEEP) for c in k)
    }
    path = os.path.join(dir, "rules.tsv")

    def hexes(s):
        return " ".join("%04X" % ord(c) for c in s)

    with open(path, "w", encoding="utf-8") as f:
        for k, v in sorted(kept.items()):
            f.write(f"{hexes(k)}\t{hexes(v)}\n")
    print(f"nmt_nfkc: {len(rules)} rules, {len(kept)} kept")
    return path


def train(dir):
    rules = nmt_nfkc_subset(dir)
    prefix = os.path.join(dir, "spiece")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_prefix=prefix,
        model_type="unigram",
        vocab_size=VOCAB_SIZE,
        character_coverage=0.995,
        normalization_rule_tsv=rules,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return prefix + ".model"


def cases():
    """Instructions, whitespace in every position and of every kind, accents composed and
    decomposed, characters NFKC changes, graphemes whose first character the charsmap maps
    (`tokenizers` then replaces the whole grapheme), emoji, characters outside the
    vocabulary, added tokens, and long words."""
    return BASE + [
        "",
        " ",
        "  ",
        "\t",
        "\n",
        "\u3000",
        "a",
        "A",
        "pick up the red cube",
        "pick up the red cube ",
        "pick up the red cube  ",
        " pick up the red cube",
        "  pick up the red cube",
        "pick  up   the    red\tcube",
        "pick\nup\r\nthe\rred\x0bcube\x0c",
        "tabs\tand\ttabs\t\t",
        "   leading and trailing   ",
        "a  b   c    d",
        "\u00a0nbsp\u00a0and\u2009thin\u2002en\u3000ideographic\u205fmath",
        "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom",
        "line\u2028separator\u2029paragraph",
        "next\u0085line and trailing next line\u0085",
        "\u0085 leading next line",
        "ogham\u1680space and arabic\u061cmark",
        "controls\x01\x02\x7f\x1f removed",
        "\x01leading control",
        "trailing control\x01",
        "\x00nul\x00in text",
        "a literal ▁ and ▁▁ underline",
        "▁leading meta",
        "trailing meta▁",
        "Café naïve résumé",
        "Cafe\u0301 nai\u0308ve re\u0301sume\u0301",
        "e\u0301\u0302 stacked marks",
        "o\u0308\u0304\u0301 three marks",
        "ｅ\u0301 full-width base with a mark",
        "Ａ\u030a full-width A ring",
        "a\u0301\u0301\u0301\u0301 many marks",
        "x\u0301 y\u0308 q\u0303",
        "\u0301 leading mark",
        "Ｈｅｌｌｏ， Ｗｏｒｌｄ！",
        "１２３４５ ６７８９０",
        "ｶﾀｶﾅ half-width katakana",
        "ﬁnd the ﬂoor ﬀ ﬃ ﬄ ﬅ ﬆ",
        "Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅻ ½ ⅓ ¼ ¾",
        "① ② ⑳ ⒜ ⒝ Ⓐ ⓩ 🄐 🅐",
        "x² y³ z⁴ H₂O CO₂",
        "™ ℠ ℃ ℉ № ℡ Å K",
        "㎏ ㎞ ㎜ ㏄ ㍱",
        "…‥ ‼ ⁇ ⁈ ⁉",
        "\u2024\u2025\u2026",
        "¨ ´ ¸ ˘ ˙ ˚ ˛ ˜ ˝",
        "𝐀𝐁𝐂 𝐚𝐛𝐜 bold math",
        "ㄱ ㅏ ㄴ ㅗ compatibility jamo",
        "ﾊﾝｶｸ ｶﾞｷﾞ half-width voiced",
        "한국어 텍스트",
        "\u1100\u1161\u11a8 conjoining jamo",
        "机器人拿起红色的方块。",
        "龍が空を飛ぶ",
        "नमस्ते दुनिया",
        "Ελληνικά ΐ ΰ",
        "Emoji: 🤖 🙂 ok",
        "👍🏽🇺🇸 and ❤️ and 👩‍👩‍👧",
        "#️⃣ keycap and ©️ and ☺︎",
        "\r\n",
        "a\r\nb",
        "a\n\rb",
        "a\r\n\r\nb",
        "12345 67890",
        "move 25 cm, then 4.5 cm",
        "1,000,000 and 10^6",
        "I'm sure it's fine, don't you think? We've seen it.",
        "punctuation!!! ??? ... --- (parens) [brackets] {braces}",
        "a+b=c; x->y; ~!@#$%^&*",
        "«quotes» „low“ ‚single‘ 'ascii' \"double\"",
        "em—dash en–dash minus−sign",
        "<pad>",
        "</s>",
        "<unk>",
        "<extra_id_0>",
        "<extra_id_0> pick up <extra_id_1>",
        "pick<extra_id_0>up",
        "pick <extra_id_0>  up  <extra_id_19> ",
        "<extra_id_19><extra_id_0></s><pad><unk>",
        "<extra_id_1> ",
        " <extra_id_1>",
        "<extra_id_2>\x01",
        "<extra_id_2>\x01 a",
        "<extra_id_20> <extra_id_> <extra_id_1",
        "＜extra_id_0＞ full-width brackets",
        "＜/s＞ and ＜pad＞",
        "<s> and </S> and <UNK>",
        "the the the the the",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "pickupthereddrawerandcloseit" * 20,
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "zzzzqqqqxxxxjjjj",
        "ǅ ǈ ǋ Ǳ",
        "ﾟﾞ ｰ ･",
        "Ａ\u0300 Ａ\u0301",
        "A\u0300\u0300",
        "\u00c5 \u212b A\u030a",
        "ß ẞ ſ",
        "İ ı",
        "ⓐⓑⓒ and ⑴⑵⑶",
        "\ufffd replacement",
        "tab\tthen  double  spaces\n\nand newlines",
        "end with newline\n",
        "end with spaces and tab \t ",
    ]


def random_texts(vocab, n=250, seed=11):
    """Random concatenations of vocabulary pieces, whitespace of every kind, added tokens,
    characters the charsmap changes (alone and as graphemes), and characters outside the
    vocabulary."""
    rng = random.Random(seed)
    pieces = sorted(t for t in vocab if not t.startswith("<")) + [
        " ", "  ", "   ", "\n", "\t", "\r", "\r\n", "\u3000", "\u00a0", "\x01", "\u200b", "▁",
        "é", "e\u0301", "\u0301", "\u0308", "ｅ", "Ａ", "１", "ﬁ", "①", "²", "™", "㎏",
        "中", "🤖", "👍🏽", "ß", "0", "12", "<pad>", "</s>", "<unk>", "<extra_id_0>",
        "<extra_id_7>", "<", ">", "ㄱ", "\u1100\u1161",
    ]
    texts = []
    for _ in range(n):
        parts = (rng.choice(pieces) for _ in range(rng.randint(1, 16)))
        texts.append("".join(p.replace("▁", " " if rng.random() < 0.85 else "▁") for p in parts))
    return texts


# Pieces with "▁" inside, added to the vocabulary for the `no_split` variant (a model
# trained without splitting at whitespace has such pieces; they show the split's effect).
NO_SPLIT_PIECES = [["e▁", -2.0], ["▁the▁", -1.0], ["k▁u", -1.5], ["d▁c", -1.0], ["▁▁", -0.5]]


def variants(hf):
    """The normalizer / pre-tokenizer pairs other T5 conversions wrote, on the same model
    (`no_split`: with NO_SPLIT_PIECES added)."""
    n = json.loads(hf.to_str())["normalizer"]
    precompiled = n["normalizers"][0]
    assert precompiled["type"] == "Precompiled"
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    collapse_space = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
    return {
        # transformers 3.x / early 4.x: WhitespaceSplit before Metaspace.
        "whitespace_split": (
            precompiled,
            {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"},
                {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True},
            ]},
        ),
        # transformers 4.x before the Strip.
        "collapse_space": (
            {"type": "Sequence", "normalizers": [precompiled, collapse_space]},
            {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True},
        ),
        # Without the dummy prefix, and without splitting at "▁".
        "never": (n, dict(metaspace, prepend_scheme="never")),
        "no_split": (n, dict(metaspace, split=False)),
        # A SentencePiece model without normalization rules: no Precompiled.
        "no_charsmap": (
            {"type": "Sequence", "normalizers": n["normalizers"][1:]},
            metaspace,
        ),
    }


def without_charsmap(normalizer):
    if normalizer["type"] == "Precompiled":
        return {"type": "Precompiled"}
    if normalizer["type"] == "Sequence":
        return dict(normalizer, normalizers=[without_charsmap(n) for n in normalizer["normalizers"]])
    return normalizer


def main():
    with tempfile.TemporaryDirectory() as dir:
        model = train(dir)
        sp = spm.SentencePieceProcessor(model_file=model)
        fast = T5TokenizerFast(vocab_file=model, extra_ids=EXTRA_IDS, add_prefix_space=True)
        hf = fast.backend_tokenizer
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(hf.to_str())
    spec = json.loads(hf.to_str())
    assert spec["pre_tokenizer"]["prepend_scheme"] == "always", spec["pre_tokenizer"]

    texts = cases() + random_texts(hf.get_vocab())
    ids = [hf.encode(t).ids for t in texts]
    precompiled = tokenizers.normalizers.Precompiled(
        base64.b64decode(spec["normalizer"]["normalizers"][0]["precompiled_charsmap"])
    )
    golden = {
        "generator": (
            f"tools/golden/tokenizer_t5.py, sentencepiece {spm.__version__}, "
            f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}"
        ),
        "texts": texts,
        "ids": ids,
        # Index -> the Precompiled normalizer's output, where it differs from the text.
        "precompiled": [
            [i, precompiled.normalize_str(t)]
            for i, t in enumerate(texts)
            if precompiled.normalize_str(t) != t
        ],
    }
    unk = 2
    print(f"{sum(unk in x for x in ids)} of {len(texts)} texts have <unk>")
    for name, (normalizer, pre) in variants(hf).items():
        j = dict(spec, normalizer=normalizer, pre_tokenizer=pre)
        if name == "no_split":
            j["model"] = dict(j["model"], vocab=j["model"]["vocab"] + NO_SPLIT_PIECES)
        v = tokenizers.Tokenizer.from_str(json.dumps(j))
        vids = [v.encode(t).ids for t in texts]
        diff = [[i, x] for i, (x, y) in enumerate(zip(vids, ids)) if x != y]
        # The test puts the tokenizer.json's charsmap back into {"type": "Precompiled"}.
        golden[f"variant_{name}"] = {"normalizer": without_charsmap(normalizer), "pre_tokenizer": pre}
        if name == "no_split":
            golden[f"variant_{name}"]["extra_pieces"] = NO_SPLIT_PIECES
        golden[f"variant_{name}_ids"] = diff
        print(f"variant {name}: {len(diff)} texts encode differently")
    sp_differ = sum(sp.encode(t) + [1] != x for t, x in zip(texts, ids))
    print(f"sentencepiece itself differs from tokenizers on {sp_differ} texts")
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        f.write(compact(golden))
    print(f"vocab {hf.get_vocab_size()}, {len(texts)} texts -> {OUT}")


if __name__ == "__main__":
    main()
