//! The token ids a chat template puts around the instruction, stored in the GGUF (GR00T
//! N1.5 / N1.7, VLA-JEPA, Evo-1): where the image tokens sit, and the sequence a request
//! fills in.

use crate::config::limits::MAX_SEQUENCE;
use crate::config::{first_failing, read_u32s, write_u32s};
use crate::gguf::{GgufFile, GgufWriter};
use crate::modules::qwen_text::ImageSpan;
use crate::modules::qwen_vision::QwenVisionConfig;
use crate::{Error, Result};

/// The token ids a request's instruction is put between: the reference's chat template
/// rendered with the camera views and a placeholder task, tokenized, and split at the task.
/// Arrays `<arch>.prompt_before_ids`, `<arch>.prompt_after_ids`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptIds {
    pub before: Vec<u32>,
    pub after: Vec<u32>,
}

const KEY_BEFORE: &str = "prompt_before_ids";
const KEY_AFTER: &str = "prompt_after_ids";

impl PromptIds {
    pub fn read(file: &GgufFile, arch: &str) -> Result<Self> {
        Ok(PromptIds {
            before: read_u32s(file, arch, KEY_BEFORE)?,
            after: read_u32s(file, arch, KEY_AFTER)?,
        })
    }

    pub fn write(&self, w: &mut GgufWriter, arch: &str) -> Result<()> {
        write_u32s(w, arch, KEY_BEFORE, &self.before)?;
        write_u32s(w, arch, KEY_AFTER, &self.after)
    }

    /// The sequence's length with `text` instruction rows.
    pub fn seq_len(&self, text: usize) -> usize {
        self.before.len() + text + self.after.len()
    }

    /// The config checks every arch with prompt ids makes: `cameras` runs of `n` `image` ids
    /// in `before` ([`Self::image_starts`]), every id below `vocab`, and the sequence with
    /// `text` instruction rows within [`MAX_SEQUENCE`].
    pub fn check(
        &self,
        (image, n, cameras): (u32, usize, usize),
        vocab: usize,
        text: usize,
    ) -> std::result::Result<(), String> {
        self.image_starts(image, n, cameras)
            .map_err(|e| e.to_string())?;
        let in_vocab = |ids: &[u32]| ids.iter().all(|&t| (t as usize) < vocab);
        let fixed = self.before.len() + self.after.len();
        first_failing(&[
            (
                in_vocab(&self.before) && in_vocab(&self.after),
                "the prompt's token ids must be below vocab_size",
            ),
            (
                fixed <= MAX_SEQUENCE && fixed + text <= MAX_SEQUENCE,
                "the prompt is too long",
            ),
        ])
    }

    /// The most text tokens a sequence of `total` rows leaves between `before` and `after`.
    pub fn text_bound(&self, total: usize) -> usize {
        total.saturating_sub(self.before.len() + self.after.len())
    }

    /// The sequence `before ++ text ++ after` as f32 ids right-padded with `pad` to `len`,
    /// and how many are real.
    pub fn sequence(&self, text: &[f32], len: usize, pad: u32) -> (Vec<f32>, usize) {
        let as_f32 = |ids: &[u32]| ids.iter().map(|&t| t as f32).collect::<Vec<_>>();
        let mut seq = as_f32(&self.before);
        seq.extend(text);
        seq.extend(as_f32(&self.after));
        let n_real = seq.len();
        seq.resize(len, pad as f32);
        (seq, n_real)
    }

    /// Each camera's image tokens as a span of `vision`'s merged grid (none where
    /// [`Self::image_starts`] fails, which a config's check refuses).
    pub fn image_spans(
        &self,
        image: usize,
        vision: &QwenVisionConfig,
        cameras: usize,
    ) -> Vec<ImageSpan> {
        let ((rows, cols), m) = (vision.grid(), vision.merge);
        self.image_starts(image as u32, vision.n_tokens(), cameras)
            .unwrap_or_default()
            .into_iter()
            .map(|start| ImageSpan {
                start,
                grid_h: rows / m,
                grid_w: cols / m,
            })
            .collect()
    }

    /// Where each run of `n` `image` ids starts in `before`: an error unless there are
    /// exactly `cameras` runs, each exactly `n` long.
    pub fn image_starts(&self, image: u32, n: usize, cameras: usize) -> Result<Vec<usize>> {
        let mut starts = Vec::new();
        let mut i = 0;
        while i < self.before.len() {
            if self.before[i] != image {
                i += 1;
                continue;
            }
            let len = self.before[i..].iter().take_while(|&&t| t == image).count();
            if len != n {
                return Err(Error::InvalidArgument(format!(
                    "{KEY_BEFORE}: a run of {len} image tokens at {i}, expected {n}"
                )));
            }
            starts.push(i);
            i += len;
        }
        if starts.len() != cameras {
            return Err(Error::InvalidArgument(format!(
                "{KEY_BEFORE}: {} runs of image tokens for {cameras} cameras",
                starts.len()
            )));
        }
        if self.after.contains(&image) {
            return Err(Error::InvalidArgument(format!(
                "{KEY_AFTER}: image tokens after the instruction"
            )));
        }
        Ok(starts)
    }
}
