//! The token ids a chat template puts around the instruction, stored in the GGUF (GR00T
//! N1.5 / N1.7, VLA-JEPA, Evo-1): where the image tokens sit, and the sequence a request
//! fills in; or, in vla.cpp's files, which hold no template, the whole sequence a request
//! brings, image slots included.

use crate::config::limits::MAX_SEQUENCE;
use crate::config::{first_failing, read_u32s, write_u32s};
use crate::gguf::{GgufFile, GgufWriter};
use crate::models::prefix::Inputs;
use crate::modules::flow::names;
use crate::modules::qwen_text::ImageSpan;
use crate::modules::qwen_vision::QwenVisionConfig;
use crate::{Error, Result, Tensor};

/// The token ids a request's instruction is put between: the reference's chat template
/// rendered with the camera views and a placeholder task, tokenized, and split at the task.
/// Arrays `<arch>.prompt_before_ids`, `<arch>.prompt_after_ids`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptIds {
    pub before: Vec<u32>,
    pub after: Vec<u32>,
    /// No template (a file with neither array: vla.cpp's): a request's token ids are the
    /// whole sequence, the image tokens placed where the client put them
    /// ([`Self::client_sequence`], [`Self::places`]); `before` and `after` are empty.
    pub from_client: bool,
}

const KEY_BEFORE: &str = "prompt_before_ids";
const KEY_AFTER: &str = "prompt_after_ids";

impl PromptIds {
    /// A template: `before` and `after` the instruction.
    pub fn new(before: Vec<u32>, after: Vec<u32>) -> Self {
        PromptIds {
            before,
            after,
            from_client: false,
        }
    }

    pub fn read(file: &GgufFile, arch: &str) -> Result<Self> {
        Ok(PromptIds::new(
            read_u32s(file, arch, KEY_BEFORE)?,
            read_u32s(file, arch, KEY_AFTER)?,
        ))
    }

    /// [`Self::read`], or the client's sequence ([`Self::from_client`]) where the file has
    /// neither array.
    pub fn read_or_client(file: &GgufFile, arch: &str) -> Result<Self> {
        let has = |k: &str| file.get(&format!("{arch}.{k}")).is_some();
        if has(KEY_BEFORE) || has(KEY_AFTER) {
            return Self::read(file, arch);
        }
        Ok(PromptIds {
            from_client: true,
            ..Default::default()
        })
    }

    pub fn write(&self, w: &mut GgufWriter, arch: &str) -> Result<()> {
        if self.from_client {
            return Ok(());
        }
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
        if self.from_client {
            return first_failing(&[
                (
                    cameras * n <= text && text <= MAX_SEQUENCE,
                    "the sequence bound must hold every camera's image tokens",
                ),
                (
                    (image as usize) < vocab,
                    "the image token must be below vocab_size",
                ),
            ]);
        }
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
            .map(|start| ImageSpan::still(start, rows / m, cols / m))
            .collect()
    }

    /// A request's ids as the graphs take them: as they are with a template; without one
    /// (vla.cpp's files) the client's whole sequence with every camera's `per_view` image
    /// slots, or with them put first, bare ([`Self::client_sequence`]).
    pub fn request_ids(
        &self,
        ids: Vec<u32>,
        image: u32,
        views: (usize, usize),
    ) -> Result<Vec<u32>> {
        match self.from_client {
            true => Self::client_sequence(ids, image, views, (&[], &[])),
            false => Ok(ids),
        }
    }

    /// A client's sequence `ids` with `views` x `per_view` image slots (`image` ids), as
    /// vla.cpp takes it: as it is when it holds them all, after every view's block (`open`,
    /// its image ids, `close`) when it holds none, an error otherwise.
    pub fn client_sequence(
        ids: Vec<u32>,
        image: u32,
        (views, per_view): (usize, usize),
        (open, close): (&[u32], &[u32]),
    ) -> Result<Vec<u32>> {
        let total = views * per_view;
        match ids.iter().filter(|&&t| t == image).count() {
            n if n == total => Ok(ids),
            0 => {
                let block = [open, &vec![image; per_view], close].concat();
                Ok(block.repeat(views).into_iter().chain(ids).collect())
            }
            n => Err(Error::InvalidArgument(format!(
                "the token ids hold {n} image tokens (id {image}); this model takes {total} (every camera's) or none (then they go first)"
            ))),
        }
    }

    /// Where a client's sequence `seq` (padded ids as f32) takes the `total` image tokens:
    /// `places` `[L, total]` (row p, column j: 1 where position p holds image token j, in
    /// order) and `keep` `[L]` (1 where the token's own embedding stays). An error unless
    /// `seq` holds exactly `total` image ids.
    pub fn places(seq: &[f32], image: u32, total: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let at: Vec<usize> = (0..seq.len()).filter(|&p| seq[p] == image as f32).collect();
        if at.len() != total {
            return Err(Error::InvalidArgument(format!(
                "the sequence holds {} image tokens, expected {total}",
                at.len()
            )));
        }
        let (mut places, mut keep) = (vec![0.0; seq.len() * total], vec![1.0; seq.len()]);
        for (j, &p) in at.iter().enumerate() {
            places[p * total + j] = 1.0;
            keep[p] = 0.0;
        }
        Ok((places, keep))
    }

    /// [`Self::places`] as the prefill's inputs [`names::IMAGE_PLACES`] `[1, L, total]` and
    /// [`names::TEXT_KEEP`] `[L, 1]`.
    pub fn place_inputs(seq: &[f32], image: u32, total: usize) -> Result<Inputs> {
        let (places, keep) = Self::places(seq, image, total)?;
        let l = seq.len();
        Ok(vec![
            (
                names::IMAGE_PLACES.into(),
                Tensor::from_f32(vec![1, l, total], places)?,
            ),
            (names::TEXT_KEEP.into(), Tensor::from_f32(vec![l, 1], keep)?),
        ])
    }

    /// Where each run of `n` `image` ids starts in `before`: an error unless there are
    /// exactly `cameras` runs, each exactly `n` long.
    pub fn image_starts(&self, image: u32, n: usize, cameras: usize) -> Result<Vec<usize>> {
        if self.from_client {
            return Err(Error::InvalidArgument(
                "no prompt template: the request places the image tokens".into(),
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::PromptIds;

    #[test]
    fn a_clients_sequence_places_its_image_slots_as_vla_cpp() {
        // slots as the client put them, or all first when it put none; others refused
        let with = vec![1, 9, 9, 2, 9, 3];
        let plain = ([].as_slice(), [].as_slice());
        let seq = |ids, views, wrap| PromptIds::client_sequence(ids, 9, (views, 3 / views), wrap);
        assert_eq!(seq(with.clone(), 1, plain).unwrap(), with);
        assert_eq!(seq(vec![1, 2], 1, plain).unwrap(), [9, 9, 9, 1, 2]);
        let wrapped = seq(vec![1], 3, ([7].as_slice(), [8].as_slice())).unwrap();
        assert_eq!(wrapped, [7, 9, 8, 7, 9, 8, 7, 9, 8, 1]);
        let e = seq(vec![9, 1], 1, plain).unwrap_err();
        assert!(e.to_string().contains("1 image tokens"), "{e}");

        let seq = [1.0, 9.0, 9.0, 2.0, 9.0, 0.0];
        let (places, keep) = PromptIds::places(&seq, 9, 3).unwrap();
        assert_eq!(keep, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]);
        let one = |p: usize| places[p * 3..p * 3 + 3].to_vec();
        assert_eq!(one(1), [1.0, 0.0, 0.0]);
        assert_eq!(one(2), [0.0, 1.0, 0.0]);
        assert_eq!(one(4), [0.0, 0.0, 1.0]);
        assert_eq!(one(0), [0.0; 3]);
        assert!(PromptIds::places(&seq, 9, 2).is_err());
        assert!(PromptIds::places(&seq, 9, 4).is_err());
    }
}
