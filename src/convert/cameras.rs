//! The reference's camera names (lerobot's `observation.images.<name>` features), in the
//! order the reference feeds the cameras to the model, kept in the GGUF
//! (`vla.camera_names`) so that requests may name their images and a mix-up is refused
//! instead of changing the actions. The order is each reference's own:
//!
//! - SmolVLA, pi0, pi0.5, VLA-JEPA, Evo-1: the policy's `image_features`, i.e. the `VISUAL`
//!   entries of `config.json`'s `input_features` in the file's order;
//! - GR00T N1.5: lerobot's pack step sorts the `observation.images.*` keys;
//! - GR00T N1.7: the pack step's `video_modality_keys` (`observation.images.<key>`, with
//!   lerobot's alias `wrist_image` -> `image2`), sorted when it has none;
//! - GR00T N1.6 (an Isaac-GR00T checkpoint): the embodiment's video `modality_keys` in
//!   `processor_config.json`, as given ([`super::gr00t_n1_6`] writes them).

use super::{ckpt_err, Kind};
use crate::gguf::{GgufWriter, Value};
use crate::models::common::CAMERA_NAMES_KEY;
use crate::Result;
use serde::de::{Deserializer, MapAccess, Visitor};
use std::path::Path;

/// Writes the camera names of checkpoint `ckpt` (of `kind`) for a model of `n_images`
/// cameras; a checkpoint whose names do not come to `n_images` gets a note instead.
pub(crate) fn write(
    w: &mut GgufWriter,
    ckpt: &Path,
    kind: Kind,
    n_images: usize,
    notes: &mut Vec<String>,
) -> Result<()> {
    let names = names(ckpt, kind)?;
    if names.len() != n_images {
        notes.push(format!(
            "camera names {names:?} are not the model's {n_images} cameras: not kept (requests \
             cannot name their images)"
        ));
        return Ok(());
    }
    notes.push(format!("cameras, in order: {}", names.join(", ")));
    w.add_metadata(CAMERA_NAMES_KEY, Value::from_strs(&names))
}

/// The camera names in the reference's order.
pub(crate) fn names(ckpt: &Path, kind: Kind) -> Result<Vec<String>> {
    if kind == Kind::Gr00tN16 {
        return Err(ckpt_err(
            ckpt,
            "an Isaac-GR00T checkpoint names its cameras per embodiment (convert::gr00t_n1_6)",
        ));
    }
    let config = ckpt.join("config.json");
    let visual = visual_features(&config)?;
    Ok(match kind {
        Kind::Gr00tN15 => {
            let mut sorted = visual;
            sorted.sort();
            sorted
        }
        Kind::Gr00tN17 => {
            let (pack, _) = super::gr00t::pack_step(ckpt, "groot_n1_7_pack_inputs_v1")?;
            let keys: Vec<&str> = pack["video_modality_keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str())
                .collect();
            if keys.is_empty() {
                let mut sorted = visual;
                sorted.sort();
                return Ok(sorted);
            }
            let mut out = Vec::new();
            for k in keys {
                let alias = (k == "wrist_image").then(|| "observation.images.image2".to_owned());
                let found = [Some(format!("observation.images.{k}")), alias]
                    .into_iter()
                    .flatten()
                    .find(|c| visual.contains(c));
                out.extend(found);
            }
            out
        }
        _ => visual,
    })
}

/// The `VISUAL` entries of `config.json`'s `input_features`, in the file's order (our JSON
/// maps are sorted, so the file is read again keeping the order).
fn visual_features(config: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(config).map_err(|err| crate::Error::Io {
        path: config.to_owned(),
        err,
    })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let features = de
        .deserialize_map(InputFeatures)
        .map_err(|e| ckpt_err(config, format!("invalid JSON: {e}")))?;
    Ok(features
        .0
        .into_iter()
        .filter(|(_, f)| f["type"] == "VISUAL")
        .map(|(k, _)| k)
        .collect())
}

/// A JSON object's entries in the text's order.
#[derive(Default)]
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(
                self,
                mut m: M,
            ) -> std::result::Result<Ordered, M::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The root object's `input_features`, its entries in order (empty when absent).
struct InputFeatures;

impl<'de> Visitor<'de> for InputFeatures {
    type Value = Ordered;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> std::result::Result<Ordered, M::Error> {
        let mut found = Ordered::default();
        while let Some(key) = m.next_key::<String>()? {
            match key.as_str() {
                "input_features" => found = m.next_value()?,
                _ => {
                    m.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::fixture;

    #[test]
    fn each_reference_orders_its_cameras_its_own_way() {
        // Evo-1's file order is not sorted: image, wrist_image, image2.
        assert_eq!(
            names(&fixture("evo1-tiny"), Kind::Evo1).unwrap(),
            [
                "observation.images.image",
                "observation.images.wrist_image",
                "observation.images.image2"
            ]
        );
        assert_eq!(
            names(&fixture("groot17-tiny"), Kind::Gr00tN17).unwrap(),
            ["observation.images.image"]
        );
        // The same file order sorted for GR00T N1.5, kept for SmolVLA.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"type": "x", "input_features": {"observation.state": {"type": "STATE"},
                "observation.images.top": {"type": "VISUAL"},
                "observation.images.front": {"type": "VISUAL"}}}"#,
        )
        .unwrap();
        assert_eq!(
            names(dir.path(), Kind::Smolvla).unwrap(),
            ["observation.images.top", "observation.images.front"]
        );
        assert_eq!(
            names(dir.path(), Kind::Gr00tN15).unwrap(),
            ["observation.images.front", "observation.images.top"]
        );
    }
}
