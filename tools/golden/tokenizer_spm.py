#!/usr/bin/env python3
"""Reference encodings of a Gemma-style SentencePiece BPE for tests/tokenizer.rs.

pi0 and pi0.5 tokenize with PaliGemma's tokenizer ("google/paligemma-3b-pt-224", a Gemma
SentencePiece BPE). Its tokenizer.json is what transformers' GemmaConverter makes from the
SentencePiece model, so the stand-in is made the same way, only smaller:

1. SentencePiece trains a BPE model with Gemma's trainer options (byte_fallback,
   split_digits, no dummy prefix, whitespace kept as is, whitespace-only pieces allowed;
   <pad>=0 <eos>=1 <bos>=2 <unk>=3; a few user-defined pieces, as Gemma has for newline
   and space runs and HTML tags) on a few hundred varied sentences. Character coverage is
   below 1, so rare characters are left out and fall back to <0xNN> byte tokens.
2. transformers' GemmaTokenizerFast converts it (GemmaConverter: normalizer
   Replace(" ", "▁"), a Split(" ") pre-tokenizer that is a no-op after it, BPE with
   byte_fallback and merges generated from the piece scores, user-defined and control pieces
   as added tokens, TemplateProcessing "<bos> $A").
3. Hugging Face `tokenizers` (the fast tokenizer's backend) encodes ~50 inputs and 300
   random strings.

Outputs, in tests/fixtures/tokenizer/:

  tokenizer_spm.json  the converted tokenizer, as transformers saves it
  golden_spm.json     inputs and HF's ids (also with a dummy-prefix normalizer, and for 300
                      random strings); the SentencePiece scores and piece types, so the
                      test can write the GGUF metadata llama.cpp's converter would (scores,
                      no merges); SentencePiece's own ids, for information (they differ
                      from HF's only where HF splits out added tokens)

Needs sentencepiece, protobuf, transformers 4.x (its slow-to-fast conversion; made with
4.57.6) and tokenizers. Run from the repository root:

  python3 -m venv /tmp/venv-spm
  /tmp/venv-spm/bin/pip install sentencepiece protobuf "transformers<5" tokenizers
  /tmp/venv-spm/bin/python tools/golden/tokenizer_spm.py

(Or add sentencepiece and a protobuf >= 7 to /work/venv-lerobot's transformers with
`pip install --target DIR sentencepiece "protobuf>=7"` and PYTHONPATH=DIR.)

Training is deterministic for a fixed corpus and version, but the committed files are the
reference: rerun only to extend the cases, and commit both outputs together.
"""

import json
import os
import random
import tempfile

import sentencepiece as spm
import tokenizers
import transformers
from transformers import GemmaTokenizerFast
from _golden_json import compact

OUT = os.path.join("tests", "fixtures", "tokenizer")
VOCAB_SIZE = 1000
# Gemma's SentencePiece model has user-defined pieces for newline runs, space runs and HTML
# tags; the converter makes them added tokens (matched in the raw text) and keeps them in
# the BPE vocabulary with score 0.
USER_DEFINED = ["\n", "\n\n", "▁▁", "▁▁▁", "<table>", "<start_of_turn>"]

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
    "Café, naïve, résumé, façade — déjà vu. Über straße!",
    "机器人拿起红色的方块。把杯子放在桌子上。",
    "Роботу нужно взять кубик и положить его в коробку.",
    "Temperature: 21.5°C, humidity 40%, pressure 1013 hPa",
    "def predict(obs):\n    return policy(obs)  # one chunk of 50 actions\n",
    "  indented line\n\tand a tab\n\nnew paragraph  ",
    "Emoji: 🤖 🙂 ok",
]
OBJECTS = ["red cube", "blue bowl", "green block", "yellow cup", "sponge", "towel", "drawer", "banana"]
VERBS = ["pick up", "put down", "push", "open", "close", "grasp", "lift", "move"]


def corpus():
    """A few hundred varied sentences: the base ones, pi0.5-style prompts with states, and
    instructions from a small grammar."""
    lines = list(BASE) * 8
    for i in range(120):
        verb = VERBS[i % len(VERBS)]
        obj = OBJECTS[(i * 3) % len(OBJECTS)]
        state = " ".join(str((i * 37 + k * 101) % 256) for k in range(8))
        lines.append(f"Task: {verb} the {obj}, State: {state};\nAction: ")
        lines.append(f"{verb} the {obj} and place it next to the {OBJECTS[i % len(OBJECTS)]}.")
    return lines


def cases():
    """Inputs for the golden ids: spaces in every position, digits, punctuation, accents,
    emoji, CJK (some characters outside the vocabulary, so byte fallback fires), newlines,
    added tokens, and a literal "▁"."""
    return [
        "",
        " ",
        "  ",
        "   ",
        "    ",
        "\n",
        "\n\n\n",
        "pick up the red cube",
        "pick up the red cube\n",
        "Task: pick up the red cube, State: 12 200 3 0 128 255;\nAction: ",
        "Task: open the drawer, State: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32;\nAction: ",
        "hello world",
        "hello  world",
        "hello     world  ",
        "  leading spaces",
        "trailing spaces   ",
        " a b  c   d    e",
        "tabs\tand\ttabs",
        "line\nbreak\r\nwindows",
        "a \n b",
        "12345 67890",
        "move 25 cm, then 4.5 cm",
        "pi is 3.14159",
        "1,000,000 and 10^6",
        "I'm sure it's fine, don't you think? We've seen it.",
        "punctuation!!! ??? ... --- (parens) [brackets] {braces}",
        "a+b=c; x->y; ~!@#$%^&*",
        "Café naïve résumé façade déjà",
        "Über straße ÆØÅ",
        "机器人拿起红色的方块。",
        "把杯子放在桌子上",
        "龍が空を飛ぶ",
        "Роботу нужно взять кубик",
        "नमस्ते दुनिया",
        "한국어 텍스트",
        "Emoji: 🤖 🙂 ok",
        "👍🏽🇺🇸 and ❤️ and 👩‍👩‍👧",
        "combining e\u0301 and a\u0308",
        "nbsp\u00a0here and\u3000ideographic",
        "zero\u200bwidth and \u0085nel",
        "a literal ▁ and ▁▁ underline",
        "<bos>",
        "<bos>pick up<eos>",
        "<start_of_turn>user\npick up the cube<start_of_turn>",
        " <start_of_turn> spaced <table> ",
        "<unk> and <pad>",
        "<star partial <bos and <>",
        "def predict(obs):\n    return policy(obs)  # 50 actions\n",
        "wipe the table with the towel\n",
        "Temperature: 21.5°C, 40%",
        "the the the the the",
        "aaaaaaaaaaaaaaaaaaaaaaaa",
    ]


def random_texts(vocab, n=300, seed=7):
    """Random concatenations of vocabulary pieces, spaces, newlines, added tokens and
    characters outside the vocabulary: many more merge situations than the cases."""
    rng = random.Random(seed)
    pieces = sorted(t for t in vocab if not t.startswith("<0x")) + [
        " ", "  ", "   ", "\n", "\t", "\r", "▁", "中", "🤖", "é", "e\u0301", "ß", "0", "12",
        "<bos>", "<unk>", "<start_of_turn>", "<table>", "<", ">",
    ]
    texts = []
    for _ in range(n):
        parts = (rng.choice(pieces) for _ in range(rng.randint(1, 20)))
        # Vocabulary pieces mostly with real spaces, sometimes with a literal "▁".
        texts.append("".join(p.replace("▁", " " if rng.random() < 0.8 else "▁") for p in parts))
    return texts


def train(dir):
    path = os.path.join(dir, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        for line in corpus():
            # One sentence per line for the trainer (newlines are user-defined pieces).
            f.write(line.replace("\n", " ") + "\n")
    prefix = os.path.join(dir, "spm")
    spm.SentencePieceTrainer.train(
        input=path,
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        character_coverage=0.99,
        byte_fallback=True,
        split_digits=True,
        split_by_unicode_script=True,
        split_by_number=True,
        split_by_whitespace=True,
        treat_whitespace_as_suffix=False,
        allow_whitespace_only_pieces=True,
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        user_defined_symbols=USER_DEFINED,
        num_threads=1,
        minloglevel=2,
    )
    return prefix + ".model"


def main():
    with tempfile.TemporaryDirectory() as dir:
        model = train(dir)
        sp = spm.SentencePieceProcessor(model_file=model)
        fast = GemmaTokenizerFast(vocab_file=model, from_slow=True)
        hf = fast.backend_tokenizer
        os.makedirs(OUT, exist_ok=True)
        hf.save(os.path.join(OUT, "tokenizer_spm.json"))

    # SentencePiece piece types, as llama.cpp's converter maps them to
    # tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte.
    def piece_type(i):
        if sp.is_unknown(i):
            return 2
        if sp.is_control(i):
            return 3
        if sp.is_byte(i):
            return 6
        if sp.is_unused(i):
            return 5
        # sentencepiece has no is_user_defined; user-defined pieces are the listed ones.
        return 4 if sp.id_to_piece(i) in USER_DEFINED else 1

    n = sp.get_piece_size()
    assert hf.get_vocab_size() == n, (hf.get_vocab_size(), n)
    inputs = cases()
    randoms = random_texts(hf.get_vocab())
    # Same vocabulary with a dummy prefix, as Llama-style SentencePiece tokenizers have:
    # normalizer Sequence[Prepend("▁"), Replace(" ", "▁")].
    prefixed = tokenizers.Tokenizer.from_str(hf.to_str())
    prefixed.normalizer = tokenizers.normalizers.Sequence(
        [tokenizers.normalizers.Prepend("▁"), tokenizers.normalizers.Replace(" ", "▁")]
    )
    golden = {
        "generator": (
            f"tools/golden/tokenizer_spm.py, sentencepiece {spm.__version__}, "
            f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}"
        ),
        "cases": [{"text": s, "ids": hf.encode(s).ids} for s in inputs],
        "prefix_normalizer": json.loads(prefixed.to_str())["normalizer"],
        "prefix_cases": [{"text": s, "ids": prefixed.encode(s).ids} for s in inputs],
        "random_cases": [{"text": s, "ids": hf.encode(s).ids} for s in randoms],
        "random_prefix_cases": [{"text": s, "ids": prefixed.encode(s).ids} for s in randoms],
        # SentencePiece's own ids (with <bos>), for information: the reference is HF.
        "sentencepiece_ids": [[2] + sp.encode(s) for s in inputs],
        "spm_scores": [sp.get_score(i) for i in range(n)],
        "spm_types": [piece_type(i) for i in range(n)],
        "decoded": [
            {"ids": hf.encode(s).ids, "text": hf.decode(hf.encode(s).ids, skip_special_tokens=False)}
            for s in inputs
        ],
    }
    with open(os.path.join(OUT, "golden_spm.json"), "w", encoding="utf-8") as f:
        f.write(compact(golden))
    differ = sum(a["ids"] != b for a, b in zip(golden["cases"], golden["sentencepiece_ids"]))
    print(
        f"vocab {n}, {len(inputs)} cases, {len(randoms)} random -> {OUT}; "
        f"sentencepiece differs from HF on {differ} cases"
    )


if __name__ == "__main__":
    main()
