#!/usr/bin/env python3
"""Reference encodings for tests/tokenizer.rs, made by Hugging Face `tokenizers`.

Trains a small byte-level BPE with SmolLM2's pipeline (no normalizer; pre-tokenizer
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
use_regex=True)]; ByteLevel post-processor and decoder), then writes

  tests/fixtures/tokenizer/tokenizer.json   the trained tokenizer, as HF saves it
  tests/fixtures/tokenizer/tokenizer_gpt2.json  a smaller one trained with ByteLevel alone
  tests/fixtures/tokenizer/golden.json      inputs and the ids HF gives for them

and a Qwen2-layout byte-level BPE as transformers' Qwen2Converter builds Qwen2/Qwen2.5/
Qwen3's (whose tokenizer Eagle 2.5, GR00T N1.5's VLM, uses): normalizer NFC; pre-tokenizer
Sequence[Split(QWEN2_PATTERN, Isolated), ByteLevel(use_regex=False)]; BPE with "" as
subword prefix and suffix, merges as "a b" strings; the special tokens after the
vocabulary, only in added_tokens (with Eagle's image tokens, a non-special one as Qwen2.5
has, and a normalized non-special one as Eagle 2 has), no BOS:

  tests/fixtures/tokenizer/tokenizer_qwen2.json  that tokenizer
  tests/fixtures/tokenizer/golden_qwen2.json     inputs (the ones above, chat prompts,
                                                 non-NFC text, 300 random strings), HF's
                                                 ids, HF's decoding of them, and the
                                                 words its normalizer and pre-tokenizer
                                                 make of them

The Rust test must reproduce every id list exactly. Run from the repository root:

  python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers
  /tmp/venv-tok/bin/python tools/golden/tokenizer.py

Training is deterministic for a fixed corpus, but the committed files are the reference:
rerun only to extend the cases, and commit both outputs together.
"""

import json
import os
import random

import tokenizers
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

OUT = os.path.join("tests", "fixtures", "tokenizer")
VOCAB_SIZE = 800
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A non-special added token, as SmolVLM2 has for its image grid (<row_1_col_1>, ...).
ADDED = ["<row_1_col_1>"]

# Enough English-like text (robot instructions, prose, code, numbers) to learn a few
# hundred merges; some non-ASCII so multi-byte characters merge too.
CORPUS = [
    "pick up the red cube and place it in the blue bowl",
    "Pick up the green block, then put it on the left tray.",
    "open the top drawer and put the sponge inside",
    "close the microwave door; turn the knob to 3 minutes",
    "stack the cups: red on blue, blue on green",
    "move the arm 25 cm to the right and lower the gripper by 4.5 cm",
    "The robot should grasp the handle, rotate 90 degrees, and release.",
    "I'm sure it's fine, don't worry: we'll see what they've done.",
    "def predict(obs):\n    return policy(obs)  # one chunk of 50 actions\n",
    "for i in range(10):\n\tprint(i, i * 2)\n",
    "Café, naïve, résumé, façade — déjà vu.",
    "机器人拿起红色的方块。",
    "Роботу нужно взять кубик.",
    "Temperature: 21.5°C, humidity 40%, pressure 1013 hPa",
    "wipe the table with the towel, then fold the towel in half",
    "push the button twice and wait for the green light",
] * 20


def cases():
    """Inputs that exercise each branch of the pre-tokenizer and the added-token split."""
    return [
        "pick up the red cube\n",
        "Pick up the red cube and place it in the bowl.\n",
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "hello world",
        "hello  world",
        "hello     world  ",
        "  leading spaces",
        "trailing spaces   ",
        "tabs\tand\ttabs",
        "line\nbreak\r\nwindows",
        "a \n b",
        "x\t\ty",
        "12345",
        "move 25 cm",
        "pi is 3.14159",
        "1,000,000 and 10^6",
        "abc123def456",
        "I'm sure it's fine, don't you think? We've seen it; they'll say I'd",
        "'s 't 're 'S it'S",
        "''quoted'' \"double\"",
        "punctuation!!! ??? ... --- (parens) [brackets] {braces}",
        "a+b=c; x->y; ~!@#$%^&*",
        "Café naïve résumé façade",
        "机器人拿起红色的方块。",
        "Роботу нужно взять кубик",
        "नमस्ते दुनिया",
        "مَرْحَبًا بالعالم",
        "한국어 텍스트",
        "Emoji: 😀👍🏽🇺🇸 and ❤️ and 👩‍👩‍👧",
        "Roman Ⅻ and superscript x² and ½ and ٣٤",
        "Ⓐ circled, ǅ titlecase, ʰ modifier, 𝐀 math",
        "nbsp\u00a0here and\u3000ideographic and\u2009thin",
        "zero\u200bwidth and\u2028line sep and \u0085nel",
        "vertical\u000btab and form\u000cfeed",
        "combining e\u0301 and a\u0308",
        "<|im_start|>user\npick up the cube<|im_end|>\n",
        "<|endoftext|>",
        "<|endoftext|><|endoftext|>",
        "text<|endoftext|>more",
        " <|im_start|> spaced <|im_end|> ",
        "<|im_start|><|im_end|>",
        "<|im_ partial <|endoftext| and <||>",
        "<row_1_col_1>grid<row_1_col_1>",
        "def predict(obs):\n    return policy(obs)  # 50 actions\n",
        "for i in range(10):\n\tprint(i)\n",
        "wipe the table with the towel\n",
        "Temperature: 21.5°C, 40%",
    ]


def train(pre_tokenizer, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizer
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens(ADDED)
    return tok


# Qwen2's Split pattern, as in its tokenizer.json (Qwen3's is the same).
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Eagle 2.5's image and grounding tokens, added as special tokens.
EAGLE = ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>"]
# More of what Qwen2's split treats differently: case, punctuation before letters and
# newlines after it, digit runs, indentation, decomposed characters (NFC composes them).
QWEN2_CORPUS = CORPUS + [
    "IT'S DONE! We'LL see; THEY'VE gone.\n\nNext:\r\n- item 1\n- item 22\n",
    "    if x == 10:\n        return [1, 2, 3]\n\t\tpass\n",
    "Cafe\u0301 \u1100\u1161\u11a8 Ω ≈ ç √ ∫ ½ ²",
    "emoji 😀👍🏽 and (parens), [brackets], \"quotes\"...",
    "한국어 텍스트와 日本語のテキスト",
    "trailing space \nand two  \nand a tab\t\nthen  \n\n  indented \r\n",
] * 20


def qwen2_cases():
    """Prompts as Eagle 2.5 builds them, the split's corners, and text that NFC changes."""
    return [
        "<|im_start|>user\n<image 1><img><IMG_CONTEXT><IMG_CONTEXT></img>['Pick up the cube']<|im_end|>\n",
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>assistant\n",
        "<img><IMG_CONTEXT></img><img></img><quad></quad><ref>cube</ref><box>[[1, 2, 3, 4]]</box>",
        "<tool_call>{\"name\": \"pick\"}</tool_call>",
        "assistants assistant's <|im_start|>assistant",
        "<IMG_CONTEXT partial <img <img/> IMG_CONTEXT>",
        "IT'S it'S we'LL I'M she'D they'Ve you'RE don'T x'\u017fa",
        "hi!!\n\nthere ...\n (word) [x] \"q\"\n\n",
        "  \n  x", "a\r\n\r\n  b", "x \n\n y", " \n", "\t\tindented\n\t\tcode",
        "\u3000\u3000x and \u00a0\u00a0y and \u2009z",
        "price: $1,234.56 (3.5%) on 2024-01-31T12:00",
        "Cafe\u0301 nai\u0308ve re\u0301sume\u0301",
        "\u212b \u2126 \u212a \u2000\u2001 \uf900 \u0958 \u1f71",
        "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u116e\u11a8",
        "a>\u0338b and =\u0338 and <img>\u0338",
        "q\u0307\u0323 and s\u0323\u0307 and e\u0301\u0301",
    ]


def random_texts(n=300, seed=7):
    """Strings of pieces that meet each other in every order: letters, digits, marks that
    compose, every kind of whitespace, apostrophes, punctuation, added tokens."""
    pool = [
        "a", "B", "s", "S", "t", "ll", "é", "ж", "中", "한", "1", "٣", "½", "²",
        " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\x0b", "\x85",
        "'", "'s", "'LL", "'ſ", "!", "?", ".", ",", "(", ")", "<", ">", "-", "_", "$",
        "😀", "👍🏽", "e\u0301", "\u0301", "\u0323", "\u0338", "\u1100\u1161", "\u11a8",
        "\u212b", "\uf900", "\u2000", "<|im_end|>", "<IMG_CONTEXT>", "<img>", "cube", " pick",
    ]
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randrange(26))) for _ in range(n)]


def train_qwen2():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(QWEN2_CORPUS, trainer)
    # As Qwen2Converter writes the model.
    j = json.loads(tok.to_str())
    j["model"]["continuing_subword_prefix"] = ""
    j["model"]["end_of_word_suffix"] = ""
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL + EAGLE])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    tok.add_tokens([AddedToken("</tool_call>", special=False, normalized=False)])
    tok.add_tokens([AddedToken("assistant", special=False, normalized=True)])
    # Merges as the older "a b" strings, as Qwen2.5's file has them (`tokenizers` saves
    # pairs).
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    return json.dumps(j, ensure_ascii=False, indent=2) + "\n"


def write_qwen2():
    path = os.path.join(OUT, "tokenizer_qwen2.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(train_qwen2())
    tok = Tokenizer.from_file(path)

    def encoded(texts):
        out = []
        for s in texts:
            ids = tok.encode(s).ids
            # The words of the whole text (added tokens not split out), in byte characters.
            words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(s))]
            out.append({"text": s, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False), "words": words})
        return out

    inputs = cases() + qwen2_cases()
    golden = {
        "generator": f"tools/golden/tokenizer.py, tokenizers {tokenizers.__version__}",
        "cases": encoded(inputs),
        "random_cases": encoded(random_texts()),
    }
    with open(os.path.join(OUT, "golden_qwen2.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"qwen2: vocab {tok.get_vocab_size()}, {len(inputs)} cases + 300 random -> {OUT}")


def main():
    smollm = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tok = train(smollm, VOCAB_SIZE)

    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))

    # The same tokenizer with a BOS-adding post-processor, as some checkpoints ship: the
    # test splices this post-processor into tokenizer.json and expects these ids.
    bos = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", tok.token_to_id("<|im_start|>"))]
    )
    with_bos = Tokenizer.from_str(tok.to_str())
    with_bos.post_processor = bos
    bos_json = json.loads(with_bos.to_str())["post_processor"]

    # A second, smaller BPE trained with GPT-2's pre-tokenizer alone (llama.cpp's `gpt2`
    # pre type), so that it learns merges across digits ("Ġ2", "50") that the digit split
    # must otherwise prevent.
    plain = train(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True), 500)
    plain.save(os.path.join(OUT, "tokenizer_gpt2.json"))
    # And that vocabulary with SmolLM2's pre-tokenizer: the digit split now changes ids
    # (with tokenizer.json's own vocabulary, which has no digit merges, it cannot show).
    plain_split = Tokenizer.from_str(plain.to_str())
    plain_split.pre_tokenizer = smollm

    inputs = cases()
    golden = {
        "generator": f"tools/golden/tokenizer.py, tokenizers {tokenizers.__version__}",
        "cases": [{"text": s, "ids": tok.encode(s).ids} for s in inputs],
        "gpt2_cases": [{"text": s, "ids": plain.encode(s).ids} for s in inputs],
        "gpt2_vocab_smollm_pre_cases": [{"text": s, "ids": plain_split.encode(s).ids} for s in inputs],
        "bos_post_processor": bos_json,
        "bos_cases": [{"text": s, "ids": with_bos.encode(s).ids} for s in inputs[:4]],
        # decode(encode(s)) for the byte-level decoder (no cleanup of spaces).
        "decoded": [{"ids": tok.encode(s).ids, "text": tok.decode(tok.encode(s).ids, skip_special_tokens=False)} for s in inputs[:8]],
    }
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"vocab {tok.get_vocab_size()}, {len(inputs)} cases -> {OUT}")
    write_qwen2()


if __name__ == "__main__":
    main()
