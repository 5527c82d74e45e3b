"""Long instructions through the reference: lerobot's chunk for instructions longer than any other
fixture's, on a committed tiny fixture (same weights, frames, state and noise; only the task differs).

Rerun (anyone, offline; the venvs are the arch tools' own, see their docstrings):

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/long_prompt.py evo1
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/long_prompt.py vla_jepa
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/long_prompt.py groot

Writes <fixture>/long_prompt.json: the tasks, the ids lerobot's language model read (where the arch's
tool can record them) and the postprocessed chunk of each case. Cases:
  - "long": a multi-step instruction of a few hundred tokens, past every bound vla-rs had before it
    followed the prompt's length (Evo-1 64, VLA-JEPA 96 with the template, GR00T 64), within the
    reference's own (Evo-1: the whole prompt at max_text_length = 1024 tokens; GR00T and VLA-JEPA:
    none).
  - "cut" (Evo-1 only): longer than max_text_length with the image blocks, so lerobot's tokenizer
    (truncation=True, internvl3_embedder.py) cuts the prompt at 1024 tokens: the chunk of what is
    left.
The arch tool loads the fixture as its --check does; its make_obs is wrapped to put the case's task
in the observation. Nothing else changes: noise from golden.safetensors, explicit as in the fixture.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

STEP = ("first pick up the alphabet soup and place it in the basket, then pick up the tomato sauce and put it "
        "beside the soup, then push the cream cheese to the back of the table without knocking over the butter, ")
LONG = "Do this carefully: " + STEP * 6 + "and finally move the empty plate to the left side of the stove."
CUT = "Do this carefully: " + STEP * 40 + "and finally move the empty plate to the left side of the stove."

ARCHS = {
    # module, fixture, noise tensor, cases
    "evo1": ("evo1", "evo1-tiny", "noise_u01", {"long": LONG, "cut": CUT}),
    "vla_jepa": ("vla_jepa", "vla-jepa-tiny", "noise", {"long": LONG}),
    "groot": ("groot", "groot-tiny", "noise", {"long": LONG}),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=sorted(ARCHS))
    ap.add_argument("--fixture", help="fixture folder (default: tests/fixtures/<the arch's tiny fixture>)")
    a = ap.parse_args()
    name, default, noise_key, cases = ARCHS[a.arch]
    fixture = os.path.abspath(a.fixture or os.path.join(HERE, "..", "..", "tests", "fixtures", default))

    mod = __import__(name)
    import torch
    from safetensors.torch import load_file

    if hasattr(mod, "use_fixture"):
        mod.use_fixture(fixture)
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    policy, pre, post = mod.load_fixture(fixture)
    images = [g[f"image.{i}"] for i in range(sum(k.startswith("image.") for k in g))]
    ids = []
    if a.arch == "evo1":  # the InternVL model's input ids (select_action runs it a second time)
        policy.model.embedder.model.register_forward_pre_hook(
            lambda m, args, kw: ids.append(kw["input_ids"][0].tolist()), with_kwargs=True)
    if a.arch == "vla_jepa":
        real_bi = policy.model.qwen.build_inputs
        policy.model.qwen.build_inputs = lambda **kw: (lambda o: ids.append(o["input_ids"][0].tolist()) or o)(
            real_bi(**kw))
    make_obs = mod.make_obs
    out = {"generator": "tools/golden/long_prompt.py", "fixture": os.path.basename(fixture),
           "versions": {"lerobot": __import__("lerobot").__version__, "torch": torch.__version__}, "cases": {}}
    for case, task in cases.items():
        mod.make_obs = lambda *x, task=task, **k: {**make_obs(*x, **k), "task": task}
        ids.clear()
        with torch.no_grad():
            res = mod.run_policy(policy, pre, post, images, g["state"], g[noise_key])
        batch, actions = res[0], res[2]
        actions = actions[0] if actions.dim() == 3 else actions
        if a.arch == "groot":
            ids.append(batch["eagle_input_ids"][0].tolist())
        assert all(i == ids[0] for i in ids), "the runs of one case read different ids"
        entry = {"task": task, "actions": [[float(x) for x in row] for row in actions]}
        if ids:
            entry["token_ids"] = ids[0]
        out["cases"][case] = entry
        print(case, "prompt ids:", len(ids[0]) if ids else "not recorded", "actions[0]:", entry["actions"][0])
    mod.make_obs = make_obs
    json.dump(out, open(os.path.join(fixture, "long_prompt.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
