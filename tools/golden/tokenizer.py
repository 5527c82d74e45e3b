#!/usr/bin/env python3
"""Reference encodings for tests/tokenizer.rs, made by Hugging Face `tokenizers`.

Trains a small byte-level BPE with SmolLM2's pipeline (no normalizer; pre-tokenizer
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
use_regex=True)]; ByteLevel post-processor and decoder), then writes

  tests/fixtures/tokenizer/tokenizer.json   the trained tokenizer, as HF saves it
  tests/fixtures/tokenizer/tokenizer_gpt2.json  a smaller one trained with ByteLevel alone
  tests/fixtures/tokenizer/golden.json      inputs and the ids HF gives for them

The Rust test must reproduce every id list exactly. Run from the repository root:

  python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers
  /tmp/venv-tok/bin/python tools/golden/tokenizer.py

Training is deterministic for a fixed corpus, but the committed files are the reference:
rerun only to extend the cases, and commit both outputs together.
"""

import json
import os

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

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


if __name__ == "__main__":
    main()
