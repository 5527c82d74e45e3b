"""Run LIBERO episodes against a policy served by vla-server and write a results file.

    eval/run_libero.sh --demo --smoke                       # the loop, end to end, in ~1 min
    eval/run_libero.sh model.gguf --suite libero_spatial --episodes 50
    eval/run_libero.sh --server tcp://HOST:5555 --suite libero_goal --tasks 0,3

eval/run_libero.sh runs this file in the LIBERO venv (pinned; `eval/run_libero.sh --install`
makes it); run it directly with a Python that has LIBERO, pyzmq, protobuf and numpy. Given a
GGUF (or --demo) it starts `vla-server` on a free loopback port (--server: use one already
running), reads its INFO reply, and runs --episodes episodes of each task from LIBERO's fixed
evaluation init states (episode k of a task starts from init state k; env seeded with --seed).
The observation -> request -> env action mapping per arch is in eval/libero_client.py. Results:
PREFIX.json (every episode, every latency) and PREFIX.md (tables), PREFIX from --out. With
random weights (the demo, `vla-gguf demo`) the success rate is 0: those runs check the loop and
measure speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "clients" / "python"))

import libero_client  # noqa: E402
from libero_client import MAX_STEPS, PolicyIO, run_episode  # noqa: E402

SMOKE_STEPS = 30
SMOKE_REPLAN = 10  # at most this many actions per chunk in --smoke, so that it asks for ~3 chunks
N_INIT_STATES = 50  # fixed evaluation init states per task in every suite


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- server
def server_binary(explicit: str | None) -> pathlib.Path:
    for cand in (explicit, os.environ.get("VLA_SERVER_BIN")):
        if cand:
            return pathlib.Path(cand)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    found = [p for p in (target / "release" / "vla-server", target / "debug" / "vla-server") if p.exists()]
    if not found:
        sys.exit(f"error: no vla-server under {target}: `cargo build --release -p vla-server`, or --server-bin / VLA_SERVER_BIN")
    return found[0]  # release first: the debug build is far slower


class Server:
    """vla-server on a free loopback port; its output is kept for the error message."""

    def __init__(self, binary: pathlib.Path, model_args: list[str], extra: list[str]):
        cmd = [str(binary), *model_args, "--bind", "tcp://127.0.0.1:*", "--log-level", "warn", *extra]
        log(f"starting: {' '.join(cmd)}")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.addr = None
        timer = threading.Timer(600, self.proc.kill)  # a server that never says it listens
        timer.start()
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("listening on "):
                self.addr = line.split()[2]
                break
        timer.cancel()
        if self.addr is None:
            self.proc.kill()
            sys.exit("error: vla-server did not start:\n" + "".join(self.lines))
        threading.Thread(target=lambda: [self.lines.append(x) for x in self.proc.stdout], daemon=True).start()
        log(f"vla-server listening on {self.addr}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---------------------------------------------------------------- stats and output
def stats(values) -> dict | None:
    v = [float(x) for x in values]
    if not v:
        return None
    return {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v)}


def fmt(s: dict | None, digits: int = 1) -> str:
    if not s:
        return "-"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for mod in ("libero", "robosuite", "mujoco", "numpy", "zmq"):
        try:
            m = __import__(mod)
            versions[mod] = getattr(m, "__version__", "?")
        except Exception:
            pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "versions": versions,
            "mujoco_gl": os.environ.get("MUJOCO_GL")}


def summarize(episodes: list[dict]) -> dict:
    ran = [e for e in episodes if not e.get("skipped")]
    server = {k: stats(x for e in ran for x in e["server"][k]) for k in ("total", "inference", "vision", "prefill", "denoise")}
    steps = sum(e["steps"] for e in ran)
    loop_s = sum(e["loop_s"] for e in ran)
    env_ms = [x for e in ran for x in e["env_step_ms"]]
    pred_ms = [x for e in ran for x in e["predict_ms"]]
    return {
        "episodes": len(ran),
        "successes": sum(e["success"] for e in ran),
        "success_rate": (sum(e["success"] for e in ran) / len(ran)) if ran else None,
        "skipped": len(episodes) - len(ran),
        "steps": steps,
        "predicts": sum(e["predicts"] for e in ran),
        "steps_per_episode": stats(e["steps"] for e in ran),
        "predict_ms_client": stats(pred_ms),
        "predict_ms_server": server,
        "env_step_ms": stats(env_ms),
        "control_loop_hz": steps / loop_s if loop_s > 0 else None,
        "loop_s": loop_s,
        "predict_share": (sum(pred_ms) / 1e3 / loop_s) if loop_s > 0 else None,
        "reset_s": stats(e["reset_s"] for e in ran),
    }


def markdown(res: dict) -> str:
    s, cfg, io = res["summary"], res["config"], res["mapping"]
    info, m = res["server_info"], res["machine"]
    out = [
        f"# LIBERO {cfg['suite']}: {info.get('arch')} ({cfg['model']})",
        "",
        f"{res['started']}; {m['cpu']}, {m['cores']} cores; server backend {info.get('backend')};"
        f" {cfg['episodes_per_task']} episode(s) per task, seed {cfg['seed']}, at most {cfg['max_steps']} steps"
        f"{' (smoke)' if cfg['smoke'] else ''}; {io['actions_per_chunk']} of {io['chunk_rows']} actions per chunk,"
        f" gripper {io['gripper']}.",
        "",
        "| task | instruction | success | steps (median, min-max) |",
        "|---|---|---|---|",
    ]
    for t in res["tasks"]:
        out.append(f"| {t['task_id']} | {t['instruction']} | {t['successes']}/{t['episodes']} | {fmt(t['steps'], 0)} |")
    rate = "-" if s["success_rate"] is None else f"{s['success_rate']:.1%}"
    out += [f"| all | | {s['successes']}/{s['episodes']} ({rate}) | {fmt(s['steps_per_episode'], 0)} |", ""]
    sv = s["predict_ms_server"]
    hz = "-" if s["control_loop_hz"] is None else f"{s['control_loop_hz']:.2f}"
    share = "-" if s["predict_share"] is None else f"{s['predict_share']:.1%}"
    out += [
        "| measure | median (min-max) |",
        "|---|---|",
        f"| predict round trip, client ms ({s['predicts']} predict(s)) | {fmt(s['predict_ms_client'])} |",
        f"| server total ms (receipt to reply) | {fmt(sv['total'])} |",
        f"| server inference ms | {fmt(sv['inference'])} |",
        f"| server vision / prefill / denoise ms | {fmt(sv['vision'])} / {fmt(sv['prefill'])} / {fmt(sv['denoise'])} |",
        f"| env step ms (simulation + rendering) | {fmt(s['env_step_ms'])} |",
        f"| control loop, env steps/s (predicts included; {share} of the loop in predict) | {hz} |",
        f"| reset + settle s per episode | {fmt(s['reset_s'], 2)} |",
        "",
    ]
    notes = [f"- task {e['task_id']} episode {e['episode']}: {e['end']}" + (f" ({e['error']})" if e.get("error") else "")
             for e in res["episodes"] if e["end"] not in ("success", "step_limit")]
    out += ["Episodes skipped or cut short:" + (" none." if not notes else ""), *notes, ""]
    if res["warnings"]:
        out += ["Warnings:", *[f"- {w}" for w in res["warnings"]], ""]
    if res.get("smoke_checks"):
        out += ["Smoke checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in res["smoke_checks"].items()), ""]
    return "\n".join(out)


# ---------------------------------------------------------------- main
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Per-arch defaults: see eval/libero_client.py and eval/README.md.")
    p.add_argument("model", nargs="?", help="GGUF file to serve (or --demo, or --server)")
    p.add_argument("--demo", action="store_true", help="serve vla-server's built-in random-weight demo model")
    p.add_argument("--server", help="address of a running vla-server instead of starting one")
    p.add_argument("--server-bin", help="vla-server binary (default: $VLA_SERVER_BIN, target/release, target/debug)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="extra vla-server argument, repeatable (e.g. --server-arg=--backend --server-arg=vulkan)")
    p.add_argument("--suite", default="libero_spatial", choices=sorted(MAX_STEPS))
    p.add_argument("--tasks", default="", help="comma-separated task ids (default: all of the suite)")
    p.add_argument("--episodes", type=int, default=N_INIT_STATES, help="per task, from init state 0 on (at most 50)")
    p.add_argument("--seed", type=int, default=7, help="env.seed (openpi's LIBERO example uses 7)")
    p.add_argument("--max-steps", type=int, help="policy steps per episode (default per suite: "
                   + ", ".join(f"{k} {v}" for k, v in MAX_STEPS.items()) + ")")
    p.add_argument("--replan", type=int, help="actions executed per chunk before the next request (default per arch)")
    p.add_argument("--gripper", choices=libero_client.GRIPPER_MODES, help="gripper output conversion (default per arch)")
    p.add_argument("--tokens", help="comma-separated token ids sent instead of the instruction (models without a tokenizer)")
    p.add_argument("--resolution", type=int, default=256, help="camera render size (the server resizes)")
    p.add_argument("--timeout-ms", type=int, default=600_000, help="per predict")
    p.add_argument("--out", help="results prefix (default libero_results/SUITE_ARCH_TIME): writes PREFIX.json and PREFIX.md")
    p.add_argument("--smoke", action="store_true",
                   help=f"one task, one episode, {SMOKE_STEPS} steps; checks the loop end to end (exit 1 if not)")
    a = p.parse_args(argv)
    if sum(bool(x) for x in (a.model, a.demo, a.server)) != 1:
        p.error("give exactly one of MODEL, --demo, --server")
    if a.server:
        from vla_client import check_address

        try:
            check_address(a.server)
        except ValueError as e:
            p.error(f"--server: {e}")
    if not 1 <= a.episodes <= N_INIT_STATES:
        p.error(f"--episodes {a.episodes}: LIBERO has {N_INIT_STATES} fixed init states per task")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    started = datetime.datetime.now().astimezone()
    t_start = time.perf_counter()
    try:
        from libero.libero import benchmark, get_libero_path  # optional dependency: the LIBERO venv
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as e:
        sys.exit(f"error: LIBERO is not importable ({e}): run through eval/run_libero.sh"
                 " (`eval/run_libero.sh --install` makes its venv)")
    from vla_client import VlaClient, VlaError

    suite = benchmark.get_benchmark_dict()[args.suite]()
    task_ids = [int(t) for t in args.tasks.split(",") if t.strip()] or list(range(suite.n_tasks))
    episodes_per_task = args.episodes
    max_steps = args.max_steps or MAX_STEPS[args.suite]
    if args.smoke:
        task_ids, episodes_per_task, max_steps = task_ids[:1], 1, min(max_steps, SMOKE_STEPS)
    bad = [t for t in task_ids if not 0 <= t < suite.n_tasks]
    if bad:
        sys.exit(f"error: task ids {bad}: {args.suite} has tasks 0..{suite.n_tasks - 1}")
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else None

    server = None
    if args.server:
        addr, model = args.server, args.server
    else:
        model = "--demo" if args.demo else args.model
        server = Server(server_binary(args.server_bin), ["--demo"] if args.demo else [args.model], args.server_arg)
        addr = server.addr.replace("0.0.0.0", "127.0.0.1")

    episodes: list[dict] = []
    tasks: list[dict] = []
    res: dict = {}
    try:
        with VlaClient(addr, timeout_ms=args.timeout_ms) as client:
            info = client.info()
            io = PolicyIO(info, replan=args.replan, gripper=args.gripper, prompt_tokens=tokens)
            if args.smoke and args.replan is None and io.replan > SMOKE_REPLAN:
                io.replan = SMOKE_REPLAN
                io.warnings.append(f"smoke: {SMOKE_REPLAN} actions per chunk (not the arch's default), to ask for several chunks")
            log(f"server: {info['arch']} on {info['backend']}: {info['n_images']} camera(s) at "
                f"{info['image_height']}x{info['image_width']}, state {info['state_dim']}, "
                f"chunk {io.rows} x {info['action_dim']}")
            log(f"mapping: {io.replan} action(s) per chunk, gripper {io.gripper} ({io.spec.source})")
            for w in io.warnings:
                log(f"WARNING: {w}")
            # One predict on blank frames before any simulator is built: a request the server
            # refuses (no tokenizer, wrong sizes) fails here in a second, and the model is warm.
            import numpy as np

            blank = {k: np.zeros((args.resolution, args.resolution, 3), np.uint8) for k in libero_client.CAMERAS}
            blank.update(robot0_eef_pos=np.zeros(3), robot0_eef_quat=np.array([0.0, 0.0, 0.0, 1.0]),
                         robot0_gripper_qpos=np.zeros(2))
            t0 = time.perf_counter()
            try:
                client.predict(*io.inputs(blank), **io.predict_kwargs(suite.get_task(task_ids[0]).language))
            except VlaError as e:
                hint = "; pass --tokens IDS for a model without a tokenizer" if "tokenizer" in e.message else ""
                sys.exit(f"error: the server refused the first request: {e}{hint}")
            log(f"warm-up predict: {(time.perf_counter() - t0) * 1e3:.0f} ms (not counted)")
            log(f"{args.suite}: tasks {task_ids}, {episodes_per_task} episode(s) each, at most {max_steps} steps"
                + (" (smoke)" if args.smoke else ""))
            abort = None
            for tid in task_ids:
                task = suite.get_task(tid)
                trec = {"task_id": tid, "instruction": task.language, "episodes": 0, "successes": 0}
                tasks.append(trec)
                env = None
                if abort is None:
                    try:
                        bddl = pathlib.Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
                        t0 = time.perf_counter()
                        env = OffScreenRenderEnv(bddl_file_name=str(bddl), camera_heights=args.resolution,
                                                 camera_widths=args.resolution)
                        env.seed(args.seed)
                        init_states = suite.get_task_init_states(tid)
                        log(f"task {tid}: {task.language} (env built in {time.perf_counter() - t0:.1f} s)")
                    except Exception as e:
                        env = None
                        why = f"env build failed: {type(e).__name__}: {e}"
                        log(f"task {tid}: SKIPPED, {why}")
                for ep in range(episodes_per_task):
                    if env is None:
                        episodes.append({"task_id": tid, "episode": ep, "skipped": True, "success": False, "steps": 0,
                                         "end": "skipped", "error": abort or why})
                        continue

                    def progress(steps, predicts, _tid=tid, _ep=ep):
                        if sys.stdout.isatty():
                            print(f"\r  task {_tid} episode {_ep}: step {steps}/{max_steps}, {predicts} predicts",
                                  end="", flush=True)
                        elif predicts == 1 or predicts % 20 == 0:
                            log(f"  task {_tid} episode {_ep}: step {steps}/{max_steps}, {predicts} predicts")

                    rec = run_episode(client, env, init_states[ep], task.language, io, max_steps, progress)
                    rec.update(task_id=tid, episode=ep, init_state=ep)
                    if rec["end"] == "step_limit" and max_steps < MAX_STEPS[args.suite]:
                        rec["end"] = f"cut_short ({'smoke: ' if args.smoke else ''}{max_steps} of {MAX_STEPS[args.suite]} steps)"
                    episodes.append(rec)
                    trec["episodes"] += 1
                    trec["successes"] += rec["success"]
                    if sys.stdout.isatty():
                        print("\r", end="")
                    hz = rec["steps"] / rec["loop_s"] if rec["loop_s"] else 0.0
                    log(f"  task {tid} episode {ep}: {'SUCCESS' if rec['success'] else 'failure'} ({rec['end']}"
                        + (f": {rec['error']}" if rec["error"] else "")
                        + f"), {rec['steps']} steps, {rec['predicts']} predicts, {hz:.2f} steps/s;"
                        f" {sum(e['success'] for e in episodes)}/{sum(1 for e in episodes if not e.get('skipped'))} so far")
                    if rec["end"] == "predict_error" and rec["error"].split(":")[0] in ("BAD_REQUEST", "UNSUPPORTED"):
                        abort = f"aborted: the server refused the request ({rec['error']})"
                        if "tokenizer" in rec["error"]:
                            abort += "; pass --tokens IDS for a model without a tokenizer"
                        log(f"ERROR: {abort}")
                        env.close()
                        env = None
                if env is not None:
                    env.close()
                ran = [e for e in episodes if e["task_id"] == tid and not e.get("skipped")]
                trec["steps"] = stats(e["steps"] for e in ran)
                log(f"task {tid}: {trec['successes']}/{trec['episodes']}")
            res = {
                "started": started.isoformat(timespec="seconds"),
                "wall_s": None,
                "config": {"suite": args.suite, "tasks": task_ids, "episodes_per_task": episodes_per_task,
                           "seed": args.seed, "max_steps": max_steps, "resolution": args.resolution,
                           "smoke": args.smoke, "model": model, "server_args": args.server_arg,
                           "settle_steps": libero_client.SETTLE_STEPS},
                "server_info": info,
                "mapping": io.describe(),
                "machine": machine(),
                "warnings": io.warnings
                + ["random weights (the built-in demo): success is expected to be 0"] * bool(args.demo),
                "tasks": tasks,
                "summary": summarize(episodes),
                "episodes": episodes,
            }
    except VlaError as e:
        sys.exit(f"error: {e}" + ("\nserver output:\n" + "".join(server.lines) if server else ""))
    finally:
        if server:
            server.stop()

    ok = True
    if args.smoke:
        ran = [e for e in episodes if not e.get("skipped")]
        first = ran[0] if ran else {}
        res["smoke_checks"] = {
            "observations reached the server, chunks came back": first.get("predicts", 0) >= 2,
            "chunk shape as INFO": first.get("chunk_shape") == [io.rows, int(info["action_dim"])],
            "env stepped": first.get("steps", 0) >= 1,
            "no error": first.get("error") is None,
        }
        ok = all(res["smoke_checks"].values())
    res["wall_s"] = time.perf_counter() - t_start
    prefix = pathlib.Path(args.out or f"libero_results/{args.suite}_{info['arch']}_{started:%Y%m%d-%H%M%S}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = prefix.with_name(prefix.name + ".json"), prefix.with_name(prefix.name + ".md")
    json_path.write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    md_path.write_text(md + "\n")
    log("")
    log(md)
    log(f"results: {json_path} and {md_path} ({res['wall_s']:.0f} s in all)")
    if args.smoke:
        log("smoke: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
