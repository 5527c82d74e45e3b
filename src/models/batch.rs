//! Batched predicts ([`Policy::predict_batch`](crate::policy::Policy::predict_batch)) for
//! the policies whose predict is one run of one compiled graph ([`OneRun`]): each request
//! is staged on the host, the requests that one compiled set serves are grouped, and a
//! group of several runs as that set's graph for all of them ([`Graph::batched`]), compiled
//! on first sight of the batch size and kept beside the sets ([`LoadedGraphs::keep`]).

use super::common::{ms_since, LoadedGraphs};
use crate::backend::{Executable, RunCounters};
use crate::gguf::GgufFile;
use crate::graph::{batch_input, request_part, Graph};
use crate::policy::{ActionChunk, Observation};
use crate::{Error, Result, Tensor};
use std::time::Instant;

/// A request's graph inputs, by name.
pub type Named = Vec<(String, Tensor<'static>)>;

/// One request made ready to run: the compiled set it runs in, its inputs, and what
/// finishing its chunk needs besides the outputs.
pub struct Staged<K, C> {
    pub key: K,
    pub inputs: Named,
    pub ctx: C,
}

/// Each request's outputs (one `Vec<f32>` per graph output) and the run's stage times.
pub type Outputs = (Vec<Vec<Vec<f32>>>, Option<Vec<f32>>);

/// A policy whose predict is one run of one graph of a compiled set.
pub trait OneRun {
    /// What a compiled set is specific to (frame sizes, prompt shape, ...).
    type Key: PartialEq + Clone;
    /// What [`OneRun::finish`] needs of a staged request.
    type Ctx;
    /// Checks `obs` and makes its inputs.
    fn stage(&self, obs: &Observation) -> Result<Staged<Self::Key, Self::Ctx>>;
    /// Runs `requests` (one or more) in the set `key`, compiling it on first sight
    /// ([`LoadedGraphs::run`]).
    fn run(&mut self, key: &Self::Key, requests: &[Named]) -> Result<Outputs>;
    /// The chunk from a request's outputs; the caller sets its total time and counters.
    fn finish(
        &mut self,
        obs: &Observation,
        ctx: Self::Ctx,
        outputs: Vec<Vec<f32>>,
        stage_ms: Option<&[f32]>,
    ) -> Result<ActionChunk>;
    /// The backend's run counters so far.
    fn counters(&self) -> RunCounters;
}

/// [`Policy::predict_batch`](crate::policy::Policy::predict_batch) of a [`OneRun`] policy
/// (and its predict, a batch of one): a chunk or an error per request, in order.
pub fn predict_batch<P: OneRun>(p: &mut P, batch: &[Observation]) -> Vec<Result<ActionChunk>> {
    let t0 = Instant::now();
    let mut out: Vec<Option<Result<ActionChunk>>> = (0..batch.len()).map(|_| None).collect();
    let mut staged: Vec<Option<Staged<P::Key, P::Ctx>>> = Vec::with_capacity(batch.len());
    for (i, obs) in batch.iter().enumerate() {
        match p.stage(obs) {
            Ok(s) => staged.push(Some(s)),
            Err(e) => {
                out[i] = Some(Err(e));
                staged.push(None);
            }
        }
    }
    while let Some(first) = staged.iter().position(Option::is_some) {
        let key = staged[first].as_ref().expect("found").key.clone();
        let group: Vec<usize> = (first..batch.len())
            .filter(|&j| staged[j].as_ref().is_some_and(|s| s.key == key))
            .collect();
        let (inputs, ctxs): (Vec<Named>, Vec<P::Ctx>) = group
            .iter()
            .map(|&j| {
                let s = staged[j].take().expect("grouped");
                (s.inputs, s.ctx)
            })
            .unzip();
        let before = p.counters();
        let ran = match p.run(&key, &inputs) {
            Ok(ran) => vec![(group.len(), Ok(ran))],
            Err(e) if group.len() == 1 => vec![(1, Err(e))],
            // a batch the backend cannot run (its memory, say): each request alone
            Err(e) => {
                tracing::warn!(
                    "a batch of {} failed ({e}); running each alone",
                    group.len()
                );
                let mut alone = |i: &Named| p.run(&key, std::slice::from_ref(i));
                inputs.iter().map(|i| (1, alone(i))).collect()
            }
        };
        let counters = p.counters().since(&before);
        let mut ctxs = ctxs.into_iter();
        let mut next = group.iter();
        for (size, result) in ran {
            let (ctxs, js): (Vec<_>, Vec<usize>) = (ctxs.by_ref().take(size))
                .zip(next.by_ref().take(size).copied())
                .unzip();
            let (outputs, stage_ms) = match result {
                Ok(o) => o,
                Err(e) => {
                    out[js[0]] = Some(Err(e));
                    continue;
                }
            };
            for ((j, ctx), outs) in js.into_iter().zip(ctxs).zip(outputs) {
                let chunk = p.finish(&batch[j], ctx, outs, stage_ms.as_deref());
                out[j] = Some(chunk.map(|mut c| {
                    c.times.total_ms = ms_since(t0);
                    c.counters = counters;
                    c.batch = size;
                    c
                }));
            }
        }
    }
    out.into_iter()
        .map(|r| r.expect("every request answered"))
        .collect()
}

/// The [`Policy`](crate::policy::Policy) methods of a [`OneRun`] policy whose compiled
/// sets are `self.graphs` and whose info is `self.info`, inside its `impl Policy`: a predict
/// is a batch of one, and the memory figures follow each batch's runs.
macro_rules! one_run_policy {
    () => {
        fn info(&self) -> &$crate::policy::PolicyInfo {
            &self.info
        }

        fn predict(
            &mut self,
            obs: &$crate::policy::Observation,
        ) -> $crate::Result<$crate::policy::ActionChunk> {
            self.predict_batch(std::slice::from_ref(obs)).remove(0)
        }

        fn predict_batch(
            &mut self,
            batch: &[$crate::policy::Observation],
        ) -> Vec<$crate::Result<$crate::policy::ActionChunk>> {
            let out = $crate::models::batch::predict_batch(self, batch);
            self.graphs.report_memory(&mut self.info);
            out
        }

        fn profile(&self) -> Option<Vec<$crate::backend::KernelTime>> {
            self.graphs.profile()
        }
    };
}
pub(crate) use one_run_policy;

impl<K: PartialEq + Clone> LoadedGraphs<K> {
    /// Runs `requests` in the set `key`: one request in the set's own graph
    /// ([`Self::select`]), several in its graph batched for that many ([`Graph::batched`],
    /// compiled on first sight and kept, [`Self::keep`] batch sizes at most). `build` makes
    /// the set's graphs; a batched set must be one graph.
    pub fn run(
        &mut self,
        key: &K,
        requests: &[Named],
        build: impl Fn(&GgufFile) -> Result<Vec<Graph>>,
    ) -> Result<Outputs> {
        let n = requests.len();
        if n == 1 {
            self.select(key.clone(), build)?;
            let inputs: Vec<(&str, &Tensor)> =
                requests[0].iter().map(|(n, t)| (n.as_str(), t)).collect();
            let exec = self.exec(0);
            let out = exec.run(&inputs)?;
            let outs = out.iter().map(|t| t.to_vec_f32()).collect::<Result<_>>()?;
            return Ok((vec![outs], exec.stage_ms()));
        }
        let names: Vec<Vec<String>> = (requests.iter().enumerate())
            .map(|(b, r)| r.iter().map(|(name, _)| batch_input(b, name)).collect())
            .collect();
        let inputs: Vec<(&str, &Tensor)> = (names.iter().flatten())
            .zip(requests.iter().flatten())
            .map(|(name, (_, t))| (name.as_str(), t))
            .collect();
        let exec = self.batched_exec(key, n, build)?;
        let out = exec.run(&inputs)?;
        let mut per: Vec<Vec<Vec<f32>>> = vec![Vec::new(); n];
        for t in &out {
            let v = t.to_vec_f32()?;
            for (b, outs) in per.iter_mut().enumerate() {
                outs.push(request_part(&v, n, b).to_vec());
            }
        }
        Ok((per, exec.stage_ms()))
    }

    /// The set `key` batched for `n` requests: kept, or compiled now.
    fn batched_exec(
        &mut self,
        key: &K,
        n: usize,
        build: impl Fn(&GgufFile) -> Result<Vec<Graph>>,
    ) -> Result<&mut dyn Executable> {
        let at = (self.batched.iter()).position(|((k, m), _)| k == key && *m == n);
        if let Some(i) = at {
            let kept = self.batched.remove(i);
            self.batched.push(kept);
        } else {
            while self.batched.len() >= self.keep {
                let (_, e) = self.batched.remove(0);
                self.retired.add(&e.stats().runs);
            }
            let t0 = Instant::now();
            let [graph] = <[Graph; 1]>::try_from(build(&self.file)?).map_err(|g| {
                Error::InvalidArgument(format!(
                    "batched predicts run a one-graph predict; this one has {} graphs (--stepwise?)",
                    g.len()
                ))
            })?;
            let batched = graph.batched(n, self.stack)?;
            let exec = self.compiler.compile_shared(&batched, self.file.clone())?;
            tracing::info!(
                "compiled the predict for batches of {n} ({}) in {:.0} ms",
                match self.stack {
                    true => "rows stacked",
                    false => "each request's rows apart",
                },
                ms_since(t0)
            );
            self.batched.push(((key.clone(), n), exec));
        }
        Ok(self.batched.last_mut().expect("pushed").1.as_mut())
    }
}
