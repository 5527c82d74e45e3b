"""Make lerobot 0.6.x importable on Python 3.11 by rewriting its PEP 695 syntax (golden tools only).

lerobot 0.6.1 declares Python >= 3.12 and installs on 3.11 only with `pip install
--ignore-requires-python`. Five of its files then fail to compile, all for PEP 695 syntax, and all
are imported by the groot / evo1 / vla_jepa policies:

    processor/pipeline.py        class DataProcessorPipeline[TInput, TOutput](HubMixin):
    datasets/streaming_dataset.py class Backtrackable[T]:
    utils/io_utils.py            def deserialize_json_into_object[T: JsonLike](fpath, obj: T) -> T:
    motors/motors_bus.py         type NameOrID = str | int  (and `type Value = ...`)
    datasets/aggregate.py        type FeatureDict = ...  (3 aliases)

`patch_pep695()` rewrites them mechanically, with the same runtime meaning:
    type X = Y                       ->  X = Y
    class C[T1, T2](Bases):          ->  T1 = TypeVar("T1"); T2 = ...; class C(Bases, Generic[T1, T2]):
    def f[T: B](...):                ->  T = TypeVar("T", bound=B); def f(...):
Only module-level statements are rewritten (every case above is); anything else that fails to
compile is reported, not touched. The function is idempotent (a file that compiles is left alone),
changes nothing outside lerobot's package folder, and records what it did in
`<lerobot>/.pep695_compat.json` (file, line, old and new text, sha256 before and after) so the venv
can be audited or rebuilt. Nothing in vla-rs itself depends on this: it exists for the golden tools,
which run in a separate venv (see tools/golden/groot17.py).

Run it by hand (it is also called by the golden tools before they import lerobot):

    /work/venv-lerobot061/bin/python tools/golden/py311_compat.py          # patch (idempotent)
    /work/venv-lerobot061/bin/python tools/golden/py311_compat.py --check  # exit 1 if unpatched
"""
import hashlib
import importlib.util
import json
import os
import re
import sys

MARK = "# pep695-compat (vla-rs tools/golden/py311_compat.py)"
RECORD = ".pep695_compat.json"

_TYPE_ALIAS = re.compile(r"^type\s+(\w+)\s*=\s*(.*)$")
_GENERIC = re.compile(r"^(class|def)\s+(\w+)\[([^\]]*)\]\s*(.*)$", re.S)


def lerobot_dir():
    """The installed lerobot package folder, found without importing lerobot."""
    spec = importlib.util.find_spec("lerobot")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("lerobot is not installed in this interpreter")
    return list(spec.submodule_search_locations)[0]


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _compiles(text, path):
    try:
        compile(text, path, "exec")
        return None
    except SyntaxError as e:
        return e


def _typevars(params):
    """'T1, T2: Bound' -> [(name, bound or None)]."""
    out = []
    depth, cur = 0, ""
    for ch in params + ",":
        if ch == "," and depth == 0:
            if cur.strip():
                name, _, bound = cur.partition(":")
                out.append((name.strip(), bound.strip() or None))
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    return out


def _rewrite_line(line):
    """One module-level PEP 695 statement -> (list of new lines) or None if not one."""
    if line[:1].isspace():
        return None
    m = _TYPE_ALIAS.match(line.rstrip("\n"))
    if m:
        return [f"{m.group(1)} = {m.group(2)}  {MARK}\n"]
    m = _GENERIC.match(line.rstrip("\n"))
    if not m:
        return None
    kind, name, params, rest = m.groups()
    tvs = _typevars(params)
    pre = [f"import typing as _pep695_typing  {MARK}\n"]
    for tv, bound in tvs:
        b = f", bound={bound}" if bound else ""
        pre.append(f'{tv} = _pep695_typing.TypeVar("{tv}"{b})  {MARK}\n')
    if kind == "def":
        return pre + [f"def {name}{rest}  {MARK}\n"]
    generic = f"_pep695_typing.Generic[{', '.join(tv for tv, _ in tvs)}]"
    if rest.startswith("("):  # class C[T](Bases):
        bases, _, tail = rest[1:].rpartition(")")
        new = f"class {name}({bases}, {generic}){tail}" if bases.strip() else f"class {name}({generic}){tail}"
    else:  # class C[T]:
        new = f"class {name}({generic}){rest}"
    return pre + [f"{new}  {MARK}\n"]


def patch_file(path):
    """Rewrite every module-level PEP 695 line of `path` until it compiles; returns the changes."""
    text = open(path, encoding="utf-8").read()
    if _compiles(text, path) is None:
        return []
    before = _sha(text)
    lines = text.splitlines(keepends=True)
    changes, out = [], []
    for i, line in enumerate(lines, 1):
        new = _rewrite_line(line)
        if new is None:
            out.append(line)
            continue
        # TypeVar definitions go above any decorators of the class/def they serve.
        at = len(out)
        while at > 0 and out[at - 1].startswith("@"):
            at -= 1
        out[at:at] = new[:-1]
        out.append(new[-1])
        changes.append({"line": i, "old": line.rstrip("\n"), "new": "".join(new).rstrip("\n")})
    new_text = "".join(out)
    err = _compiles(new_text, path)
    if err is not None:
        raise RuntimeError(f"{path}: still does not compile after the PEP 695 rewrite: {err}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(new_text)
    return [dict(c, sha256_before=before, sha256_after=_sha(new_text)) for c in changes]


def unpatched(root=None):
    """Files of lerobot that do not compile on this interpreter."""
    root = root or lerobot_dir()
    bad = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                if _compiles(open(p, encoding="utf-8").read(), p) is not None:
                    bad.append(os.path.relpath(p, root))
    return sorted(bad)


def patch_pep695(root=None, verbose=True):
    """Idempotent: patch every lerobot file that fails to compile; returns the record."""
    root = root or lerobot_dir()
    rec_path = os.path.join(root, RECORD)
    record = json.load(open(rec_path)) if os.path.exists(rec_path) else {"python": sys.version, "files": {}}
    if sys.version_info >= (3, 12):
        return record
    changed = False
    for rel in unpatched(root):
        changes = patch_file(os.path.join(root, rel))
        if changes:
            record["files"][rel] = changes
            changed = True
            if verbose:
                print(f"py311_compat: rewrote {len(changes)} PEP 695 line(s) in lerobot/{rel}", file=sys.stderr)
    left = unpatched(root)
    if left:
        raise RuntimeError(f"lerobot files that still do not compile on {sys.version.split()[0]}: {left}")
    if changed:
        try:
            from importlib.metadata import version
            record["lerobot"] = version("lerobot")
        except Exception:  # noqa: BLE001
            pass
        json.dump(record, open(rec_path, "w"), indent=1)
    return record


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        bad = unpatched()
        print(json.dumps({"lerobot": lerobot_dir(), "not_compiling": bad}))
        sys.exit(1 if bad else 0)
    rec = patch_pep695()
    print(json.dumps({"lerobot": lerobot_dir(), "patched_files": sorted(rec["files"])}, indent=1))
