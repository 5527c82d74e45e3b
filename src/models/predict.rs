//! The graphs a [`FlowPolicy`](super::flow::FlowPolicy) compiles, for the camera frames of
//! one size ([`FrameKey`] per camera): the whole predict as one graph ([`predict_graph`]),
//! or the three stage graphs the stepwise reference runs ([`stage_graphs`]). Both start
//! from the frames as uploaded ([`crate::layers::frame_pixels`]), so the two paths give the
//! same chunk bit for bit.

use super::flow::{FlowArch, FlowSpec, VALID};
use crate::graph::{Graph, GraphBuilder, NodeId, WeightStore};
use crate::layers::frame_pixels;
use crate::modules::flow::names;
use crate::preprocess::FrameKey;
use crate::{Error, Result};

/// Stage graph indices of [`stage_graphs`].
pub(super) const VISION: usize = 0;
pub(super) const PREFILL: usize = 1;
pub(super) const DENOISE: usize = 2;

/// The stages of [`predict_graph`] and of a predict's stage times.
pub(super) const STAGES: [&str; 3] = ["vision", "prefill", "denoise"];

/// The arch's vision graph on camera frames: frame `i` is the input `{prefix}frame.{i}`,
/// mapped to the tower's `image.{i}`; returns the image tokens.
fn vision_on_frames(
    g: &mut GraphBuilder,
    vision: &Graph,
    spec: &FlowSpec,
    frames: &[FrameKey],
    prefix: &str,
) -> Result<NodeId> {
    let pixels = frames
        .iter()
        .enumerate()
        .map(|(i, &k)| frame_pixels(g, &format!("{prefix}frame.{i}"), &spec.camera.frame_plan(k)))
        .collect::<Result<Vec<_>>>()?;
    if let Some(other) = vision
        .input_names()
        .find(|n| names::image_index(n).is_none())
    {
        return Err(Error::InvalidArgument(format!(
            "the vision graph takes {other:?}; it may take only image.{{i}}"
        )));
    }
    let bind = |name: &str| names::image_index(name).and_then(|i| pixels.get(i).copied());
    Ok(g.inline(vision, STAGES[VISION], bind)?[0])
}

/// The vision (on `frames`: inputs `frame.{i}`), prefill and denoise graphs, in that order.
pub fn stage_graphs<A: FlowArch>(
    cfg: &A,
    spec: &FlowSpec,
    store: Option<&dyn WeightStore>,
    frames: &[FrameKey],
) -> Result<Vec<Graph>> {
    let [vision, prefill, denoise] = cfg.graphs(store)?;
    let mut g = GraphBuilder::over(store);
    let img = vision_on_frames(&mut g, &vision, spec, frames, "")?;
    Ok(vec![g.build(&[img])?, prefill, denoise])
}

/// A whole predict as one graph: the camera frames mapped to the tower's input, the vision
/// graph, the prefill on its image tokens, and `spec.io.num_steps` denoise evaluations on
/// the prefill's keys and values, each followed by the Euler update `x += dt * v`. The time
/// embeddings of the steps are constants of the graph (one set per step count). Inputs:
/// `noise` `[chunk, max_action_dim]` (x at the schedule's start), the frames
/// `vision.frame.{i}` (`frames[i]`), and the other stage graphs' request inputs under the
/// names `prefill.{name}` and `denoise.{name}`; output: x at the schedule's end. Stages
/// `vision`, `prefill`, `denoise` ([`Graph::stages`]).
pub fn predict_graph<A: FlowArch>(
    cfg: &A,
    spec: &FlowSpec,
    store: Option<&dyn WeightStore>,
    frames: &[FrameKey],
) -> Result<Graph> {
    let [vision, prefill, denoise] = cfg.graphs(store)?;
    let mut g = GraphBuilder::over(store);
    g.stage(STAGES[VISION]);
    let frame_prefix = format!("{}.", STAGES[VISION]);
    let img = vision_on_frames(&mut g, &vision, spec, frames, &frame_prefix)?;
    g.stage(STAGES[PREFILL]);
    let kv = g.inline(&prefill, STAGES[PREFILL], |n| {
        (n == names::IMG_TOKENS).then_some(img)
    })?;
    let valid = g.input_node(&format!("{}.{VALID}", STAGES[PREFILL]));
    g.stage(STAGES[DENOISE]);
    let mut x = g.input("noise", &[spec.io.chunk_size, spec.io.max_action_dim]);
    for (step, (t, dt)) in spec
        .schedule
        .steps(spec.io.num_steps)
        .into_iter()
        .enumerate()
    {
        let time = g.constant(&format!("flow.time_emb.{step}"), cfg.time_input(t)?)?;
        let bind = |name: &str| match name {
            names::X_T => Some(x),
            names::TIME_EMB => Some(time),
            VALID => valid,
            _ => names::kv_index(name).and_then(|k| kv.get(k).copied()),
        };
        let v = g.inline(&denoise, STAGES[DENOISE], bind)?[0];
        let step = g.scale(v, dt);
        x = g.add(x, step)?;
    }
    g.build(&[x])
}
