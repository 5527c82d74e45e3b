#!/usr/bin/env python3
"""Reference encodings of a BERT (bert-base-uncased-like) WordPiece tokenizer for
tests/tokenizer/wordpiece.rs.

TurboVLA's text encoder is bert-base-uncased, whose tokenizer is `BertTokenizerFast`:
normalizer `BertNormalizer` (clean_text, handle_chinese_chars, strip_accents unset so it
follows lowercase, lowercase), pre-tokenizer `BertPreTokenizer`, model `WordPiece` ("##"
continuation, max_input_chars_per_word 100, unk "[UNK]"), post-processor
`TemplateProcessing` "[CLS] $A [SEP]", and the five special tokens as added tokens. No model
hub is reachable here, so the stand-in vocabulary is laid out like bert-base-uncased's, only
smaller:

  0 [PAD], 1..99 [unused0]..[unused98], 100 [UNK], 101 [CLS], 102 [SEP], 103 [MASK],
  104..998 [unused99]..[unused993], then from 999 the single characters (ASCII punctuation,
  digits, lowercase letters, Latin-1 symbols, Greek, Cyrillic, Hangul jamo, kana, a few CJK
  ideographs, ...), their "##" forms, then word pieces learned by byte-pair merges (as
  `tokenizers`' WordPieceTrainer, but deterministic) on a generated corpus of LIBERO-like
  robot instructions, plain English sentences and English-looking made-up words; 3000
  tokens in all.

The ASCII characters land on bert-base-uncased's ids ("!" 999 .. "~" 1066, so "." is 1012
and "?" 1029): vla.cpp's TurboVLA GGUF layout hard-codes those two (period_token_id,
question_token_id) along with [PAD] 0, [CLS] 101, [SEP] 102, and the TurboVLA fixtures
(tools/golden/turbovla.py) use this vocabulary. build_vocab asserts all of them.

Outputs, in tests/fixtures/tokenizer/bert-wordpiece/:

  vocab.txt                 one token a line, the line number is the id
  tokenizer.json            as transformers' BertTokenizerFast(vocab=..., do_lower_case=True)
                            saves it (compact, as tokenizers writes it)
  tokenizer_config.json     as save_pretrained writes it (do_lower_case, special tokens)
  special_tokens_map.json   as transformers 4.x's save_pretrained writes it
  golden.json               texts; HF's ids with special tokens ("ids") and without
                            ("ids_plain"); the normalizer's output where it changes the
                            text; per variant (cased, accents kept, Chinese characters not
                            isolated), its normalizer and the plain ids where they differ

It also writes src/tokenizer/wordpiece_tables.rs: the Unicode classes `tokenizers`' BERT
normalizer and pre-tokenizer use, found by running every code point through them. They come
from the `unicode_categories` crate, whose tables are older than the Unicode version of
Python, Rust or `regex` (hundreds of marks and punctuation characters differ), so the Rust
side carries the classes `tokenizers` actually has.

Needs transformers and tokenizers (made with transformers 5.5.4, tokenizers 0.22.2); the
corpus is generated, not read, so a rerun with the same versions rewrites the same files.
Run from the repository root:

  /work/venv-lerobot061/bin/python tools/golden/tokenizer_wordpiece.py
"""

import collections
import heapq
import json
import os
import random
import tempfile
import unicodedata

import tokenizers
import transformers
from tokenizers import normalizers, pre_tokenizers
from transformers import BertTokenizerFast
from _golden_json import compact

OUT = os.path.join("tests", "fixtures", "tokenizer", "bert-wordpiece")
UNUSED_BEFORE = 99  # [unused0]..[unused98] at ids 1..99, as bert-base-uncased
UNUSED_AFTER = 895  # [unused99]..[unused993] at ids 104..998, as bert-base-uncased
TRAINED = 1075  # word pieces the trainer is asked for (before removing duplicates): 3000 tokens
# bert-base-uncased's ids that vla.cpp's TurboVLA GGUF layout hard-codes (asserted)
BERT_BASE_UNCASED_IDS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103,
                         "!": 999, ".": 1012, "?": 1029, "~": 1066}


def chars(a, b):
    return [chr(c) for c in range(ord(a), ord(b) + 1)]


def alphabet():
    """The single characters, in code point order (as bert-base-uncased's)."""
    out = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    out += list("¡¢£¤¥¦§¨©ª«¬®¯°±²³´µ¶·¸¹º»¼½¾¿×÷ßæðøþđħıłŋœƒ")
    out += [c for c in chars("α", "ω") if c != "\u03c2"] + ["ς"]
    out += chars("а", "я") + ["ё", "є", "і", "ї"]
    out += list("אבגדהוזחטיכלמנסעפצקרשת")  # Hebrew
    out += list("ابتثجحخدذرزسشصضطظعغفقكلمنهوي")  # Arabic
    out += list("कखगचजटडतदनपबमयरलवशसह")  # Devanagari consonants (no marks: NFD drops them)
    out += list("กขคงจชดตทนบปพมยรลวสหอ")  # Thai
    out += chars("\u1100", "\u1112") + chars("\u1161", "\u1175") + chars("\u11a8", "\u11c2")
    out += list("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん")
    out += list("アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンー")
    out += list("、。「」『』・！？（），：；～")
    out += list("一人大中国日本机器拿起红色的方块上下左右手空飛龍学生")
    out += list("‐–—―‘’‚“”„†‡•…‰′″‹›€™←↑→↓∂∅∈∞∑−√≈≠≤≥⋅■□▲►●★☆♪♭♯")
    return sorted(set(out))


def is_punct(c):
    o = ord(c)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def is_cjk(c):
    o = ord(c)
    return 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF


# LIBERO's task language (the four suites and a sample of LIBERO-90), and a small grammar of
# the same words, to make the trained pieces look like a robot-instruction vocabulary.
LIBERO = [
    "pick up the black bowl between the plate and the ramekin and place it on the plate",
    "pick up the black bowl next to the ramekin and place it on the plate",
    "pick up the black bowl from table center and place it on the plate",
    "pick up the black bowl on the cookie box and place it on the plate",
    "pick up the black bowl in the top drawer of the wooden cabinet and place it on the plate",
    "pick up the black bowl on the ramekin and place it on the plate",
    "pick up the black bowl next to the cookie box and place it on the plate",
    "pick up the black bowl on the stove and place it on the plate",
    "pick up the black bowl next to the plate and place it on the plate",
    "pick up the black bowl on the wooden cabinet and place it on the plate",
    "pick up the alphabet soup and place it in the basket",
    "pick up the cream cheese and place it in the basket",
    "pick up the salad dressing and place it in the basket",
    "pick up the bbq sauce and place it in the basket",
    "pick up the ketchup and place it in the basket",
    "pick up the tomato sauce and place it in the basket",
    "pick up the butter and place it in the basket",
    "pick up the milk and place it in the basket",
    "pick up the chocolate pudding and place it in the basket",
    "pick up the orange juice and place it in the basket",
    "open the middle drawer of the cabinet",
    "put the bowl on the stove",
    "put the wine bottle on top of the cabinet",
    "open the top drawer and put the bowl inside",
    "put the bowl on top of the cabinet",
    "push the plate to the front of the stove",
    "put the cream cheese in the bowl",
    "turn on the stove",
    "put the bowl on the plate",
    "put the wine bottle on the rack",
    "put both the alphabet soup and the tomato sauce in the basket",
    "put both the cream cheese box and the butter in the basket",
    "turn on the stove and put the moka pot on it",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "put the white mug on the left plate and put the yellow and white mug on the right plate",
    "pick up the book and place it in the back compartment of the caddy",
    "put the white mug on the plate and put the chocolate pudding to the right of the plate",
    "put both the alphabet soup and the cream cheese box in the basket",
    "put both moka pots on the stove",
    "put the yellow and white mug in the microwave and close it",
    "KITCHEN SCENE1 open the bottom drawer of the cabinet",
    "KITCHEN SCENE2 put the black bowl at the back on the plate",
    "KITCHEN SCENE3 turn on the stove and put the frying pan on it",
    "KITCHEN SCENE4 close the bottom drawer of the cabinet and open the top drawer",
    "KITCHEN SCENE5 put the ketchup in the top drawer of the cabinet",
    "KITCHEN SCENE6 close the microwave",
    "KITCHEN SCENE7 open the microwave",
    "KITCHEN SCENE8 turn off the stove",
    "KITCHEN SCENE9 put the frying pan on the cabinet shelf",
    "KITCHEN SCENE10 put the butter at the back in the top drawer of the cabinet and close it",
    "LIVING ROOM SCENE1 pick up the alphabet soup and put it in the basket",
    "LIVING ROOM SCENE2 pick up the orange juice and put it in the basket",
    "LIVING ROOM SCENE3 pick up the tomato sauce and put it in the tray",
    "LIVING ROOM SCENE4 stack the left bowl on the right bowl and place them in the tray",
    "LIVING ROOM SCENE5 put the red mug on the left plate",
    "LIVING ROOM SCENE6 put the chocolate pudding to the left of the plate",
    "STUDY SCENE1 pick up the book and place it in the left compartment of the caddy",
    "STUDY SCENE2 pick up the book and place it in the right compartment of the caddy",
    "STUDY SCENE3 pick up the red mug and place it to the right of the caddy",
    "STUDY SCENE4 pick up the book on the right and place it under the cabinet shelf",
]
VERBS = ["pick up", "put", "place", "move", "push", "pull", "open", "close", "grasp", "lift",
         "stack", "rotate", "turn", "slide", "insert", "remove", "wipe", "pour", "fold", "hang"]
COLORS = ["red", "green", "blue", "yellow", "black", "white", "orange", "purple", "pink", "brown", "gray"]
OBJECTS = ["bowl", "plate", "mug", "cup", "cube", "block", "sponge", "towel", "drawer", "cabinet",
           "basket", "bottle", "book", "spoon", "fork", "knife", "pan", "pot", "lid", "box", "tray",
           "banana", "apple", "carrot", "eggplant", "microwave", "stove", "faucet", "door", "handle",
           "knob", "switch", "button", "shelf", "caddy", "ramekin", "ketchup", "butter", "cheese"]
PLACES = ["on the plate", "in the basket", "on the stove", "in the top drawer", "on the shelf",
          "next to the sink", "to the left of the bowl", "to the right of the mug", "inside the box",
          "under the table", "behind the cabinet", "in front of the robot", "on top of the tray"]
PROSE = [
    "The robot arm moves slowly toward the table and stops above the object.",
    "Please make sure the gripper is open before approaching the handle.",
    "What action should the robot take to complete the task?",
    "In this episode, the camera shows a kitchen with a sink, a stove and several bowls.",
    "The policy predicts a chunk of future actions from images and language.",
    "After grasping the mug, lift it a few centimeters and carry it to the tray.",
    "If the drawer is closed, pull the handle gently until it opens.",
    "Language instructions are encoded by a transformer and fused with visual features.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Students learn about history, science, mathematics and music at school.",
    "The weather today is cold and windy, with rain expected in the evening.",
    "She walked into the room, looked around, and sat down by the window.",
    "Numbers such as one, two, three, ten, hundred and thousand appear often.",
    "Machine learning models are trained on large datasets of examples.",
]


ONSETS = ["b", "bl", "br", "c", "ch", "cl", "cr", "d", "dr", "f", "fl", "fr", "g", "gl", "gr", "h",
          "j", "k", "l", "m", "n", "p", "pl", "pr", "qu", "r", "s", "sh", "sk", "sl", "sm", "sn",
          "sp", "st", "str", "sw", "t", "th", "tr", "v", "w", "wh", "y", "z", ""]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "ie", "oa", "oo", "ou", "y"]
CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "nt", "ng", "ck", "st", "rt", "ll", "x"]
SUFFIXES = ["", "", "", "s", "ed", "ing", "er", "ly", "tion", "ment", "able", "ness", "ful", "est"]


def pseudo_words(rng, n):
    """English-looking words from syllables: stems and suffixes for the trainer to share."""
    words = []
    for _ in range(n):
        stem = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(rng.choice([1, 1, 2, 2, 3])))
        words.append(stem + rng.choice(SUFFIXES))
    return words


def corpus():
    rng = random.Random(7)
    lines = LIBERO * 8 + PROSE * 4
    words = pseudo_words(rng, 3000)
    for _ in range(4000):
        k = rng.randint(4, 12)
        # Zipf-like: low indices are drawn far more often.
        lines.append(" ".join(words[min(int(rng.paretovariate(0.8)) - 1, len(words) - 1)] for _ in range(k)))
    for _ in range(3000):
        v, c, o, p = rng.choice(VERBS), rng.choice(COLORS), rng.choice(OBJECTS), rng.choice(PLACES)
        lines.append(f"{v} the {c} {o} {p}")
        if rng.random() < 0.3:
            lines.append(f"then {rng.choice(VERBS)} the {rng.choice(OBJECTS)} and {rng.choice(VERBS)} it")
    return lines


def learn_pieces(lines, n_merges):
    """Word pieces by byte-pair merges, as `tokenizers`' WordPieceTrainer learns them (a word
    starts as its first character and "##" continuations; the most frequent adjacent pair is
    merged), with ties broken by the pair's text: the trainer breaks them by ids it assigns
    in hash-map order, so its output changes from run to run."""
    norm = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    counts = collections.Counter()
    for line in lines:
        counts.update(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)))
    words = sorted((w, c) for w, c in counts.items() if c >= 2)
    segs = [[w[0]] + ["##" + ch for ch in w[1:]] for w, _ in words]
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, (seg, (_, c)) in enumerate(zip(segs, words)):
        for a, b in zip(seg, seg[1:]):
            pairs[a, b] += c
            where[a, b].add(i)
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    learned = []
    while heap and len(learned) < n_merges:
        c, (a, b) = heapq.heappop(heap)
        if -c != pairs[a, b] or c == 0:
            continue
        new = a + b[2:]
        learned.append(new)
        for i in sorted(where.pop((a, b))):
            seg, wc = segs[i], words[i][1]
            for x, y in zip(seg, seg[1:]):
                pairs[x, y] -= wc
            out, j = [], 0
            while j < len(seg):
                if j + 1 < len(seg) and seg[j] == a and seg[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(seg[j])
                    j += 1
            segs[i] = out
            for x, y in zip(out, out[1:]):
                pairs[x, y] += wc
                where[x, y].add(i)
                heapq.heappush(heap, (-pairs[x, y], (x, y)))
        pairs.pop((a, b), None)
    return learned


def build_vocab():
    learned = learn_pieces(corpus(), TRAINED)

    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(UNUSED_BEFORE)]
    vocab += ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [f"[unused{i}]" for i in range(UNUSED_BEFORE, UNUSED_BEFORE + UNUSED_AFTER)]
    singles = alphabet()
    vocab += singles
    vocab += ["##" + c for c in singles if not is_punct(c) and not is_cjk(c)]
    seen = set(vocab)
    known = set(singles)
    for piece in learned:
        body = piece[2:] if piece.startswith("##") else piece
        if piece not in seen and body and all(c in known for c in body):
            vocab.append(piece)
            seen.add(piece)
    for token, id in BERT_BASE_UNCASED_IDS.items():
        assert vocab.index(token) == id, (token, vocab.index(token), id)
    assert len(vocab) == len(set(vocab))
    return vocab


def cases():
    """Instructions, case, accents composed and decomposed, CJK, other scripts, emoji,
    controls, whitespace of every kind, punctuation inside words, numbers, long words,
    words outside the vocabulary, and the special tokens written in the text."""
    return LIBERO + PROSE + [
        "",
        " ",
        "   ",
        "\t",
        "\n",
        "\r\n",
        "a",
        "A",
        ".",
        "##",
        "##ing",
        "Pick up the Black Bowl and PLACE it on the plate.",
        "OPEN THE TOP DRAWER OF THE CABINET",
        "pIcK uP tHe AlPhAbEt SoUp",
        "Café Déjà vu",
        "Cafe\u0301 De\u0301ja\u0300 vu",
        "naïve résumé façade Über straße Æsir Øre Ångström",
        "e\u0301\u0302 stacked marks",
        "\u0301 leading mark and trailing mark\u0301",
        "a\u0301\u0301\u0301\u0301 many marks",
        "İstanbul ı I",
        "ΣΊΣΥΦΟΣ Οδυσσεύς",
        "ǅ ǈ ǋ Ǳ ﬁ ﬂ",
        "ß ẞ ſ",
        "\u00c5 \u212b A\u030a",
        "机器人拿起红色的方块。",
        "龍が空を飛ぶ",
        "中国人学生日本大人",
        "pick中up国the人bowl",
        "日本語のテキスト、です。",
        "한국어 텍스트",
        "\u1100\u1161\u11a8 conjoining jamo",
        "нужно взять кубик и положить его в коробку.",
        "Роботу Нужно ВЗЯТЬ",
        "नमस्ते दुनिया",
        "שלום עולם",
        "مرحبا بالعالم",
        "สวัสดีครับ",
        "Ελληνικά ΐ ΰ",
        "Emoji: 🤖 🙂 ok",
        "👍🏽🇺🇸 and ❤️ and 👩‍👩‍👧",
        "robot🤖arm",
        "#️⃣ keycap and ©️ and ☺︎",
        "controls\x01\x02\x7f\x1f removed",
        "\x01leading control",
        "trailing control\x01",
        "\x00nul\x00in text",
        "\ufffd replacement \ufffd",
        "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom",
        "soft\u00adhyphen",
        "line\u2028separator\u2029paragraph",
        "next\u0085line",
        "\u00a0nbsp\u00a0and\u2009thin\u2002en\u3000ideographic\u205fmath",
        "ogham\u1680space",
        "private\ue000use and \U000f0000 plane 15",
        "unassigned \u0378 \U000e0001 tag",
        "pick  up   the    red\tcube",
        "pick\nup\r\nthe\rred\x0bcube\x0c",
        "tabs\tand\ttabs\t\t",
        "   leading and trailing   ",
        "\n\n\nnewlines\n\n",
        "end.",
        "what?",
        "wow!",
        "e.g. i.e. u.s.a. a.m.",
        "hello?world!how.are,you",
        "don't can't won't it's I'm we'll they've",
        "state-of-the-art well-known",
        "a+b=c; x->y; ~!@#$%^&*",
        "punctuation!!! ??? ... --- (parens) [brackets] {braces}",
        "«quotes» „low“ ‚single‘ 'ascii' \"double\" `back`",
        "em—dash en–dash minus−sign",
        "$100 €50 £20 ¥1000 5% 3° ±2",
        "x² y³ ½ ¼ ¾ × ÷",
        "¡Hola! ¿Qué tal?",
        "path/to/file_name.txt and C:\\dir\\file",
        "user@example.com https://example.com/a?b=c&d=e",
        "<tag> </tag> <s> </s>",
        "move 25 cm, then 4.5 cm",
        "12345 67890 3.14159 1,000,000 10^6 1e-5",
        "0 1 2 3 4 5 6 7 8 9 10 11 100 2024",
        "move the arm 25cm to the left and rotate 90deg",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "[PAD]",
        "[UNK]",
        "[cls]",
        "[Mask]",
        "pick [MASK] up",
        "pick[MASK]up",
        "[CLS] pick up the bowl [SEP]",
        "[CLS][SEP][MASK][PAD][UNK]",
        "[unused0] [unused1] [unused99]",
        "[ MASK ]",
        "[MASK",
        "MASK]",
        "the the the the the",
        "a" * 99,
        "a" * 100,
        "a" * 101,
        "b" * 100 + " ok",
        "b" * 101 + " ok",
        "é" * 100,
        "é" * 101,
        "e\u0301" * 60,
        "中" * 150,
        "x" * 99 + "!" + "y" * 99,
        "pickupthereddrawerandcloseit" * 5,
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "zzzzqqqqxxxxjjjj",
        "qwxz vbnm kjhg",
        "ramekins caddies microwaves eggplants",
        "unpickable re-stack restacking",
        "Ｆｕｌｌ ｗｉｄｔｈ ｔｅｘｔ １２３",
        "ｶﾀｶﾅ half-width",
        "① ② Ⅻ ㎏ ™ №",
        "𝐀𝐁𝐂 bold math",
        "a\u0000b\u0000c",
        "\u3002\uff0c\uff01",
        "mixed 中文 and English 한국어 and русский",
    ]


def random_texts(vocab, n=250, seed=11):
    """Random concatenations of vocabulary pieces (with and without "##"), case changes,
    whitespace of every kind, punctuation, accents, controls, CJK and emoji."""
    rng = random.Random(seed)
    pieces = sorted(t for t in vocab if not t.startswith("[unused")) + [
        " ", "  ", "\n", "\t", "\r", "\u3000", "\u00a0", "\x01", "\x00", "\u200b", "\ufffd",
        "é", "e\u0301", "\u0301", "É", "Ü", "ß", "İ", "Σ", "中", "国", "🤖", "👍🏽", "한",
        ".", "?", "!", ",", "'", "-", "0", "12", "[MASK]", "[CLS]", "[SEP]", "[UNK]", "##",
    ]
    texts = []
    for _ in range(n):
        parts = [rng.choice(pieces) for _ in range(rng.randint(1, 14))]
        parts = [p.upper() if rng.random() < 0.15 else p for p in parts]
        sep = rng.choice(["", " ", " ", " "])
        texts.append(sep.join(parts))
    return texts


VARIANTS = {
    "cased": dict(lowercase=False),
    "keep_accents": dict(lowercase=True, strip_accents=False),
    "strip_cased": dict(lowercase=False, strip_accents=True),
    "no_chinese": dict(lowercase=True, handle_chinese_chars=False),
    "no_clean": dict(lowercase=True, clean_text=False),
}


TABLES = os.path.join("src", "tokenizer", "wordpiece_tables.rs")


def ranges(codes):
    out = []
    for c in sorted(codes):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def probe_tables():
    """(removed, marks, punctuation): the code points BertNormalizer's clean_text drops
    (NUL, U+FFFD and `unicode_categories`' "other": Cc, Cf, Co, Cs, but \\t \\n \\r), those its
    strip_accents drops after NFD (nonspacing marks, Mn), and the non-ASCII ones
    BertPreTokenizer isolates (punctuation, P*)."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    pre = pre_tokenizers.BertPreTokenizer()
    removed, marks, punct = set(), set(), set()
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        if clean.normalize_str(ch) == "":
            removed.add(c)
        if strip.normalize_str(ch) == "":
            marks.add(c)
        if c >= 0x80 and not ch.isspace() and len(pre.pre_tokenize_str("a" + ch + "b")) == 3:
            punct.add(c)
    return ranges(removed), ranges(marks), ranges(punct)


def write_tables():
    removed, marks, punct = probe_tables()

    def table(name, doc, rs):
        items = [f"(0x{a:04X}, 0x{b:04X})," for a, b in rs]
        lines = [" ".join(items[i : i + 4]) for i in range(0, len(items), 4)]
        body = "\n".join("    " + l for l in lines)
        return f"{doc}\n#[rustfmt::skip]\npub(super) const {name}: &[(u32, u32)] = &[\n{body}\n];\n"

    text = (
        "//! Generated by tools/golden/tokenizer_wordpiece.py from `tokenizers` "
        f"{tokenizers.__version__}: do not edit.\n"
        "//! The Unicode classes of `tokenizers`' BERT normalizer and pre-tokenizer, as inclusive\n"
        "//! code point ranges, sorted: those of the `unicode_categories` crate it uses, older\n"
        "//! than Rust's and `regex`'s (see wordpiece.rs).\n\n"
        + table("REMOVED", "/// Dropped by `clean_text`: NUL, U+FFFD, Cc, Cf, Co but tab, LF and CR.", removed)
        + "\n"
        + table("MARKS", "/// Dropped by `strip_accents` after NFD: nonspacing marks (Mn).", marks)
        + "\n"
        + table("PUNCTUATION", "/// Non-ASCII punctuation (P*), each isolated by the pre-tokenizer.", punct)
    )
    with open(TABLES, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"tables: {len(removed)} + {len(marks)} + {len(punct)} ranges -> {TABLES}")


def main():
    vocab = build_vocab()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    fast = BertTokenizerFast(
        vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True, model_max_length=512
    )
    with tempfile.TemporaryDirectory() as dir:
        fast.save_pretrained(dir)
        saved = sorted(os.listdir(dir))
        with open(os.path.join(dir, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    print("save_pretrained wrote", saved)
    hf = fast.backend_tokenizer
    with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(hf.to_str())
    # transformers 5 leaves vocab.txt and special_tokens_map.json out; 4.x wrote both, and
    # checkpoints on the hub (bert-base-uncased's among them) carry them.
    config.setdefault("do_lower_case", True)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")
    specials = {k: f"[{k[:-6].upper()}]" for k in ["cls_token", "mask_token", "pad_token", "sep_token", "unk_token"]}
    with open(os.path.join(OUT, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(specials, f, indent=2)
        f.write("\n")

    spec = json.loads(hf.to_str())
    assert spec["model"]["type"] == "WordPiece" and spec["model"]["max_input_chars_per_word"] == 100
    texts = cases() + random_texts(vocab)
    ids = [hf.encode(t).ids for t in texts]
    plain = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    norm = hf.normalizer
    golden = {
        "generator": (
            f"tools/golden/tokenizer_wordpiece.py, transformers {transformers.__version__}, "
            f"tokenizers {tokenizers.__version__}"
        ),
        "texts": texts,
        "ids": ids,
        "ids_plain": plain,
        # Index -> the BertNormalizer's output, where it differs from the text.
        "normalized": [[i, norm.normalize_str(t)] for i, t in enumerate(texts) if norm.normalize_str(t) != t],
    }
    unk = vocab.index("[UNK]")
    print(f"{sum(unk in x for x in plain)} of {len(texts)} texts have [UNK]")
    for name, kw in VARIANTS.items():
        j = dict(spec, normalizer=json.loads(normalizers.BertNormalizer(**kw).__getstate__()))
        v = tokenizers.Tokenizer.from_str(json.dumps(j))
        vids = [v.encode(t, add_special_tokens=False).ids for t in texts]
        diff = [[i, x] for i, (x, y) in enumerate(zip(vids, plain)) if x != y]
        golden[f"variant_{name}"] = j["normalizer"]
        golden[f"variant_{name}_ids"] = diff
        print(f"variant {name}: {len(diff)} texts encode differently")
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        f.write(compact(golden))
    print(f"vocab {len(vocab)}, {len(texts)} texts -> {OUT}")
    write_tables()


if __name__ == "__main__":
    main()
