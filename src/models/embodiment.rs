//! Embodiments: the robot an embodiment-conditioned policy (GR00T) acts for. The GGUF maps
//! tags to the index of the embodiment's slice in the per-embodiment weights
//! (`<arch>.embodiment_tag_mapping`, a JSON object) and names the default
//! (`<arch>.embodiment`); a run picks one by tag or id (`--embodiment`).

use crate::gguf::{GgufFile, GgufWriter};
use crate::modules::gr00t_head::embodiment_weights;
use crate::{Error, Result};
use std::collections::BTreeMap;

/// Metadata keys under `<arch>.`: the tag -> id map as JSON, and the default tag.
pub const KEY_TAGS: &str = "embodiment_tag_mapping";
pub const KEY_DEFAULT: &str = "embodiment";

/// A checkpoint's embodiments as its GGUF keeps them: the tag -> id map (JSON,
/// `<arch>.embodiment_tag_mapping`) and the default tag (`<arch>.embodiment`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Embodiments {
    pub tags: String,
    pub default: String,
}

impl Embodiments {
    pub fn read(file: &GgufFile, arch: &str) -> Result<Self> {
        let text = |key: &str| file.get_str(&format!("{arch}.{key}")).map(str::to_owned);
        Ok(Embodiments {
            tags: text(KEY_TAGS)?,
            default: text(KEY_DEFAULT)?,
        })
    }

    pub fn write(&self, w: &mut GgufWriter, arch: &str) -> Result<()> {
        w.add_metadata(format!("{arch}.{KEY_TAGS}"), self.tags.as_str())?;
        w.add_metadata(format!("{arch}.{KEY_DEFAULT}"), self.default.as_str())
    }

    /// Whether the tag map is a JSON object of ids (a config check).
    pub fn valid(&self) -> bool {
        tag_map(&self.tags).is_ok()
    }
}

/// The tag -> id map of `json`.
pub fn tag_map(json: &str) -> Result<BTreeMap<String, usize>> {
    serde_json::from_str(json)
        .map_err(|e| Error::InvalidArgument(format!("{KEY_TAGS}: not a JSON object of ids ({e})")))
}

/// The embodiment `requested` (a tag or an id; `None`: `default`) as (tag, id), given the
/// tag map `json`, checked against the `n` slices the weights hold. An unknown tag is an
/// error listing the known ones.
pub fn resolve(
    json: &str,
    default: &str,
    requested: Option<&str>,
    n: usize,
) -> Result<(String, usize)> {
    let map = tag_map(json)?;
    let name = requested.unwrap_or(default).to_owned();
    let known = || {
        let list: Vec<String> = map.iter().map(|(t, i)| format!("{t} ({i})")).collect();
        list.join(", ")
    };
    let (tag, id) = match (map.get(&name), name.parse::<usize>()) {
        (Some(&id), _) => (name, id),
        (None, Ok(id)) => {
            let tag = map.iter().find(|(_, &i)| i == id).map(|(t, _)| t.clone());
            (tag.unwrap_or_else(|| format!("id {id}")), id)
        }
        (None, Err(_)) => {
            return Err(Error::InvalidArgument(format!(
                "embodiment {name:?}: this model knows {}",
                known()
            )))
        }
    };
    if id >= n {
        return Err(Error::InvalidArgument(format!(
            "embodiment {tag:?}: id {id}, but the weights hold {n} embodiments (known: {})",
            known()
        )));
    }
    Ok((tag, id))
}

/// Graph weight shapes with the leading embodiment axis (`n`) the per-embodiment weights
/// ([`embodiment_weights`]) have in the file.
pub fn with_embodiment_axis(
    mut shapes: Vec<(String, Vec<usize>)>,
    n: usize,
) -> Vec<(String, Vec<usize>)> {
    let indexed = embodiment_weights();
    for (name, shape) in &mut shapes {
        if indexed.contains(name) {
            shape.insert(0, n);
        }
    }
    shapes
}

/// Narrows the file's per-embodiment weights to the embodiment `requested` ([`resolve`]
/// against the tag map `json`, the `default` tag and `n` slices) and names it, `tag (id)`.
pub fn select(
    file: &mut GgufFile,
    json: &str,
    default: &str,
    requested: Option<&str>,
    n: usize,
) -> Result<Option<String>> {
    let (tag, id) = resolve(json, default, requested, n)?;
    for name in embodiment_weights() {
        file.select_index(&name, id)?;
    }
    Ok(Some(format!("{tag} ({id})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAGS: &str = r#"{"so100": 2, "new_embodiment": 31}"#;

    #[test]
    fn tags_ids_and_the_default_resolve() {
        assert_eq!(
            resolve(TAGS, "so100", None, 32).unwrap(),
            ("so100".into(), 2)
        );
        let by_tag = resolve(TAGS, "so100", Some("new_embodiment"), 32).unwrap();
        assert_eq!(by_tag, ("new_embodiment".into(), 31));
        assert_eq!(resolve(TAGS, "so100", Some("31"), 32).unwrap().1, 31);
        assert_eq!(
            resolve(TAGS, "so100", Some("5"), 32).unwrap(),
            ("id 5".into(), 5)
        );
    }

    #[test]
    fn unknown_tags_and_ids_out_of_range_are_errors_naming_the_known_ones() {
        let e = resolve(TAGS, "so100", Some("gr1"), 32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gr1") && e.contains("new_embodiment (31)") && e.contains("so100 (2)"));
        let e = resolve(TAGS, "so100", Some("new_embodiment"), 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("8 embodiments"), "{e}");
        assert!(resolve("[1, 2]", "so100", None, 8).is_err());
    }
}
