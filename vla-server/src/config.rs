//! Server settings: command-line flags, each also a key of the "runtime" object of a
//! `--config FILE.json` (the command line wins), and the refusal of environment variables
//! that look like settings. Nothing unknown is ignored silently.

use crate::serve::{QueueMode, ServeOptions};
use crate::{Error, Result};
use clap::Parser;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vla::backend::ActDtype;
use vla::config::limits::MAX_STEPS;
use vla::gguf::GgmlType;
use vla::policy::RuntimeOptions;

#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "vla-server",
    version,
    about = "Serve a VLA policy (one GGUF) over ZeroMQ",
    override_usage = "vla-server [OPTIONS] <MODEL.gguf>\n       vla-server [OPTIONS] --demo",
    long_about = "Serve a VLA policy (one GGUF) over ZeroMQ, with vla.cpp's protobuf wire protocol \
                  (docs/PROTOCOL.md). Every option is also a key of the \"runtime\" object in \
                  --config FILE.json; the command line wins over the file.",
    after_help = "Examples:\n  vla-server --demo\n  vla-server --backend vulkan --bind tcp://*:5555 smolvla.gguf\n  vla-server --config serve.json model.gguf"
)]
pub struct ServerArgs {
    /// The model file (a GGUF: `vla-convert` writes one from a lerobot checkpoint). Omit
    /// with --demo.
    #[arg(
        value_name = "MODEL.gguf",
        required_unless_present = "demo",
        conflicts_with = "demo"
    )]
    pub model: Option<PathBuf>,
    /// Serve a small built-in SmolVLA-shaped model with random weights (no file needed).
    #[arg(long)]
    pub demo: bool,
    /// Where to listen: a ZeroMQ endpoint, tcp://HOST:PORT or ipc://PATH
    /// (`tcp://127.0.0.1:*` picks a free port) [default: tcp://*:5555]
    #[arg(long, value_name = "ENDPOINT")]
    pub bind: Option<String>,
    /// Where the model runs: cpu | vulkan | metal | dx12 | gl | wgpu (any GPU adapter) |
    /// ggml | ggml-cpu | ggml-cuda | ggml-vulkan | ggml-sycl | ggml:<DEVICE> [default: cpu]
    #[arg(long, value_name = "BACKEND")]
    pub backend: Option<String>,
    /// JSON file with a "runtime" object holding any of these options (snake_case keys).
    #[arg(long, value_name = "FILE.json")]
    pub config: Option<PathBuf>,
    /// How activations (the KV cache included) are stored: f32 (default), f16 or bf16;
    /// kernels accumulate in f32. 16-bit on the wgpu backends only; f16 needs the adapter's
    /// shader-f16 (bf16 runs on every adapter).
    #[arg(long, value_name = "f32|f16|bf16")]
    pub act_dtype: Option<String>,
    /// Re-encode the matmul weights to this type at load; default: as stored in the file.
    #[arg(long, value_name = "f32|f16|bf16")]
    pub weight_dtype: Option<String>,
    /// Always use the flash-style attention kernel (wgpu); default: chosen by length.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub flash_attn: Option<bool>,
    /// Matmul precision: default | f32. Every kernel here accumulates in f32, so both
    /// give the same results; the key exists for vla.cpp config compatibility.
    #[arg(long, value_name = "default|f32")]
    pub mm_prec: Option<String>,
    /// Embodiment: for GR00T, the tag or id whose weights and statistics to use (default:
    /// the model's; an unknown one is an error listing them); for other models, the set of
    /// normalisation statistics, for files that carry several. Config key: embodiment.
    #[arg(long, value_name = "NAME|ID")]
    pub embodiment: Option<String>,
    /// Normalisation statistics for a model file that carries none (docs/GGUF.md): vla.cpp's
    /// GR00T N1.5 files written from lerobot checkpoints, with the dataset_statistics.json
    /// its converter writes beside them; vla.cpp's VLA-JEPA files, with the lerobot
    /// checkpoint folder they were converted from. Config key: statistics.
    #[arg(long, value_name = "FILE.json")]
    pub statistics: Option<PathBuf>,
    /// Denoising steps (1-1000); default: the model's own. Config key: num_steps.
    #[arg(long, value_name = "N")]
    pub steps: Option<usize>,
    /// CPU threads (cpu and ggml-cpu backends) [default: all cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// latest: one pending request per client, an older one is answered "superseded";
    /// fifo: every request in arrival order [default: latest]
    #[arg(long, value_name = "latest|fifo")]
    pub queue: Option<String>,
    /// Pending requests beyond which new ones are answered "queue full" [default: 16]
    #[arg(long, value_name = "N")]
    pub max_queue: Option<usize>,
    /// Batch requests across clients (several robots on one model): when the model is free
    /// it takes up to N queued requests and runs them as one batched predict, each client
    /// getting its own chunk. Pays on GPUs, which one request leaves mostly idle; on the cpu
    /// backend a predict is compute-bound and gains little. 1..=256, at most --max-queue
    /// [default: 1]
    #[arg(long, value_name = "N")]
    pub max_batch: Option<usize>,
    /// With --max-batch above 1: how long the oldest queued request may wait for others to
    /// fill a batch while the model is free (0: run what is queued now). Up to 10000
    /// [default: 0]
    #[arg(long, value_name = "MS")]
    pub batch_wait_ms: Option<u64>,
    /// Batched predicts: run each matrix product once over all the requests' rows (true),
    /// or every op on each request's rows apart, each chunk bit for bit the one alone
    /// (false). Default: stacked on GPUs, apart on the cpu backend.
    #[arg(long, value_name = "BOOL")]
    pub stack_batch: Option<bool>,
    /// Log verbosity on stderr: error | warn | info | debug | trace [default: info]
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Also serve openpi's websocket protocol (openpi_client.WebsocketClientPolicy) on
    /// HOST:PORT (port 0 picks a free one), on the same queue; needs --openpi-keys.
    #[arg(long, value_name = "HOST:PORT")]
    pub openpi_bind: Option<String>,
    /// Where openpi observations keep the cameras (in the model's order), the state and the
    /// prompt: libero | droid | aloha (openpi's example clients) or a JSON file
    /// {"images": [...], "state": [...], "prompt": "prompt", "noise": "noise"}.
    #[arg(long, value_name = "PRESET|FILE.json")]
    pub openpi_keys: Option<String>,
    /// Require `Authorization: Api-Key KEY` from openpi clients (WebsocketClientPolicy's
    /// api_key). Prefer the config file's openpi_api_key: a command line is visible to
    /// other users of the machine.
    #[arg(long, value_name = "KEY")]
    pub openpi_api_key: Option<String>,
}

/// The "runtime" object of a config file: the same settings, vla.cpp's key names.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RuntimeKeys {
    bind: Option<String>,
    backend: Option<String>,
    act_dtype: Option<String>,
    weight_dtype: Option<String>,
    flash_attn: Option<bool>,
    mm_prec: Option<String>,
    embodiment: Option<String>,
    statistics: Option<PathBuf>,
    num_steps: Option<usize>,
    threads: Option<usize>,
    queue: Option<String>,
    max_queue: Option<usize>,
    max_batch: Option<usize>,
    batch_wait_ms: Option<u64>,
    stack_batch: Option<bool>,
    log_level: Option<String>,
    openpi_bind: Option<String>,
    openpi_keys: Option<String>,
    openpi_api_key: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    runtime: RuntimeKeys,
}

/// Keys people write by habit, with the one to use.
const RENAMED_KEYS: &[(&str, &str)] = &[
    ("steps", "num_steps"),
    ("n_threads", "threads"),
    ("device", "backend"),
];

/// Environment variables that read like settings. vla-server reads none of them: each is
/// refused, naming its flag, rather than silently ignored.
pub const REFUSED_ENV: &[(&str, &str)] = &[
    ("VLA_BACKEND", "--backend"),
    ("VLA_STEPS", "--steps"),
    ("VLA_NUM_STEPS", "--steps"),
    ("VLA_ACT_DTYPE", "--act-dtype"),
    ("VLA_WEIGHT_DTYPE", "--weight-dtype"),
    ("VLA_FLASH_ATTN", "--flash-attn"),
    ("VLA_MM_PREC", "--mm-prec"),
    ("VLA_EMBODIMENT", "--embodiment"),
    // vla.cpp's GR00T embodiment (a tag or an id, as --embodiment takes)
    ("VLA_GR00T_EMBODIMENT", "--embodiment"),
    ("VLA_THREADS", "--threads"),
    ("VLA_BIND", "--bind"),
    ("VLA_LOG_LEVEL", "--log-level"),
];

/// openpi's websocket front end: where it listens, the observation's keys, the API key.
#[derive(Debug, Clone)]
pub struct OpenpiSettings {
    pub bind: String,
    pub keys: crate::openpi::keys::KeyMap,
    pub api_key: Option<String>,
}

/// Everything the server needs, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub model: Option<PathBuf>,
    pub demo: bool,
    pub bind: String,
    /// openpi's websocket front end, when asked for.
    pub openpi: Option<OpenpiSettings>,
    pub runtime: RuntimeOptions,
    pub serve: ServeOptions,
    pub log_level: String,
}

pub const DEFAULT_BIND: &str = "tcp://*:5555";

impl Settings {
    /// Merges `args` over the config file it names (if any), checking every value.
    pub fn resolve(args: ServerArgs, env: impl Fn(&str) -> Option<String>) -> Result<Settings> {
        for (var, flag) in REFUSED_ENV {
            if env(var).is_some() {
                return Err(Error::Config(format!(
                    "environment variable {var} is not read by vla-server: use {flag} (or its key in --config) and unset {var}"
                )));
            }
        }
        let file = match &args.config {
            Some(path) => read_config(path)?,
            None => RuntimeKeys::default(),
        };
        let act_dtype = match args.act_dtype.or(file.act_dtype).as_deref() {
            None => ActDtype::F32,
            Some(name) => ActDtype::from_name(name).map_err(|_| {
                Error::Config(format!("act_dtype {name:?}: expected f32, f16 or bf16"))
            })?,
        };
        let weight_dtype = match args.weight_dtype.or(file.weight_dtype).as_deref() {
            None => None,
            Some("f32") => Some(GgmlType::F32),
            Some("f16") => Some(GgmlType::F16),
            Some("bf16") => Some(GgmlType::BF16),
            Some(other) => {
                return Err(Error::Config(format!(
                    "weight_dtype {other:?}: expected f32, f16 or bf16"
                )))
            }
        };
        let mm_prec = args
            .mm_prec
            .or(file.mm_prec)
            .unwrap_or_else(|| "default".into());
        if !["default", "f32"].contains(&mm_prec.as_str()) {
            return Err(Error::Config(format!(
                "mm_prec {mm_prec:?}: expected default or f32"
            )));
        }
        let num_steps = args.steps.or(file.num_steps);
        if let Some(n) = num_steps {
            if !(1..=MAX_STEPS).contains(&n) {
                return Err(Error::Config(format!(
                    "steps {n}: expected 1..={MAX_STEPS}"
                )));
            }
        }
        let threads = args.threads.or(file.threads);
        if threads == Some(0) {
            return Err(Error::Config("threads 0: expected at least 1".into()));
        }
        let queue = match args.queue.or(file.queue).as_deref() {
            None | Some("latest") => QueueMode::Latest,
            Some("fifo") => QueueMode::Fifo,
            Some(other) => {
                return Err(Error::Config(format!(
                    "queue {other:?}: expected latest or fifo"
                )))
            }
        };
        let defaults = ServeOptions::default();
        let serve = ServeOptions {
            queue,
            max_queue: args
                .max_queue
                .or(file.max_queue)
                .unwrap_or(defaults.max_queue),
            max_batch: args
                .max_batch
                .or(file.max_batch)
                .unwrap_or(defaults.max_batch),
            batch_wait: match args.batch_wait_ms.or(file.batch_wait_ms) {
                Some(ms) => Duration::from_millis(ms),
                None => defaults.batch_wait,
            },
        };
        serve.validate()?;
        let log_level = args
            .log_level
            .or(file.log_level)
            .unwrap_or_else(|| "info".into());
        if !["error", "warn", "info", "debug", "trace"].contains(&log_level.as_str()) {
            return Err(Error::Config(format!(
                "log_level {log_level:?}: expected error, warn, info, debug or trace"
            )));
        }
        let openpi = match (
            args.openpi_bind.or(file.openpi_bind),
            args.openpi_keys.or(file.openpi_keys),
        ) {
            (Some(bind), Some(keys)) => Some(OpenpiSettings {
                bind,
                keys: crate::openpi::keys::KeyMap::load(&keys)?,
                api_key: args.openpi_api_key.or(file.openpi_api_key),
            }),
            (Some(_), None) => {
                return Err(Error::Config(format!(
                    "--openpi-bind needs --openpi-keys ({} or FILE.json): where the \
                     observations keep the cameras, the state and the prompt",
                    crate::openpi::keys::PRESETS.join(" | ")
                )))
            }
            (None, Some(_)) => {
                return Err(Error::Config(
                    "--openpi-keys without --openpi-bind: give the HOST:PORT to listen on".into(),
                ))
            }
            (None, None) if args.openpi_api_key.or(file.openpi_api_key).is_some() => {
                return Err(Error::Config(
                    "openpi_api_key without --openpi-bind: there is no openpi endpoint".into(),
                ))
            }
            (None, None) => None,
        };
        Ok(Settings {
            model: args.model,
            openpi,
            demo: args.demo,
            bind: args
                .bind
                .or(file.bind)
                .unwrap_or_else(|| DEFAULT_BIND.into()),
            runtime: RuntimeOptions {
                backend: args
                    .backend
                    .or(file.backend)
                    .unwrap_or_else(|| "cpu".into()),
                num_steps,
                embodiment: args.embodiment.or(file.embodiment),
                statistics: args.statistics.or(file.statistics),
                weight_dtype,
                act_dtype,
                flash_attn: args.flash_attn.or(file.flash_attn),
                threads,
                stepwise: false,
                stack_batch: args.stack_batch.or(file.stack_batch),
            },
            serve,
            log_level,
        })
    }
}

fn read_config(path: &Path) -> Result<RuntimeKeys> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
    serde_json::from_str::<ConfigFile>(&text)
        .map(|c| c.runtime)
        .map_err(|e| {
            let mut msg = format!("{}: {e}", path.display());
            for (old, new) in RENAMED_KEYS {
                if msg.contains(&format!("unknown field `{old}`")) {
                    msg += &format!(" (the key is {new:?})");
                }
            }
            Error::Config(msg)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn args(extra: &[&str]) -> ServerArgs {
        ServerArgs::try_parse_from([&["vla-server", "--demo"], extra].concat()).unwrap()
    }

    fn config(json: &str) -> (tempfile::NamedTempFile, String) {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), json).unwrap();
        let p = f.path().display().to_string();
        (f, p)
    }

    #[test]
    fn command_line_wins_over_file() {
        let (_f, path) =
            config(r#"{"runtime": {"num_steps": 4, "backend": "ggml", "threads": 3}}"#);
        let s = Settings::resolve(args(&["--config", &path, "--steps", "7"]), no_env).unwrap();
        assert_eq!(s.runtime.num_steps, Some(7));
        assert_eq!(s.runtime.backend, "ggml");
        assert_eq!(s.runtime.threads, Some(3));
        assert_eq!(s.bind, DEFAULT_BIND);
    }

    #[test]
    fn openpi_settings_come_together() {
        let (_f, path) = config(r#"{"runtime": {"openpi_keys": "droid", "openpi_api_key": "k"}}"#);
        let s = Settings::resolve(
            args(&["--config", &path, "--openpi-bind", "0.0.0.0:8000"]),
            no_env,
        )
        .unwrap();
        let o = s.openpi.unwrap();
        assert_eq!(
            (o.bind.as_str(), o.api_key.as_deref()),
            ("0.0.0.0:8000", Some("k"))
        );
        assert_eq!(o.keys.images.len(), 2);
        for (flags, needle) in [
            (
                &["--openpi-bind", "0.0.0.0:8000"][..],
                "needs --openpi-keys",
            ),
            (&["--openpi-keys", "libero"], "without --openpi-bind"),
            (&["--openpi-api-key", "k"], "there is no openpi endpoint"),
            (
                &["--openpi-bind", ":0", "--openpi-keys", "bridge"],
                "not a preset (libero, droid, aloha) nor a JSON file",
            ),
        ] {
            let e = Settings::resolve(args(flags), no_env)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{flags:?}: {e}");
        }
    }

    #[test]
    fn unknown_and_renamed_keys_are_errors() {
        let (_f, path) = config(r#"{"runtime": {"steps": 4}}"#);
        let e = Settings::resolve(args(&["--config", &path]), no_env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field `steps`") && e.contains("\"num_steps\""),
            "{e}"
        );
        let (_g, path) = config(r#"{"runtime": {}, "server": {}}"#);
        let e = Settings::resolve(args(&["--config", &path]), no_env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `server`"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        for (flags, needle) in [
            (
                &["--act-dtype", "f8"][..],
                "act_dtype \"f8\": expected f32, f16 or bf16",
            ),
            (&["--weight-dtype", "q4"], "weight_dtype"),
            (&["--mm-prec", "f16"], "mm_prec"),
            (&["--steps", "0"], "1..=1000"),
            (&["--queue", "lifo"], "latest or fifo"),
            (&["--log-level", "loud"], "log_level"),
            (&["--max-queue", "0"], "max_queue 0: expected at least 1"),
            (&["--max-batch", "0"], "max_batch 0: expected 1..=256"),
            (
                &["--max-batch", "257", "--max-queue", "300"],
                "expected 1..=256",
            ),
            (
                &["--max-batch", "32"],
                "max_batch 32 is more than max_queue 16",
            ),
            (
                &["--batch-wait-ms", "10001"],
                "batch_wait_ms 10001: expected 0..=10000",
            ),
        ] {
            let e = Settings::resolve(args(flags), no_env)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{flags:?}: {e}");
        }
    }

    #[test]
    fn settings_env_vars_are_refused_with_their_flag() {
        let env = |k: &str| (k == "VLA_NUM_STEPS").then(|| "5".to_string());
        let e = Settings::resolve(args(&[]), env).unwrap_err().to_string();
        assert!(e.contains("VLA_NUM_STEPS") && e.contains("--steps"), "{e}");
    }

    #[test]
    fn flags_map_to_runtime_options() {
        let s = Settings::resolve(
            args(&["--weight-dtype", "bf16", "--flash-attn", "--queue", "fifo"]),
            no_env,
        )
        .unwrap();
        assert_eq!(s.runtime.act_dtype, ActDtype::F32);
        let (_g, path) = config(r#"{"runtime": {"act_dtype": "bf16"}}"#);
        let f = Settings::resolve(args(&["--config", &path]), no_env).unwrap();
        assert_eq!(f.runtime.act_dtype, ActDtype::Bf16);
        let f = Settings::resolve(args(&["--config", &path, "--act-dtype", "f16"]), no_env);
        assert_eq!(f.unwrap().runtime.act_dtype, ActDtype::F16);
        assert_eq!(s.runtime.weight_dtype, Some(GgmlType::BF16));
        assert_eq!(s.runtime.flash_attn, Some(true));
        assert_eq!(s.serve.queue, QueueMode::Fifo);
    }

    #[test]
    fn batching_is_off_by_default_and_set_like_the_queue() {
        let s = Settings::resolve(args(&[]), no_env).unwrap();
        assert_eq!((s.serve.max_batch, s.serve.batch_wait), (1, Duration::ZERO));
        let (_f, path) = config(r#"{"runtime": {"max_batch": 4, "batch_wait_ms": 5}}"#);
        let s = Settings::resolve(args(&["--config", &path]), no_env).unwrap();
        assert_eq!(
            (s.serve.max_batch, s.serve.batch_wait),
            (4, Duration::from_millis(5))
        );
        let s = Settings::resolve(
            args(&[
                "--config",
                &path,
                "--max-batch",
                "8",
                "--batch-wait-ms",
                "0",
            ]),
            no_env,
        )
        .unwrap();
        assert_eq!((s.serve.max_batch, s.serve.batch_wait), (8, Duration::ZERO));
        // the file's value is checked as the flag's is
        let (_g, path) = config(r#"{"runtime": {"max_batch": 0}}"#);
        let e = Settings::resolve(args(&["--config", &path]), no_env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_batch 0"), "{e}");
        // how a batch runs: the backend's default, the file's choice, the flag's
        assert_eq!(s.runtime.stack_batch, None);
        let (_h, path) = config(r#"{"runtime": {"stack_batch": false}}"#);
        let s = Settings::resolve(args(&["--config", &path]), no_env).unwrap();
        assert_eq!(s.runtime.stack_batch, Some(false));
        let flag = args(&["--config", &path, "--stack-batch", "true"]);
        let s = Settings::resolve(flag, no_env).unwrap();
        assert_eq!(s.runtime.stack_batch, Some(true));
    }
}
