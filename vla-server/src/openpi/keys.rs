//! Where an openpi observation keeps the cameras, the state and the prompt: presets named
//! after openpi's example clients, or a JSON file. An observation becomes the same
//! `PredictRequest` a ZeroMQ client sends, so both go through one validation path.

use super::msg::{self, NdArray};
use crate::proto::{Encoding, Image, PredictRequest};
use crate::{Error, Result};
use rmpv::Value;
use serde::Deserialize;
use std::path::Path;

/// The keys of an observation. A key names a top-level entry (`observation/image`, as
/// openpi's LIBERO client writes it), else a path of nested maps split at `/`
/// (`images/cam_high`: ALOHA's `{"images": {"cam_high": ...}}`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyMap {
    /// One per camera, in the model's camera order.
    pub images: Vec<String>,
    /// Concatenated in this order into the state vector.
    pub state: Vec<String>,
    #[serde(default = "prompt_key")]
    pub prompt: String,
    /// An optional array of `chunk_size x max_action_dim` noise values.
    #[serde(default = "noise_key")]
    pub noise: String,
}

fn prompt_key() -> String {
    "prompt".into()
}

fn noise_key() -> String {
    "noise".into()
}

/// The presets: openpi's example clients' layouts.
pub const PRESETS: [&str; 3] = ["libero", "droid", "aloha"];

impl KeyMap {
    /// A preset name ([`PRESETS`]) or a JSON file `{"images": [...], "state": [...],
    /// "prompt"?: "...", "noise"?: "..."}`.
    pub fn load(name: &str) -> Result<KeyMap> {
        let keys = |images: &[&str], state: &[&str]| KeyMap {
            images: images.iter().map(|s| s.to_string()).collect(),
            state: state.iter().map(|s| s.to_string()).collect(),
            prompt: prompt_key(),
            noise: noise_key(),
        };
        match name {
            "libero" => Ok(keys(
                &["observation/image", "observation/wrist_image"],
                &["observation/state"],
            )),
            "droid" => Ok(keys(
                &[
                    "observation/exterior_image_1_left",
                    "observation/wrist_image_left",
                ],
                &["observation/joint_position", "observation/gripper_position"],
            )),
            "aloha" => Ok(keys(
                &[
                    "images/cam_high",
                    "images/cam_left_wrist",
                    "images/cam_right_wrist",
                ],
                &["state"],
            )),
            file => {
                let path = Path::new(file);
                if !path.is_file() {
                    return Err(Error::Config(format!(
                        "openpi keys {file:?}: not a preset ({}) nor a JSON file",
                        PRESETS.join(", ")
                    )));
                }
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("{file}: {e}")))?;
                let map: KeyMap = serde_json::from_str(&text)
                    .map_err(|e| Error::Config(format!("{file}: {e}")))?;
                if map.images.is_empty() || map.state.is_empty() {
                    return Err(Error::Config(format!(
                        "{file}: \"images\" and \"state\" each need at least one key"
                    )));
                }
                Ok(map)
            }
        }
    }

    /// The request an observation `obs` (a msgpack map) stands for.
    pub fn request(&self, obs: &Value) -> Result<PredictRequest> {
        if obs.as_map().is_none() {
            return Err(Error::bad_request(
                "the observation is not a msgpack map of keys to values",
            ));
        }
        let images = self
            .images
            .iter()
            .map(|k| image(need(obs, k)?, k))
            .collect::<Result<Vec<_>>>()?;
        let mut state = Vec::new();
        for k in &self.state {
            state.extend(numbers(need(obs, k)?, k)?);
        }
        let prompt = match lookup(obs, &self.prompt) {
            None | Some(Value::Nil) => Vec::new(),
            Some(Value::String(s)) => s.as_bytes().to_vec(),
            Some(Value::Binary(b)) => b.clone(),
            Some(_) => {
                return Err(Error::bad_request(format!(
                    "{:?}: the prompt is not text",
                    self.prompt
                )))
            }
        };
        let noise = match lookup(obs, &self.noise) {
            None | Some(Value::Nil) => Vec::new(),
            Some(v) => numbers(v, &self.noise)?,
        };
        Ok(PredictRequest {
            images,
            state,
            noise,
            prompt,
            ..Default::default()
        })
    }
}

/// `key` in `obs`: the top-level entry of that name, else the nested path.
fn lookup<'a>(obs: &'a Value, key: &str) -> Option<&'a Value> {
    msg::get(obs, key).or_else(|| {
        key.split('/')
            .try_fold(obs, |v, part| msg::get(v, part))
            .filter(|_| key.contains('/'))
    })
}

fn need<'a>(obs: &'a Value, key: &str) -> Result<&'a Value> {
    lookup(obs, key).ok_or_else(|| {
        let keys: Vec<String> = obs
            .as_map()
            .into_iter()
            .flatten()
            .map(|(k, _)| match k {
                Value::String(s) => s.as_str().unwrap_or("?").to_owned(),
                Value::Binary(b) => String::from_utf8_lossy(b).into_owned(),
                other => other.to_string(),
            })
            .collect();
        Error::bad_request(format!(
            "observation has no {key:?} (its keys: {}); see --openpi-keys",
            keys.join(", ")
        ))
    })
}

/// A camera view: a uint8 (or float32 in [0, 1]) array, HWC or CHW with 3 channels.
fn image(v: &Value, key: &str) -> Result<Image> {
    let a = NdArray::read(v, key)?;
    let (h, w, chw) = match a.shape[..] {
        [h, w, 3] => (h, w, false),
        [3, h, w] => (h, w, true),
        _ => {
            return Err(Error::bad_request(format!(
                "{key:?}: image of shape {:?}, expected [H, W, 3] or [3, H, W]",
                a.shape
            )))
        }
    };
    let side = |s: usize| {
        u32::try_from(s)
            .map_err(|_| Error::bad_request(format!("{key:?}: image side {s} is too large")))
    };
    let (height, width) = (side(h)?, side(w)?);
    let size = match a.kind.as_str() {
        "u1" => 1,
        "f4" => 4,
        other => {
            return Err(Error::bad_request(format!(
                "{key:?}: image dtype {other}, expected uint8 (or float32 in [0, 1])"
            )))
        }
    };
    let data = match chw {
        false => a.data.to_vec(),
        true => {
            let plane = h * w * size;
            let mut out = Vec::with_capacity(a.data.len());
            for p in 0..h * w {
                for c in 0..3 {
                    let at = c * plane + p * size;
                    out.extend_from_slice(&a.data[at..at + size]);
                }
            }
            out
        }
    };
    let encoding = match size {
        1 => Encoding::RgbU8,
        _ => Encoding::F32Rgb01,
    };
    Ok(Image {
        encoding: encoding as i32,
        height,
        width,
        data,
    })
}

/// An array, a number or a list of numbers, as f32 values.
fn numbers(v: &Value, key: &str) -> Result<Vec<f32>> {
    if let Some(list) = v.as_array() {
        return list
            .iter()
            .map(|x| {
                x.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| Error::bad_request(format!("{key:?}: a list with a non-number")))
            })
            .collect();
    }
    if let Some(f) = v.as_f64() {
        return Ok(vec![f as f32]);
    }
    Ok(NdArray::read(v, key)?.to_f32())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(kind: &str, shape: &[usize], data: Vec<u8>) -> Value {
        let key = |k: &str| Value::Binary(k.as_bytes().to_vec());
        Value::Map(vec![
            (key("__ndarray__"), Value::Boolean(true)),
            (key("data"), Value::Binary(data)),
            (key("dtype"), Value::from(kind)),
            (
                key("shape"),
                Value::Array(shape.iter().map(|&d| Value::from(d as u64)).collect()),
            ),
        ])
    }

    /// Mutated and truncated observations are errors or requests, never a panic (the
    /// websocket-level version with a running server is clients/python/tests/test_openpi.py).
    #[test]
    fn mutated_observations_never_panic() {
        let img = array("|u1", &[4, 5, 3], (0..60).collect());
        let state: Vec<u8> = [0.25f32; 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let obs = Value::Map(vec![
            (Value::from("observation/image"), img.clone()),
            (Value::from("observation/wrist_image"), img),
            (Value::from("observation/state"), array("<f4", &[7], state)),
            (Value::from("prompt"), Value::from("stack the cups")),
        ]);
        let bytes = msg::encode(&obs);
        let keys = KeyMap::load("libero").unwrap();
        assert!(keys.request(&msg::decode(&bytes).unwrap()).is_ok());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut decoded, mut requests) = (0, 0);
        for i in 0..20_000 {
            let mut b = bytes.clone();
            for _ in 0..1 + i % 4 {
                let at = next() as usize % b.len();
                b[at] = next() as u8;
            }
            if i % 5 == 0 {
                b.truncate(next() as usize % b.len());
            }
            if let Ok(v) = msg::decode(&b) {
                decoded += 1;
                requests += usize::from(keys.request(&v).is_ok());
            }
        }
        assert!(
            decoded > 0 && requests > 0,
            "{decoded} decoded, {requests} requests"
        );
    }

    #[test]
    fn aloha_nests_and_chw_images_become_hwc() {
        let chw: Vec<u8> = (0..3 * 2 * 2).map(|i| i as u8).collect();
        let cams = Value::Map(
            ["cam_high", "cam_left_wrist", "cam_right_wrist"]
                .iter()
                .map(|c| (Value::from(*c), array("|u1", &[3, 2, 2], chw.clone())))
                .collect(),
        );
        let state: Vec<u8> = [0.5f64, -1.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let obs = Value::Map(vec![
            (Value::from("images"), cams),
            (Value::from("state"), array("<f8", &[2], state)),
            (Value::from("prompt"), Value::from("fold the towel")),
        ]);
        let req = KeyMap::load("aloha").unwrap().request(&obs).unwrap();
        assert_eq!(req.images.len(), 3);
        // Pixel (0, 0) is channels 0, 4, 8 of the planes.
        assert_eq!(&req.images[0].data[..6], &[0, 4, 8, 1, 5, 9]);
        assert_eq!(req.state, vec![0.5, -1.0]);
        assert_eq!(req.prompt, b"fold the towel");
        let e = KeyMap::load("libero")
            .unwrap()
            .request(&obs)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no \"observation/image\"") && e.contains("images, state, prompt"),
            "{e}"
        );
    }
}
