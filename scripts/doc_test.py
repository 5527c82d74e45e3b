#!/usr/bin/env python3
"""The documentation's own tests (stdlib only; scripts/doc-test.sh runs this).

1. Every ```sh block of README.md and docs/*.md whose fence follows a line
   `<!-- doctest -->` runs as a bash script (`set -euo pipefail` first) in a fresh temp
   dir, with the built binaries first on PATH (target/debug, or $VLA_BIN_DIR), FIXTURES set
   to tests/fixtures and an empty Hugging Face cache (HF_HOME, HF_HUB_CACHE, HF_LEROBOT_HOME),
   so a block passes on a fresh checkout and on nothing else. A block may start a server in
   the background (`vla-server ... &`): each block runs in its own process group, which is
   killed when the block ends. A failure names the block's file:line and shows its output's
   tail; every block runs, and the exit status is 1 if any failed.
2. docs/ARCHITECTURE.md against the tree: every repository path it names in backticks
   (`src/...`, `tests/...`, `shaders/...`, ...) exists, and every top-level module of src/ and
   every file or folder under src/models, src/modules and src/layers is named there.
3. Links: every relative link of README.md, CHANGELOG.md, eval/README.md and docs/*.md
   points at a file that exists, and at a heading of it when it has an #anchor.

Usage: scripts/doc-test.sh [--list] [--checks-only] [--only TEXT] [--timeout S] [--keep]
"""

import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BINARIES = ["vla-server", "vla-convert", "vla-bench", "vla-gguf", "vla-quantize"]
MARKER = "<!-- doctest -->"
PATH_ROOTS = ("src/", "tests/", "shaders/", "vla-server/", "tools/", "scripts/", "bench/",
              "fuzz/", "proto/", "clients/", "eval/")


def rel(path):
    return os.path.relpath(path, REPO)


def doc_files():
    return [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


# ------------------------------------------------------------------ blocks

class Block:
    def __init__(self, path, line, text):
        self.path, self.line, self.text = path, line, text

    @property
    def name(self):
        return f"{rel(self.path)}:{self.line}"


def marked_blocks(path, problems):
    """The marked ```sh blocks of `path`; a misplaced marker or an open fence is a problem."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):  # an unmarked block: skip it whole
            opened = i
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                i += 1
            if i == len(lines):
                problems.append(f"{rel(path)}:{opened + 1}: code block never closed")
            i += 1
            continue
        if stripped == MARKER:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if nxt != "```sh":
                problems.append(f"{rel(path)}:{i + 1}: {MARKER} must be followed by a ```sh fence on the next line")
                i += 1
                continue
            start = i + 1  # the fence's index
            j = start + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                problems.append(f"{rel(path)}:{start + 1}: marked block never closed")
                break
            text = "\n".join(lines[start + 1:j])
            if not text.strip():
                problems.append(f"{rel(path)}:{start + 1}: marked block is empty")
            blocks.append(Block(path, start + 1, text))
            i = j + 1
            continue
        i += 1
    return blocks


def group_alive(pgid):
    """Whether a process of group `pgid` still runs (zombies, which an init that does not reap
    may leave, do not count)."""
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def kill_group(proc):
    """SIGTERM to what the block left running (its process group), then SIGKILL after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()  # reap the block's shell if it just died
            if not group_alive(proc.pid):
                return
            time.sleep(0.05)


def tail(path, n=40):
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return ""
    return "\n".join("    " + l for l in lines[-n:])


def run_block(block, bin_dir, timeout, keep):
    work = tempfile.mkdtemp(prefix="vla-doctest-")
    script = os.path.join(work, ".block.sh")
    log = os.path.join(work, ".block.log")
    with open(script, "w", encoding="utf-8") as f:
        # The ERR trap names the failing command and its line in the Markdown file.
        f.write("set -euo pipefail\n"
                "trap 'rc=$?; echo \"doc-test: $DOC_BLOCK_FILE:$((DOC_BLOCK_LINE + LINENO - 2)): "
                "exit status $rc: $BASH_COMMAND\" >&2' ERR\n" + block.text + "\n")
    hf = os.path.join(work, ".hf")
    os.makedirs(os.path.join(hf, "hub"))
    env = dict(os.environ)
    env.update({
        "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
        "FIXTURES": os.path.join(REPO, "tests", "fixtures"),
        "REPO": REPO,
        "HF_HOME": hf,
        "HF_HUB_CACHE": os.path.join(hf, "hub"),
        "HF_LEROBOT_HOME": os.path.join(hf, "lerobot"),
        "DOC_BLOCK_FILE": rel(block.path),
        "DOC_BLOCK_LINE": str(block.line),
    })
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", script], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
            why = None if rc == 0 else f"exit status {rc}"
        except subprocess.TimeoutExpired:
            why = f"timed out after {timeout} s"
        finally:
            kill_group(proc)
            proc.wait()
    secs = time.monotonic() - t0
    if why is None:
        print(f"ok    {block.name} ({secs:.1f} s)", flush=True)
    else:
        print(f"FAIL  {block.name}: {why} ({secs:.1f} s); the block:", flush=True)
        print("\n".join("    | " + l for l in block.text.split("\n")))
        print(f"  its output (last lines; {'all of it in ' + log if keep else '--keep keeps all of it'}):")
        print(tail(log), flush=True)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return why is None


# ------------------------------------------------------------------ ARCHITECTURE.md

def code_spans(text):
    """(line, span) of every inline code span outside fenced blocks."""
    out, in_fence = [], False
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            out.extend((n, m.group(1)) for m in re.finditer(r"`([^`]+)`", line))
    return out


def expand_braces(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    return [x for alt in m.group(1).split(",")
            for x in expand_braces(s[:m.start()] + alt.strip() + s[m.end():])]


def check_architecture(problems):
    path = os.path.join(REPO, "docs", "ARCHITECTURE.md")
    text = open(path, encoding="utf-8").read()
    spans = code_spans(text)
    named = set()
    for n, span in spans:
        for token in re.findall(r"[^\s,;(){}]*\{[^{}]*\}[^\s,;(){}]*|[^\s,;(){}]+", span):
            token = token.strip().rstrip(".:")
            if not token:
                continue
            named.add(token.rstrip("/"))
            if not token.startswith(PATH_ROOTS) or re.search(r"[<>*]|\.\.\.", token):
                continue
            for p in expand_braces(token):
                if not os.path.exists(os.path.join(REPO, p.rstrip("/"))):
                    problems.append(f"docs/ARCHITECTURE.md:{n}: `{p}` does not exist")

    def is_named(relpath):
        base = os.path.basename(relpath)
        return any(t == relpath or t == base or t.endswith("/" + base) for t in named)

    wanted = [os.path.join("src", e) for e in os.listdir(os.path.join(REPO, "src"))]
    for d in ("src/models", "src/modules", "src/layers"):
        wanted += [os.path.join(d, e) for e in os.listdir(os.path.join(REPO, d))]
    for w in sorted(wanted):
        if w.endswith(".rs") or os.path.isdir(os.path.join(REPO, w)):
            if not is_named(w):
                problems.append(f"docs/ARCHITECTURE.md: `{w}` is in the tree but not named in the layer list")


# ------------------------------------------------------------------ links

def anchors_of(path):
    text = open(path, encoding="utf-8").read()
    seen, out, in_fence = {}, set(), False
    for line in text.split("\n"):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


def check_links(problems):
    files = doc_files() + [os.path.join(REPO, "CHANGELOG.md"), os.path.join(REPO, "eval", "README.md")]
    cache = {}
    for path in files:
        in_fence = False
        for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
            if line.strip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            line = re.sub(r"`[^`]*`", "", line)
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
                where = f"{rel(path)}:{n}"
                if not os.path.exists(dest):
                    problems.append(f"{where}: link to {target}: no such file")
                    continue
                if anchor and dest.endswith(".md"):
                    if dest not in cache:
                        cache[dest] = anchors_of(dest)
                    if anchor not in cache[dest]:
                        problems.append(f"{where}: link to {target}: no such heading in {rel(dest)}")


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="list the marked blocks and run nothing")
    ap.add_argument("--checks-only", action="store_true", help="only the ARCHITECTURE.md and link checks")
    ap.add_argument("--only", metavar="TEXT", help="run the blocks whose file:line contains TEXT")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("VLA_DOC_TEST_TIMEOUT", 600)),
                    help="seconds a block may run (default 600, or $VLA_DOC_TEST_TIMEOUT)")
    ap.add_argument("--keep", action="store_true", help="keep each block's temp dir and log")
    args = ap.parse_args()

    problems = []
    blocks = [b for p in doc_files() for b in marked_blocks(p, problems)]
    if args.only:
        blocks = [b for b in blocks if args.only in b.name]
    if args.list:
        for b in blocks:
            print(b.name)
        for p in problems:
            print(f"problem: {p}")
        return 1 if problems else 0

    check_architecture(problems)
    check_links(problems)
    for p in problems:
        print(f"FAIL  {p}")
    print(f"{'ok   ' if not problems else 'FAIL '} documentation checks: {len(problems)} problem(s)", flush=True)
    if args.checks_only:
        return 1 if problems else 0

    bin_dir = os.path.realpath(os.environ.get("VLA_BIN_DIR") or os.path.join(REPO, "target", "debug"))
    missing = [b for b in BINARIES if not os.access(os.path.join(bin_dir, b), os.X_OK)]
    if missing:
        print(f"FAIL  {', '.join(missing)} not in {bin_dir}: build them with "
              f"`cargo build -p vla-server --bins` (or set VLA_BIN_DIR)")
        return 1
    print(f"running {len(blocks)} block(s) with the binaries in {bin_dir}", flush=True)
    failed = [b.name for b in blocks if not run_block(b, bin_dir, args.timeout, args.keep)]
    print(f"{len(blocks) - len(failed)} of {len(blocks)} blocks passed"
          + (": failed " + ", ".join(failed) if failed else ""))
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
