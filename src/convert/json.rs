//! JSON files of a checkpoint, read whole, with typed access whose errors name the file and
//! the key.

use super::{ckpt_err, read_json};
use crate::Result;
use std::path::{Path, PathBuf};

/// Typed access to a JSON object, with errors naming the file and key.
pub struct Json<'a> {
    pub path: &'a Path,
    pub value: &'a serde_json::Value,
}

impl<'a> Json<'a> {
    pub fn get(&self, key: &str) -> Option<&'a serde_json::Value> {
        self.value.get(key).filter(|v| !v.is_null())
    }

    pub fn obj(&self, key: &str) -> Result<Json<'a>> {
        match self.get(key) {
            Some(v) if v.is_object() => Ok(Json {
                path: self.path,
                value: v,
            }),
            _ => Err(ckpt_err(
                self.path,
                format!("{key:?} is missing or not an object"),
            )),
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.get(key)
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| {
                ckpt_err(
                    self.path,
                    format!("{key:?} is missing or not a non-negative integer"),
                )
            })
    }

    pub fn i64(&self, key: &str) -> Result<i64> {
        self.get(key)
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not an integer")))
    }

    pub fn f64(&self, key: &str) -> Result<f64> {
        self.get(key)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not a number")))
    }

    /// A text config's rotary base: `rope_theta`, or under `rope_parameters` as transformers
    /// 5 writes it.
    pub fn rope_theta(&self) -> Result<f64> {
        self.get("rope_parameters")
            .and_then(|r| r.get("rope_theta"))
            .and_then(|x| x.as_f64())
            .map_or_else(|| self.f64("rope_theta"), Ok)
    }

    pub fn str(&self, key: &str) -> Result<&'a str> {
        self.get(key)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not a string")))
    }

    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        self.get(key)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(default)
    }
}

/// A JSON file read whole.
pub struct JsonFile {
    pub path: PathBuf,
    pub value: serde_json::Value,
}

impl JsonFile {
    pub fn read(path: PathBuf) -> Result<Self> {
        let value = read_json(&path)?;
        Ok(JsonFile { path, value })
    }

    pub fn json(&self) -> Json<'_> {
        Json {
            path: &self.path,
            value: &self.value,
        }
    }
}
