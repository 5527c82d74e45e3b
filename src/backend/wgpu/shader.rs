//! WGSL sources, their one template step, and the pipeline cache.
//!
//! Template step: a shader may contain lines `#if NAME`, `#else`, `#endif` (nestable);
//! lines between are kept when NAME is among the variant's defines. Everything else
//! (tile sizes, workgroup sizes) uses WGSL `override` constants. One file per op family,
//! one variant per (defines, constants) pair, compiled once.

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
            "{}:{}:{:?}:{:?}:{}:{}",
            self.family,
            self.entry,
            self.defines,
            self.constants,
            self.zero_workgroup_memory,
            self.bounds_checked
        )
    }
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
        let code = preprocess(v.source, &v.defines)?;
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
