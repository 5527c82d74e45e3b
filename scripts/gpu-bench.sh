#!/usr/bin/env bash
# One GPU benchmark, from release binaries (no Rust toolchain, no network needed):
#   scripts/gpu-bench.sh [--bin DIR] [--work DIR] [--out DIR] [--models LIST] [--quick] [--allow-cpu]
#
#   --bin DIR    where vla-bench and vla-gguf are (default: $VLA_BIN, else target/release
#                next to this script)
#   --work DIR   where the model files are generated (default /tmp/vla-gpu-bench; ~8.5 GB)
#   --out DIR    where the table (gpu-bench.md) and raw JSON go (default: --work)
#   --models LIST  ARCH:DTYPE entries, space-separated (default "smolvla:f32 pi05:f16 act:f32";
#                any served arch, e.g. "act:f32 evo1:bf16 vla_adapter:bf16 openvla_oft:bf16
#                bitvla:f32 octo:f32 turbovla:f32" (BitVLA's ternary matrices run as integers
#                whatever the DTYPE))
#   --quick      small random-weight configs instead of the released sizes (checks the
#                script itself, e.g. on lavapipe)
#   --allow-cpu  go on when the only Vulkan adapter is a CPU one (llvmpipe)
#   VLA_GPU_BENCH_KERNELS  settings to compare (default "default f16 bf16 nosplit vec4 bounded
#                          gemmattn portable"; also: nofuse)
#   VLA_GPU_BENCH_TILES    GEMM tiles to sweep (default "s m l"; empty: no sweep)
#
# Models: full-size random-weight SmolVLA (smolvla_base sizes, 2 cameras at 512, f32
# weights), pi0.5 (SigLIP So400m + Gemma 2B + 300M, 2 cameras at 224, f16 weights) and ACT
# (ResNet-18 + lerobot's default transformer, 2 cameras at 480 x 640, f32 weights).
# For each: latency per stage on `vulkan` with each kernel setting (the GPU kernel set the
# adapter gets by default; the same with f16 and with bf16 activations; without split-K; its
# vec4 GEMM variant; the default with naga's forced loop
# bounding; the lavapipe-grade kernels), then one profiled predict (per-kernel GPU time, GFLOP/s and GB/s grouped by
# stage and op), a GEMM tile sweep, then `ggml-cuda`
# where the binaries were built with it (scripts/build-ggml-gpu.sh cuda); with vla-quantize
# beside them, SmolVLA with Q8_0 matrices (default, bf16 and portable settings) and both
# models as FoldQuant W8A8 (integer kernels; default kernel setting only) too. SmolVLA f32 also runs once with 640x480 camera frames
# (resized on the device). Copy the binaries with
# `cp target/release/{vla-bench,vla-gguf,vla-quantize} DIR` (~17 MiB stripped).
set -uo pipefail

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; }
here="$(cd "$(dirname "$0")" && pwd)"
bin="${VLA_BIN:-$here/../target/release}"
work=/tmp/vla-gpu-bench
out=""
quick=0
allow_cpu=0
models_arg="smolvla:f32 pi05:f16 act:f32"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bin) bin="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --models) models_arg="$2"; shift 2 ;;
        --quick) quick=1; shift ;;
        --allow-cpu) allow_cpu=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; echo "error: unknown argument $1" >&2; exit 2 ;;
    esac
done
out="${out:-$work}"
mkdir -p "$work" "$out" || exit 1
report="$out/gpu-bench.md"
: >"$report"
say() { echo "$*" | tee -a "$report"; }
die() { echo "gpu-bench: error: $*" >&2; exit 1; }

for b in vla-bench vla-gguf; do
    [[ -x "$bin/$b" ]] || die "$bin/$b not found: build with 'cargo build --release' and pass --bin DIR"
done
bench="$bin/vla-bench"

# 1. A Vulkan loader and a GPU driver.
if ! ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null; then
    die "no Vulkan loader (libvulkan.so.1): install libvulkan1 (Debian/Ubuntu) or vulkan-loader, and the GPU's Vulkan driver (NVIDIA: the proprietary driver's ICD; AMD/Intel: mesa-vulkan-drivers)"
fi
probe=$("$bench" --demo --backend vulkan --iters 1 --warmup 0 --json 2>&1)
rc=$?
if [[ $rc -ne 0 && -z "${VK_DRIVER_FILES:-}" ]]; then
    # containers often mount the NVIDIA driver here without registering its ICD
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
        [[ -f $icd ]] || continue
        echo "no adapter with the default ICDs; trying VK_DRIVER_FILES=$icd"
        export VK_DRIVER_FILES=$icd
    done
    probe=$("$bench" --demo --backend vulkan --iters 1 --warmup 0 --json 2>&1)
    rc=$?
fi
[[ $rc -eq 0 ]] || die "no Vulkan adapter could run the demo model:
$probe
(check the driver's ICD file, e.g. VK_DRIVER_FILES=/usr/share/vulkan/icd.d/nvidia_icd.json)"
adapter=$(echo "$probe" | sed -n 's/.*"backend":"\([^"]*\)".*/\1/p')
if echo "$adapter" | grep -qi 'llvmpipe\|lavapipe\|(cpu'; then
    [[ $allow_cpu == 1 ]] || die "the only Vulkan adapter is a CPU one ($adapter): install the GPU's Vulkan driver, or pass --allow-cpu"
fi

say "# vla-rs GPU benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say "- adapter: $adapter"
if command -v nvidia-smi >/dev/null 2>&1; then
    say "- nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
fi
case "$(echo "$adapter" | tr '[:lower:]' '[:upper:]')" in
    *H200*) peak="67 TFLOP/s f32 (no tensor cores from WGSL), 4.8 TB/s (datasheet)" ;;
    *H100*) peak="67 TFLOP/s f32 (SXM; no tensor cores from WGSL), 3.35 TB/s (datasheet)" ;;
    *) peak="unknown for this adapter" ;;
esac
say "- peak: $peak"
say "- binaries: $("$bench" --version)"

# 2. The models (random weights, generated here, kept for reruns).
full=--full
[[ $quick == 1 ]] && full=""
read -ra models <<<"$models_arg"
[[ ${#models[@]} -gt 0 ]] || die "--models: no model given"
has() { [[ " ${models[*]} " == *" $1 "* ]]; }
# ARCH:DTYPE -> its file, and its label in the tables
model_file() { echo "$work/${1%%:*}${full:+-full}-${1##*:}.gguf"; }
model_label() { echo "${1%%:*}${full:+ full} (${1##*:} weights)"; }
for m in "${models[@]}"; do
    arch=${m%%:*} dtype=${m##*:}
    f=$(model_file "$m")
    if [[ ! -s "$f" ]]; then
        echo "generating $f ..."
        "$bin/vla-gguf" demo --arch "$arch" $full --dtype "$dtype" --force "$f" >/dev/null ||
            die "could not write $f"
    fi
done
# SmolVLA with Q8_0 matrices (vision tower too) when vla-quantize came along.
if [[ -x "$bin/vla-quantize" ]] && has smolvla:f32; then
    f="$work/smolvla${full:+-full}-q8_0.gguf"
    if [[ ! -s "$f" ]]; then
        echo "quantizing $f ..."
        "$bin/vla-quantize" "$work/smolvla${full:+-full}-f32.gguf" --out "$f" \
            --type Q8_0 --vision >/dev/null || die "could not write $f"
    fi
    models+=("smolvla:q8_0")
    # FoldQuant W8A8 (uncalibrated export) of both models: the integer kernels
    for src in smolvla:f32 pi05:f16; do
        has "$src" || continue
        f="$work/${src%%:*}${full:+-full}-fq-w8a8.gguf"
        if [[ ! -s "$f" ]]; then
            echo "quantizing $f ..."
            # a small config may have no projection with sides multiple of 64: skip it
            if ! "$bin/vla-quantize" "$(model_file "$src")" --out "$f" --type fq-w8a8 \
                >/dev/null 2>"$f.err"; then
                echo "no FoldQuant ${src%%:*}: $(tail -1 "$f.err")"
                continue
            fi
        fi
        models+=("${src%%:*}:fq-w8a8")
    done
fi

# 3. Latency per stage, per kernel set; then a profile of the default set.
json_field() { # FILE KEY -> median of a stage, or the value
    python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "?"
import json, sys
d = json.load(open(sys.argv[1]))
v = d.get(sys.argv[2])
if isinstance(v, dict): v = v.get("median")
print("n/a" if v is None else (f"{v:.1f}" if isinstance(v, float) else v))
PY
}
iters=5
warmup=2
# Kernel settings to compare: default (the adapter's own choice), f16 / bf16 (the default
# with activations stored in 16 bits, VLA_WGPU_ACT_DTYPE), nosplit (no split-K for the
# action expert's products, VLA_WGPU_SPLIT_K=0), vec4 (the GEMM's 4 x 4
# tiles on named vec4 accumulators, VLA_WGPU_GEMM_VEC4=1), bounded (naga's forced loop
# bounding back on, VLA_WGPU_LOOP_BOUNDING=1: wgpu's default, under which every matmul ran
# at 32-530 GFLOP/s on an H200), gemmattn (attention as two GEMMs and a softmax instead of
# the fused tiled flash kernel, VLA_WGPU_FLASH_ATTN=0), portable (the kernels for CPU
# adapters); not by default: nofuse (no fusion across graph nodes: each of a layer's q, k,
# v projections and ropes its own dispatch, VLA_WGPU_FUSE_NODES=0).
kernel_sets="${VLA_GPU_BENCH_KERNELS:-default f16 bf16 nosplit vec4 bounded gemmattn portable}"
# A setting slower than this (ms a predict) gets 2 timed runs after 1 warm-up.
slow_ms=2000
say ""
say "## Latency (ms, medians of $iters after $warmup warm-up)"
say ""
say "| model | backend | kernels | vision | prefill | denoise | total | submits | dispatches |"
say "|---|---|---|---|---|---|---|---|---|"
run_one() { # MODEL-FILE LABEL BACKEND KERNELS [ENV...]
    local f=$1 label=$2 backend=$3 kernels=$4
    shift 4
    # camera frames of another size than the model's: the `frame*` settings
    local frame=()
    [[ $kernels == frame640x480 ]] && frame=(--frame 640x480)
    local j="$out/$(basename "$f" .gguf)-$backend-$kernels.json"
    # a probe predict first (after one warm-up: pipelines compile on first use): slow
    # settings get fewer runs
    local n=$iters w=$warmup
    if env "$@" timeout 120 "$bench" "$f" --backend "$backend" --iters 1 \
        --warmup 1 "${frame[@]}" --json >"$j" 2>"$j.err"; then
        local probe_ms
        probe_ms=$(json_field "$j" total_ms)
        if [[ $probe_ms != "?" && ${probe_ms%.*} -gt $slow_ms ]]; then
            n=2 w=0 kernels="$kernels (median of 2)"
        fi
    fi
    if ! env "$@" timeout 240 "$bench" "$f" --backend "$backend" --iters $n \
        --warmup $w "${frame[@]}" --json >"$j" 2>"$j.err"; then
        say "| $label | $backend | $kernels | failed: $(tail -1 "$j.err") | | | | | |"
        return
    fi
    say "| $label | $backend | $kernels | $(json_field "$j" vision_ms) | $(json_field "$j" prefill_ms) | $(json_field "$j" denoise_ms) | $(json_field "$j" total_ms) | $(json_field "$j" submits) | $(json_field "$j" dispatches) |"
}
has_cuda=0
"$bench" --demo --backend ggml-cuda --iters 1 --warmup 0 --json >/dev/null 2>&1 && has_cuda=1
for m in "${models[@]}"; do
    f=$(model_file "$m")
    label=$(model_label "$m")
    sets=$kernel_sets
    case $m in
        *:fq-*) sets=default ;;                 # its own kernels: one setting
        *:q8_0) sets="default bf16 portable" ;; # gemm_q vs matmul_q, 16-bit around them
        smolvla:f32) sets="$sets frame640x480" ;; # + camera frames resized on the device
    esac
    for k in $sets; do
        case $k in
            frame640x480) run_one "$f" "$label" vulkan frame640x480 ;;
            default) run_one "$f" "$label" vulkan default ;;
            f16 | bf16) run_one "$f" "$label" vulkan "$k" "VLA_WGPU_ACT_DTYPE=$k" ;;
            nosplit) run_one "$f" "$label" vulkan nosplit VLA_WGPU_SPLIT_K=0 ;;
            nofuse) run_one "$f" "$label" vulkan nofuse VLA_WGPU_FUSE_NODES=0 ;;
            bounded) run_one "$f" "$label" vulkan bounded VLA_WGPU_LOOP_BOUNDING=1 ;;
            vec4) run_one "$f" "$label" vulkan vec4 VLA_WGPU_GEMM_VEC4=1 ;;
            gemmattn) run_one "$f" "$label" vulkan gemmattn VLA_WGPU_FLASH_ATTN=0 ;;
            *) run_one "$f" "$label" vulkan "$k" "VLA_WGPU_KERNELS=$k" ;;
        esac
    done
    [[ $has_cuda == 1 ]] && run_one "$f" "$label" ggml-cuda ggml
done
if [[ $has_cuda == 0 ]]; then
    say ""
    say "ggml-cuda: not in these binaries (build them with scripts/build-ggml-gpu.sh cuda)."
fi

say ""
say "## Batched predicts (vla-bench --batch 8: N requests in one run, default kernels)"
say ""
say "| model | N | batch ms (median) | chunks/s | vs N = 1 |"
say "|---|---|---|---|---|"
for m in "${models[@]}"; do
    f=$(model_file "$m")
    label=$(model_label "$m")
    j="$out/$(basename "$f" .gguf)-batch.json"
    if ! timeout 300 "$bench" "$f" --backend vulkan --iters 2 --warmup 1 --batch 8 \
        --json >"$j" 2>"$j.err"; then
        say "| $label | failed: $(tail -1 "$j.err") | | | |"
        continue
    fi
    python3 - "$j" "$label" <<'PY' | while read -r row; do say "$row"; done
import json, sys
for r in json.load(open(sys.argv[1]))["batch"]:
    print(f"| {sys.argv[2]} | {r['size']} | {r['median_ms']:.1f} | {r['chunks_per_s']:.1f} | {r['throughput_ratio']:.2f}x |")
PY
done

say ""
say "## Kernel profiles (one profiled predict after one warm-up, default kernels; top 30 rows)"
for m in "${models[@]}"; do
    f=$(model_file "$m")
    # kept: the tile sweep's default row reads it too
    j="$out/$(basename "$f" .gguf)-tile-default.json"
    say ""
    say "### $(model_label "$m")"
    say ""
    if ! timeout 240 "$bench" "$f" --backend vulkan --iters 1 --warmup 1 --profile \
        --json >"$j" 2>"$j.err"; then
        say "failed: $(tail -1 "$j.err")"
        continue
    fi
    python3 - "$j" <<'PY' 2>&1 | tee -a "$report"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d.get("profile", [])
total = sum(r["ms"] for r in rows)
calls = {s: sum(r["calls"] for r in rows if r["stage"] == s) for s in ("vision", "prefill", "denoise")}
print(f"{sum(r['calls'] for r in rows)} dispatches ({', '.join(f'{s} {n}' for s, n in calls.items())}), "
      f"{total:.2f} ms of kernel time")
print()
print("| stage | op | kernel | calls | ms | % | GFLOP/s | GB/s |")
print("|---|---|---|---|---|---|---|---|")
for r in rows[:30]:
    print(f"| {r['stage']} | {r['op']} | {r['kernel']} | {r['calls']} | {r['ms']:.3f} | "
          f"{100 * r['ms'] / max(total, 1e-12):.1f} | {r['gflops']:.1f} | {r['gbps']:.1f} |")
PY
done

# 4. The GEMM tile sweep: each tile forced on every product (VLA_WGPU_GEMM_TILE), matmul
# and attention time per stage from one profiled predict.
tiles="${VLA_GPU_BENCH_TILES-s m l}"
if [[ -n "$tiles" ]]; then
    say ""
    say "## GEMM tiles (GPU kernel set; one profiled predict after one warm-up; ms, GFLOP/s)"
    say ""
    say "| model | tile | vision matmul | prefill matmul | denoise matmul | attention (all) | kernels total |"
    say "|---|---|---|---|---|---|---|"
    for m in "${models[@]}"; do
        [[ $m == *:fq-* ]] && continue # no float GEMM to tile
        f=$(model_file "$m")
        label=$(model_label "$m")
        probe=$(json_field "$out/$(basename "$f" .gguf)-vulkan-default.json" total_ms)
        if [[ $probe == "?" || ${probe%.*} -gt $slow_ms ]]; then
            say "| $label | (skipped: the default predict takes $probe ms) | | | | | |"
            continue
        fi
        for t in default $tiles; do
            j="$out/$(basename "$f" .gguf)-tile-$t.json"
            # the default's profile was made above
            if [[ $t != default ]] && ! VLA_WGPU_GEMM_TILE=$t timeout 240 "$bench" "$f" \
                --backend vulkan --iters 1 --warmup 1 --profile --json >"$j" 2>"$j.err"; then
                say "| $label | $t | failed: $(tail -1 "$j.err") | | | | |"
                continue
            fi
            row=$(python3 - "$j" <<'PY' 2>/dev/null || echo "| ? | ? | ? | ? | ? |"
import json, sys
rows = json.load(open(sys.argv[1])).get("profile", [])
def cell(stage, op):
    r = [x for x in rows if x["stage"] == stage and x["op"] == op]
    ms = sum(x["ms"] for x in r)
    gf = sum(x["gflops"] * x["ms"] for x in r) / ms if ms else 0.0
    return f"{ms:.1f} ({gf:.0f})"
att = sum(x["ms"] for x in rows if x["op"] == "attention")
total = sum(x["ms"] for x in rows)
print(f"| {cell('vision', 'matmul')} | {cell('prefill', 'matmul')} | {cell('denoise', 'matmul')} | {att:.1f} | {total:.1f} |")
PY
)
            say "| $label | $t $row"
        done
    done
fi
echo
echo "wrote $report"
