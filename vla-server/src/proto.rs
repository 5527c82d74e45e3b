//! The messages of `proto/vla.proto` (package `vla`) as prost structs, written by hand so
//! the build needs no protoc. A test checks every field number against the .proto file.

/// One camera view.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    #[prost(enumeration = "Encoding", tag = "1")]
    pub encoding: i32,
    #[prost(uint32, tag = "2")]
    pub height: u32,
    #[prost(uint32, tag = "3")]
    pub width: u32,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Encoding {
    Jpeg = 0,
    RgbU8 = 1,
    F32Rgb01 = 2,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PredictRequest {
    #[prost(message, repeated, tag = "1")]
    pub images: Vec<Image>,
    #[prost(int32, repeated, tag = "2")]
    pub lang_tokens: Vec<i32>,
    #[prost(float, repeated, tag = "3")]
    pub state: Vec<f32>,
    #[prost(float, repeated, tag = "4")]
    pub noise: Vec<f32>,
    #[prost(uint64, tag = "5")]
    pub request_id: u64,
    #[prost(float, repeated, tag = "6")]
    pub precomputed_img_emb: Vec<f32>,
    #[prost(uint32, tag = "7")]
    pub precomputed_img_emb_n_views: u32,
    /// vla.cpp's: 1 for each real `lang_tokens` id, 0 for the padding after them.
    #[prost(uint32, repeated, tag = "8")]
    pub attention_mask: Vec<u32>,
    /// vla.cpp's episode start; every arch here is stateless, so it changes nothing.
    #[prost(bool, tag = "9")]
    pub reset_memory: bool,
    /// A proto `string`, read as bytes so that invalid UTF-8 gets its own clear error
    /// instead of failing the whole decode (the two are the same on the wire).
    #[prost(bytes = "vec", tag = "16")]
    pub prompt: Vec<u8>,
    #[prost(enumeration = "Control", tag = "17")]
    pub control: i32,
    /// The images' camera names, in the order sent (INFO's `camera_names`, or their part
    /// after `observation.images.`); the server puts the images in the model's order.
    #[prost(string, repeated, tag = "18")]
    pub image_names: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Control {
    Predict = 0,
    Ping = 1,
    Info = 2,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PredictResponse {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(float, repeated, tag = "2")]
    pub action_chunk: Vec<f32>,
    #[prost(uint32, tag = "3")]
    pub chunk_size: u32,
    #[prost(uint32, tag = "4")]
    pub action_dim: u32,
    #[prost(float, tag = "5")]
    pub latency_ms_total: f32,
    #[prost(float, tag = "6")]
    pub latency_ms_inference: f32,
    #[prost(string, tag = "7")]
    pub error: String,
    #[prost(float, tag = "8")]
    pub latency_ms_prefill: f32,
    #[prost(float, tag = "9")]
    pub latency_ms_denoise: f32,
    #[prost(float, tag = "10")]
    pub latency_ms_vision: f32,
    #[prost(enumeration = "ErrorCode", tag = "11")]
    pub error_code: i32,
    #[prost(string, tag = "12")]
    pub info_json: String,
    #[prost(string, repeated, tag = "13")]
    pub warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ErrorCode {
    Ok = 0,
    BadRequest = 1,
    Unsupported = 2,
    Superseded = 3,
    QueueFull = 4,
    Internal = 5,
    ShuttingDown = 6,
}

impl PredictResponse {
    /// A reply that carries only an error, as vla.cpp's clients expect.
    pub fn error(request_id: u64, code: ErrorCode, message: impl Into<String>) -> Self {
        PredictResponse {
            request_id,
            error: message.into(),
            error_code: code as i32,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Every `name = N;` in proto/vla.proto is a field or enum value here, with that number.
    #[test]
    fn numbers_agree_with_proto_file() {
        let src = include_str!("../../proto/vla.proto");
        let mut found = Vec::new();
        for line in src.lines() {
            let line = line.split("//").next().unwrap_or("").trim();
            if let Some((lhs, rhs)) = line.strip_suffix(';').and_then(|l| l.split_once(" = ")) {
                if let Ok(n) = rhs.trim().parse::<i32>() {
                    found.push((lhs.split_whitespace().last().unwrap_or("").to_string(), n));
                }
            }
        }
        let ours: &[(&str, i32)] = &[
            ("JPEG", Encoding::Jpeg as i32),
            ("RGB_U8", Encoding::RgbU8 as i32),
            ("F32_RGB_01", Encoding::F32Rgb01 as i32),
            ("encoding", 1),
            ("height", 2),
            ("width", 3),
            ("data", 4),
            ("images", 1),
            ("lang_tokens", 2),
            ("state", 3),
            ("noise", 4),
            ("request_id", 5),
            ("precomputed_img_emb", 6),
            ("precomputed_img_emb_n_views", 7),
            ("attention_mask", 8),
            ("reset_memory", 9),
            ("prompt", 16),
            ("control", 17),
            ("image_names", 18),
            ("PREDICT", Control::Predict as i32),
            ("PING", Control::Ping as i32),
            ("INFO", Control::Info as i32),
            ("request_id", 1),
            ("action_chunk", 2),
            ("chunk_size", 3),
            ("action_dim", 4),
            ("latency_ms_total", 5),
            ("latency_ms_inference", 6),
            ("error", 7),
            ("latency_ms_prefill", 8),
            ("latency_ms_denoise", 9),
            ("latency_ms_vision", 10),
            ("error_code", 11),
            ("info_json", 12),
            ("warnings", 13),
            ("OK", ErrorCode::Ok as i32),
            ("BAD_REQUEST", ErrorCode::BadRequest as i32),
            ("UNSUPPORTED", ErrorCode::Unsupported as i32),
            ("SUPERSEDED", ErrorCode::Superseded as i32),
            ("QUEUE_FULL", ErrorCode::QueueFull as i32),
            ("INTERNAL", ErrorCode::Internal as i32),
            ("SHUTTING_DOWN", ErrorCode::ShuttingDown as i32),
        ];
        let want: Vec<(String, i32)> = ours.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(
            found, want,
            "proto/vla.proto and proto.rs disagree (same order expected)"
        );
    }

    #[test]
    fn roundtrip_and_garbage() {
        let r = PredictRequest {
            state: vec![1.0, 2.0],
            prompt: b"hi".to_vec(),
            control: 2,
            ..Default::default()
        };
        let b = r.encode_to_vec();
        assert_eq!(PredictRequest::decode(&b[..]).unwrap(), r);
        assert!(PredictRequest::decode(&[0xff, 0xff, 0xff][..]).is_err());
    }
}
