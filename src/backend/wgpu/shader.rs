//! WGSL sources, their one template step, and the pipeline cache.
//!
//! Template step: a shader may contain lines `#if NAME`, `#else`, `#endif` (nestable);
//! lines between are kept when NAME is among the variant's defines. Everything else
//! (tile sizes, workgroup sizes) uses WGSL `override` constants. One file per op family,
//! one variant per (defines, constants, binding dtypes), compiled once.
//!
//! Activation bindings: a storage binding declared `var<storage, ..> NAME: ACT;` holds a
//! tensor in the dtype the host gives its binding number ([`Variant::stores`], f32 when
//! not given), and the kernel reads and writes it only through `LD(NAME, i)` (an f32
//! value) and `ST(NAME, i, v);`. The template step turns them into `array<f32>` /
//! `array<f16>` indexing, or for bf16 (packed two to a u32 word) into generated
//! `ld_NAME` / `st_NAME` functions: a bf16 store loads its half of the word and swaps it for
//! the new value with an `atomicXor`, so a neighbour written by another invocation survives.

use crate::backend::ActDtype;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A kernel variant: a family's source, an entry point, `#if` defines and override constants.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Variant {
    pub family: &'static str,
    pub source: &'static str,
    pub entry: &'static str,
    pub defines: Vec<&'static str>,
    pub constants: Vec<(&'static str, f64)>,
    /// Whether wgpu zero-fills the workgroup memory before each workgroup runs (its
    /// default). Off only for kernels in which every invocation reads only workgroup
    /// memory written earlier in the same workgroup, behind a barrier.
    pub zero_workgroup_memory: bool,
    /// Whether naga adds runtime bounds checks (clamped indices) to the kernel (wgpu's
    /// default). Off only for kernels whose every index the host proves in range.
    pub bounds_checked: bool,
    /// The dtype of each `ACT` binding, by binding number (see the module docs).
    pub stores: Vec<(u32, ActDtype)>,
}

impl Variant {
    pub fn new(family: &'static str, source: &'static str, entry: &'static str) -> Self {
        Variant {
            family,
            source,
            entry,
            defines: vec![],
            constants: vec![],
            zero_workgroup_memory: true,
            bounds_checked: true,
            stores: vec![],
        }
    }

    /// No runtime bounds checks (see [`Self::bounds_checked`]): for kernels whose indices
    /// are all in range by construction, each caller saying why.
    pub fn indices_proven(mut self) -> Self {
        self.bounds_checked = false;
        self
    }

    /// Skips the zero-fill of workgroup memory (see [`Self::zero_workgroup_memory`]).
    pub fn written_before_read(mut self) -> Self {
        self.zero_workgroup_memory = false;
        self
    }

    pub fn define(mut self, name: &'static str, on: bool) -> Self {
        if on {
            self.defines.push(name);
        }
        self
    }

    pub fn constant(mut self, name: &'static str, value: f64) -> Self {
        self.constants.push((name, value));
        self
    }

    fn key(&self) -> String {
        format!(
            "{}:{}:{:?}:{:?}:{}:{}:{:?}",
            self.family,
            self.entry,
            self.defines,
            self.constants,
            self.zero_workgroup_memory,
            self.bounds_checked,
            self.stores
        )
    }

    /// The full WGSL of this variant: template step, then the `ACT` bindings expanded.
    pub fn code(&self) -> Result<String> {
        expand_act(&preprocess(self.source, &self.defines)?, &self.stores)
    }
}

/// An `ACT` binding of a kernel: its dtype and whether the kernel writes it.
struct ActBinding {
    dtype: ActDtype,
    writes: bool,
}

/// Expands the `ACT` declarations and `LD` / `ST` accesses of `code` (see the module docs)
/// for the binding dtypes `stores`.
pub(crate) fn expand_act(code: &str, stores: &[(u32, ActDtype)]) -> Result<String> {
    let mut bindings: Vec<(String, ActBinding)> = Vec::new();
    let mut out = String::with_capacity(code.len() + 1024);
    for (i, line) in code.lines().enumerate() {
        let Some(decl) = line.strip_suffix(": ACT;") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let bad = || {
            template_err(
                i,
                "an ACT declaration is `@binding(N) var<storage, ..> NAME: ACT;`",
            )
        };
        let number: u32 = decl
            .split("@binding(")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(bad)?;
        let name = decl.rsplit('>').next().map(str::trim).ok_or_else(bad)?;
        let writes = decl.contains("read_write");
        let dtype = stores
            .iter()
            .find(|(b, _)| *b == number)
            .map_or(ActDtype::F32, |(_, d)| *d);
        let ty = match (dtype, writes) {
            (ActDtype::F32, _) => "array<f32>",
            (ActDtype::F16, _) => "array<f16>",
            (ActDtype::Bf16, false) => "array<u32>",
            (ActDtype::Bf16, true) => "array<atomic<u32>>",
        };
        out.push_str(&format!("{decl}: {ty};\n"));
        bindings.push((name.to_owned(), ActBinding { dtype, writes }));
    }
    let mut code = expand_macros(&out, &bindings)?;
    let mut bf16 = false;
    for (name, b) in &bindings {
        if b.dtype != ActDtype::Bf16 {
            continue;
        }
        bf16 = true;
        let word = if b.writes {
            format!("atomicLoad(&{name}[i >> 1u])")
        } else {
            format!("{name}[i >> 1u]")
        };
        code.push_str(&format!(
            "fn ld_{name}(i: u32) -> f32 {{ let w = {word}; \
             return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u)); }}\n"
        ));
        if b.writes {
            // only this invocation writes this half, so the half it loads stays put while
            // the xor swaps it for the new one: one read-modify-write
            code.push_str(&format!(
                "fn st_{name}(i: u32, v: f32) {{ let w = &{name}[i >> 1u]; \
                 let s = (i & 1u) << 4u; let old = (atomicLoad(w) >> s) & 0xffffu; \
                 atomicXor(w, (old ^ bf16_bits(v)) << s); }}\n"
            ));
        }
    }
    if bf16 {
        // round to nearest even; a NaN stays a (quiet) NaN
        code.push_str(
            "fn bf16_bits(v: f32) -> u32 { let b = bitcast<u32>(v); \
             return select((b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u, (b >> 16u) | 0x40u, v != v); }\n",
        );
    }
    if bindings.iter().any(|(_, b)| b.dtype == ActDtype::F16) {
        code.push_str(
            "fn f16_sat(v: f32) -> f32 { \
             return select(clamp(v, -65504.0, 65504.0), v, v != v || abs(v) > 3.4028235e38); }\n",
        );
        // on the first line, so naga's line numbers still match the source's
        code.insert_str(0, "enable f16; ");
    }
    Ok(code)
}

/// Replaces every `LD(name, i)` and `ST(name, i, v)` of `code` (arguments expanded first).
fn expand_macros(code: &str, bindings: &[(String, ActBinding)]) -> Result<String> {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let next = ["LD(", "ST("]
            .iter()
            .filter_map(|m| find_word(rest, m).map(|k| (k, *m)))
            .min();
        let Some((k, mac)) = next else {
            out.push_str(rest);
            return Ok(out);
        };
        out.push_str(&rest[..k]);
        let args_start = k + mac.len();
        let (args, len) = split_args(&rest[args_start..]).ok_or_else(|| {
            Error::Gpu(format!(
                "shader template: unbalanced {mac}...) near {:?}",
                &rest[k..(k + 40).min(rest.len())]
            ))
        })?;
        let args = args
            .iter()
            .map(|a| expand_macros(a, bindings))
            .collect::<Result<Vec<_>>>()?;
        let (name, want) = (args[0].trim(), if mac == "LD(" { 2 } else { 3 });
        let b = bindings
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b)
            .filter(|_| args.len() == want)
            .ok_or_else(|| {
                Error::Gpu(format!(
                    "shader template: {mac}{}) needs an ACT binding and {} arguments",
                    args.join(","),
                    want
                ))
            })?;
        let i = args[1].trim();
        out.push_str(&match (mac, b.dtype) {
            ("LD(", ActDtype::F32) => format!("{name}[{i}]"),
            ("LD(", ActDtype::F16) => format!("f32({name}[{i}])"),
            ("LD(", ActDtype::Bf16) => format!("ld_{name}({i})"),
            (_, ActDtype::F32) => format!("{name}[{i}] = {}", args[2].trim()),
            // finite values past f16's range saturate; infinities and NaN stay
            (_, ActDtype::F16) => format!("{name}[{i}] = f16(f16_sat({}))", args[2].trim()),
            (_, ActDtype::Bf16) => format!("st_{name}({i}, {})", args[2].trim()),
        });
        rest = &rest[args_start + len..];
    }
}

/// The byte offset of `word` in `s` where it does not continue an identifier.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = s[from..].find(word) {
        let at = from + k;
        let before = s[..at].chars().next_back();
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The comma-separated arguments of a call whose `(` precedes `s`, and the length of `s`
/// up to and including the closing `)`.
fn split_args(s: &str) -> Option<(Vec<&str>, usize)> {
    let (mut depth, mut start, mut args) = (0usize, 0usize, Vec::new());
    for (k, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' if depth > 0 => depth -= 1,
            ')' => {
                args.push(&s[start..k]);
                return Some((args, k + 1));
            }
            ',' if depth == 0 => {
                args.push(&s[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    None
}

/// Applies the `#if` / `#else` / `#endif` template step.
pub(crate) fn preprocess(source: &str, defines: &[&str]) -> Result<String> {
    let mut out = String::with_capacity(source.len());
    // whether each open #if's current branch is kept
    let mut stack: Vec<bool> = Vec::new();
    let active = |stack: &[bool]| stack.iter().all(|on| *on);
    for (i, line) in source.lines().enumerate() {
        let t = line.trim();
        let directive = t.starts_with("#if ") || t == "#else" || t == "#endif";
        if directive || !active(&stack) {
            out.push('\n'); // keep line numbers for naga's error messages
        } else {
            out.push_str(line);
            out.push('\n');
        }
        if let Some(name) = t.strip_prefix("#if ") {
            stack.push(defines.contains(&name.trim()));
        } else if t == "#else" {
            let top = stack
                .last_mut()
                .ok_or_else(|| template_err(i, "#else without #if"))?;
            *top = !*top;
        } else if t == "#endif" {
            stack
                .pop()
                .ok_or_else(|| template_err(i, "#endif without #if"))?;
        }
    }
    if !stack.is_empty() {
        return Err(template_err(source.lines().count(), "unclosed #if"));
    }
    Ok(out)
}

fn template_err(line: usize, what: &str) -> Error {
    Error::Gpu(format!("shader template line {}: {what}", line + 1))
}

#[derive(Default)]
pub(crate) struct PipelineCache {
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
}

impl PipelineCache {
    /// The pipeline of `v`, compiled on first use. With `loop_bounding` off, the module is
    /// made without naga's forced loop bounding (see [`super::WgpuOptions::loop_bounding`]);
    /// bounds checks stay on either way.
    pub fn get(
        &self,
        device: &wgpu::Device,
        v: &Variant,
        loop_bounding: bool,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = v.key();
        if let Some(p) = self
            .pipelines
            .lock()
            .expect("no panics while locked")
            .get(&key)
        {
            return Ok(p.clone());
        }
        let code = v.code()?;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(v.family),
            source: wgpu::ShaderSource::Wgsl(code.into()),
        };
        let checks = wgpu::ShaderRuntimeChecks {
            force_loop_bounding: loop_bounding,
            bounds_checks: v.bounds_checked,
            ..wgpu::ShaderRuntimeChecks::checked()
        };
        // SAFETY: forced loop bounding's contract is that no shader loops forever. Every loop in shaders/ is a `for` over a counter that
        // grows by a positive constant (or the workgroup size) towards a bound read from
        // the params, which the host builds from tensor sizes (u32_of: < 2^32) of buffers
        // that exist, so no counter can wrap before passing its bound; there are no
        // `loop`/`while` statements (shader_loops_are_counted checks the sources). Bounds
        // checks are off only for variants marked `indices_proven`, whose callers show every
        // index in range (gemm.rs).
        let module = unsafe { device.create_shader_module_trusted(desc, checks) };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(v.entry),
            layout: None,
            module: &module,
            entry_point: Some(v.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &v
                    .constants
                    .iter()
                    .map(|(k, x)| (*k, *x))
                    .collect::<Vec<_>>(),
                zero_initialize_workgroup_memory: v.zero_workgroup_memory,
            },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu(format!("compiling {} ({}): {e}", v.family, key)));
        }
        let p = Arc::new(pipeline);
        self.pipelines
            .lock()
            .expect("no panics while locked")
            .insert(key, p.clone());
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::preprocess;

    /// The safety argument for turning off forced loop bounding (PipelineCache::get)
    /// holds only while every loop is a counted `for`.
    #[test]
    fn shader_loops_are_counted() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let words: Vec<&str> = code
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .collect();
                assert!(
                    !words.contains(&"loop") && !words.contains(&"while"),
                    "{}:{}: an uncounted loop; see PipelineCache::get's SAFETY note",
                    path.display(),
                    i + 1
                );
                if words.contains(&"for") {
                    seen += 1;
                }
            }
        }
        assert!(seen > 20, "only {seen} for loops found in {dir}");
    }

    /// `ACT` bindings become typed arrays, `LD` / `ST` their reads and writes (nested
    /// accesses too), in each dtype; a malformed access is an error.
    #[test]
    fn act_bindings_expand_per_dtype() {
        use super::expand_act;
        use crate::backend::ActDtype::{Bf16, F16};
        let src = "// k\n@group(0) @binding(1) var<storage, read> x: ACT;\n\
                   @group(0) @binding(3) var<storage, read_write> y: ACT;\n\
                   fn f(i: u32) { ST(y, i + 1u, LD(x, LD(x, i) as_u32(i)) * 2.0); }\n";
        let f32 = expand_act(src, &[]).unwrap();
        assert!(f32.contains("x: array<f32>;") && f32.contains("y: array<f32>;"));
        assert!(
            f32.contains("y[i + 1u] = x[x[i] as_u32(i)] * 2.0;"),
            "{f32}"
        );
        let f16 = expand_act(src, &[(1, F16), (3, F16)]).unwrap();
        assert!(f16.starts_with("enable f16; // k"), "{f16}");
        assert!(f16.contains("y[i + 1u] = f16(f16_sat(f32(x[f32(x[i]) as_u32(i)]) * 2.0));"));
        // bf16: read-only words, atomic words where written, generated accessors
        let bf = expand_act(src, &[(1, Bf16), (3, Bf16)]).unwrap();
        assert!(bf.contains("x: array<u32>;") && bf.contains("y: array<atomic<u32>>;"));
        assert!(
            bf.contains("st_y(i + 1u, ld_x(ld_x(i) as_u32(i)) * 2.0);"),
            "{bf}"
        );
        assert!(bf.contains("fn ld_x(") && bf.contains("fn st_y(") && bf.contains("fn bf16_bits("));
        // mixed: only the bindings given a dtype change
        let mixed = expand_act(src, &[(3, Bf16)]).unwrap();
        assert!(
            mixed.contains("x: array<f32>;")
                && mixed.contains("st_y(i + 1u, x[x[i] as_u32(i)] * 2.0);")
        );
        for bad in ["LD(z, 1u)", "LD(x)", "ST(y, 1u)", "LD(x, (1u)"] {
            let src = format!("@group(0) @binding(1) var<storage, read_write> x: ACT;\n{bad}\n");
            assert!(expand_act(&src, &[]).is_err(), "{bad}");
        }
    }

    #[test]
    fn template_keeps_selected_branches() {
        let src = "a\n#if F16\nb\n#if X\nc\n#else\nd\n#endif\n#else\ne\n#endif\nf\n";
        let kept = |d: &[&str]| -> Vec<String> {
            preprocess(src, d)
                .unwrap()
                .lines()
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        };
        assert_eq!(kept(&[]), ["a", "e", "f"]);
        assert_eq!(kept(&["F16"]), ["a", "b", "d", "f"]);
        assert_eq!(kept(&["F16", "X"]), ["a", "b", "c", "f"]);
        assert_eq!(
            preprocess(src, &[]).unwrap().lines().count(),
            src.lines().count()
        );
        assert!(preprocess("#if A\n", &[]).is_err());
        assert!(preprocess("#endif\n", &[]).is_err());
    }
}
