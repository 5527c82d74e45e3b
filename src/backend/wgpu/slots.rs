//! The activation buffer plan: greedy best-fit reuse of buffers ("slots") freed after their
//! last reader, in an execution order (the graph's, with fused nodes beside the node whose
//! dispatches compute them: `fuse::order`). A reshape shares its input's slot (it is a
//! view), extending its lifetime.

use super::exec::Place;
use super::fuse::positions;
use crate::backend::ActDtype;
use crate::graph::{Graph, NodeId, Op};
use crate::{Error, Result};

/// Where each node's value is last needed, as a position in `order`: its last reader's,
/// its own when nothing reads it, for `fused` sets (each a node, then the nodes its
/// dispatches also compute) the last member's for every member and every input of a member
/// (one dispatch reads all those inputs while it writes all those outputs, so none may be
/// released and reused before the last member is placed); `None` for graph outputs.
fn last_needed(graph: &Graph, order: &[usize], fused: &[Vec<usize>]) -> Vec<Option<usize>> {
    let nodes = graph.nodes();
    let at = positions(order);
    let mut last = vec![0; nodes.len()];
    for (k, &i) in order.iter().enumerate() {
        last[i] = last[i].max(k);
        for inp in &nodes[i].inputs {
            last[inp.0] = k;
        }
    }
    for f in fused {
        let end = at[*f.last().expect("a fused node and more")];
        let members = f.iter().map(|&m| NodeId(m));
        for id in members
            .clone()
            .chain(f.iter().flat_map(|&m| nodes[m].inputs.clone()))
        {
            last[id.0] = last[id.0].max(end);
        }
    }
    let mut out: Vec<Option<usize>> = last.into_iter().map(Some).collect();
    for o in graph.outputs() {
        out[o.0] = None;
    }
    out
}

/// Gives every node without a place (computed values, inputs) a slot, or a reshape of a
/// weight the weight's f32 copy; returns the slots' sizes in bytes. `stores`: each node's
/// stored dtype; `raw_use`: whether something reads the node in its stored dtype;
/// `writes_instead`: (node, the node whose output its dispatches write instead of its own
/// value, which nothing reads): the second's slot is taken when the first is placed, and
/// the first shares it.
pub(super) fn plan(
    graph: &Graph,
    order: &[usize],
    (fused, writes_instead): (&[Vec<usize>], &[(usize, usize)]),
    (stores, raw_use, max_binding): (&[ActDtype], &[bool], u64),
    places: &mut [Option<Place>],
) -> Result<Vec<u64>> {
    let nodes = graph.nodes();
    // what each position releases, once its node is placed (so an op never writes the
    // buffer it reads): every node last needed there, each once
    let mut releases: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    for (i, last) in last_needed(graph, order, fused).into_iter().enumerate() {
        if let Some(k) = last {
            releases[k].push(i);
        }
    }
    let mut slot_sizes: Vec<u64> = Vec::new();
    let mut refs: Vec<usize> = Vec::new(); // live nodes per slot
    let mut free: Vec<usize> = Vec::new();
    let mut slot_of: Vec<Option<usize>> = vec![None; nodes.len()];
    let mut instead: Vec<Option<usize>> = vec![None; nodes.len()];
    for &(i, r) in writes_instead {
        instead[i] = Some(r);
    }
    for (at, &i) in order.iter().enumerate() {
        let n = &nodes[i];
        // A reshape of a weight is a view of the weight's f32 buffer.
        let base = n.inputs.first().and_then(|x| places[x.0].as_ref());
        if let (None, Op::Reshape(_), Some(Place::Weight { f32, .. })) = (&places[i], &n.op, base) {
            if raw_use[i] {
                return Err(Error::NotImplemented {
                    op: format!(
                        "node {i}: a reshaped weight read in its stored dtype (matmul, embedding)"
                    ),
                    backend: "wgpu",
                });
            }
            let f32 = f32.clone().expect("a reshape reads its input as f32");
            places[i] = Some(Place::Weight {
                raw: Default::default(),
                f32: Some(f32),
            });
        }
        // (the node whose output is written here)
        let w = instead[i].unwrap_or(i);
        if places[w].is_none() {
            let (n, i) = (&nodes[w], w);
            // whole words: a 16-bit slot of odd length still ends on a word (the bf16
            // stores' granule, and where the guard's sentinel words start)
            let size = (stores[i].size() as u64 * n.numel() as u64)
                .max(4)
                .next_multiple_of(4);
            if size > max_binding {
                return Err(Error::Gpu(format!(
                    "node {i} ({}) needs {size} bytes, over the adapter's storage binding limit ({max_binding})",
                    n.op.kind()
                )));
            }
            let slot = match (&n.op, n.inputs.first().and_then(|x| slot_of[x.0])) {
                (Op::Reshape(_), Some(s)) => s,
                // Inputs are written before any dispatch runs: a slot freed by an earlier
                // node would be overwritten by that node. Give them their own.
                (Op::Input(_), _) => {
                    slot_sizes.push(size);
                    refs.push(0);
                    slot_sizes.len() - 1
                }
                _ => {
                    let best = free
                        .iter()
                        .enumerate()
                        .filter(|(_, &s)| slot_sizes[s] >= size)
                        .min_by_key(|(_, &s)| slot_sizes[s])
                        .map(|(k, _)| k);
                    match best {
                        Some(k) => free.swap_remove(k),
                        None => {
                            slot_sizes.push(size);
                            refs.push(0);
                            slot_sizes.len() - 1
                        }
                    }
                }
            };
            refs[slot] += 1;
            slot_of[i] = Some(slot);
            places[i] = Some(Place::Slot(slot));
        }
        if w != i {
            // the node's own value is never written: it shares the slot written for w
            let slot = slot_of[w].expect("placed just above");
            refs[slot] += 1;
            slot_of[i] = Some(slot);
            places[i] = Some(Place::Slot(slot));
        }
        // (a node computed but never read releases here at once: a dead reshape view must
        // not pin its base's slot)
        for &r in &releases[at] {
            if let Some(s) = slot_of[r] {
                refs[s] -= 1;
                if refs[s] == 0 {
                    free.push(s);
                }
            }
        }
    }
    Ok(slot_sizes)
}
