"""VLA-JEPA checkpoints whose settings differ from the committed tiny fixture's, through lerobot 0.6.1:
the same weights, frames, state and noise, one setting changed in a copy of the fixture folder.

Rerun (anyone, offline; the venv is vla_jepa.py's, see its docstring):

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_jepa_variants.py

Writes tests/fixtures/vla-jepa-tiny/variants.json, one postprocessed chunk per case:
  - "clip_image_stats": backbone/preprocessor_config.json with CLIP's image_mean / image_std (the
    Qwen3-VL processor lerobot loads from qwen_model_name normalises with them) instead of 0.5 / 0.5.
  - "resized_table": a checkpoint saved after lerobot grew the tokenizer: qwen_interface.py adds
    chunk_size * 4 action tokens and one embodied token (366 + 29 = 395 here) and calls
    resize_token_embeddings(395) when the backbone config's vocab_size is smaller. So: vocab_size 380
    in backbone/config.json, the embedding table (stored once, as the tied lm_head) cut to 395 rows (every id
    the prompt uses is below 395: the chunk stays the fixture's).
The edits are in EDITS and ROWS below, so a test can make the same folder; nothing else changes.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vla_jepa  # noqa: E402

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# case -> (file in the fixture folder, JSON path, new value)
EDITS = {
    "clip_image_stats": [("backbone/preprocessor_config.json", ["image_mean"], CLIP_MEAN),
                         ("backbone/preprocessor_config.json", ["image_std"], CLIP_STD)],
    "resized_table": [("backbone/config.json", ["text_config", "vocab_size"], 380)],
}
# case -> (tensor names in model.safetensors, rows kept)
ROWS = {"resized_table": (["model.qwen.model.lm_head.weight"], 395)}  # the table (tied embeddings)


def main():
    import torch
    from safetensors.torch import load_file

    fixture = os.path.join(HERE, "..", "..", "tests", "fixtures", "vla-jepa-tiny")
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    images = [g[f"image.{c}"] for c in range(len(vla_jepa.CAMERAS))]
    out = {"generator": "tools/golden/vla_jepa_variants.py",
           "versions": {"lerobot": __import__("lerobot").__version__, "torch": torch.__version__},
           "edits": EDITS, "rows": ROWS, "cases": {}}
    for case, edits in EDITS.items():
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "fixture")
            shutil.copytree(fixture, d)
            for rel, path, value in edits:
                f = os.path.join(d, rel)
                j = json.load(open(f))
                node = j
                for k in path[:-1]:
                    node = node[k]
                node[path[-1]] = value
                json.dump(j, open(f, "w"), indent=2)
            if case in ROWS:
                from safetensors.torch import save_file
                names, rows = ROWS[case]
                f = os.path.join(d, "model.safetensors")
                st = load_file(f)
                for n in names:
                    st[n] = st[n][:rows].contiguous()
                save_file(st, f, metadata={"format": "pt"})
            policy, pre, post = vla_jepa.load_fixture(d)
            with torch.no_grad():
                _, _, actions = vla_jepa.run_policy(policy, pre, post, images, g["state"], g["noise"])
        actions = actions[0]
        diff = float((actions - g["actions"]).abs().max())
        print(case, "max abs difference from the fixture's chunk:", diff)
        out["cases"][case] = {"actions": [[float(x) for x in row] for row in actions],
                              "max_abs_diff_from_golden": diff}
    json.dump(out, open(os.path.join(fixture, "variants.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
