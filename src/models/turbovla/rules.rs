//! What the host computes for TurboVLA's text: the padding, Grounding DINO's sub-sentence
//! attention mask and position ids (`generate_masks_with_special_tokens`), and which text
//! rows the image tokens may attend to.

use super::config::TurboConfig;

/// One instruction's text inputs. BERT runs over `bert_len` ids (the instruction padded to
/// its group's length); the fusion sees `len` rows (`max_text_length`): the rows past
/// `bert_len` are zeros before the text projection, as the reference's per-instruction
/// padding leaves them.
#[derive(Clone, Debug, PartialEq)]
pub struct TextPlan {
    /// The padded ids, `[bert_len]`.
    pub ids: Vec<u32>,
    pub bert_len: usize,
    pub len: usize,
    /// BERT's position ids, `[bert_len]`.
    pub positions: Vec<f32>,
    /// The sub-sentence mask `[len, len]` (1 = may attend); BERT reads its top-left
    /// `[bert_len, bert_len]` block.
    pub mask: Vec<f32>,
    /// 1 for the instruction's own tokens, 0 for padding, `[len]`.
    pub keys: Vec<f32>,
}

impl TextPlan {
    /// The plan of `ids` (`[CLS] ... [SEP]`, unpadded, at most `max_text_length` long:
    /// the caller refuses longer ones); `padded` where the request chose BERT's length
    /// itself by sending padding ids (vla.cpp's protocol), else the group's or the model's.
    pub fn new(cfg: &TurboConfig, ids: &[u32], padded: Option<usize>) -> TextPlan {
        let bert_len = padded.unwrap_or_else(|| cfg.pad_to(ids)).max(ids.len());
        let len = match cfg.pad_to_longest {
            true => bert_len,
            false => cfg.text_len.max(bert_len),
        };
        let mut padded = ids.to_vec();
        padded.resize(bert_len, cfg.special.pad as u32);
        let (mask, positions) = sub_sentences(cfg, &padded, len);
        let keys = (0..len)
            .map(|i| f32::from(u8::from(i < ids.len())))
            .collect();
        TextPlan {
            ids: padded,
            bert_len,
            len,
            positions,
            mask,
            keys,
        }
    }

    /// The top-left `[bert_len, bert_len]` block of the mask.
    pub fn bert_mask(&self) -> Vec<f32> {
        self.mask
            .chunks(self.len)
            .take(self.bert_len)
            .flat_map(|row| row[..self.bert_len].iter().copied())
            .collect()
    }
}

/// Grounding DINO's rule over the padded `ids`: each token attends to itself; the tokens
/// after a special one (`[CLS]`, `[SEP]`, `.`, `?`) up to and including the next form a block
/// that attends within itself, with positions counting from 0; a special token first or last
/// in the row stands alone at position 0. Padding (and rows past `ids`, up to `len`) attends
/// to itself alone, at position 0. Returns the mask `[len, len]` and positions `[ids.len()]`.
pub fn sub_sentences(cfg: &TurboConfig, ids: &[u32], len: usize) -> (Vec<f32>, Vec<f32>) {
    let n = ids.len();
    let s = &cfg.special;
    let special = [s.cls, s.sep, s.period, s.question];
    let mut mask = vec![0.0; len * len];
    for i in 0..len {
        mask[i * len + i] = 1.0;
    }
    let mut positions = vec![0.0; n];
    let mut prev = 0;
    for col in (0..n).filter(|&c| special.contains(&(ids[c] as usize))) {
        if col != 0 && col != n - 1 {
            for r in prev + 1..=col {
                for c in prev + 1..=col {
                    mask[r * len + c] = 1.0;
                }
                positions[r] = (r - prev - 1) as f32;
            }
        }
        prev = col;
    }
    (mask, positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TurboConfig {
        TurboConfig {
            text_len: 8,
            ..TurboConfig::empty()
        }
    }

    #[test]
    fn sub_sentences_split_at_periods_and_pad_alone() {
        // [CLS] a b . c [SEP] [PAD] [PAD]
        let ids = [101, 7, 8, 1012, 9, 102];
        let plan = TextPlan::new(&cfg(), &ids, None);
        assert_eq!(plan.ids, [101, 7, 8, 1012, 9, 102, 0, 0]);
        assert_eq!(plan.positions, [0., 0., 1., 2., 0., 1., 0., 0.]);
        let row = |r: usize| plan.mask[r * 8..(r + 1) * 8].to_vec();
        assert_eq!(row(0), [1., 0., 0., 0., 0., 0., 0., 0.]);
        assert_eq!(row(2), [0., 1., 1., 1., 0., 0., 0., 0.]);
        // padded: [SEP] joins the last sub-sentence
        assert_eq!(row(5), [0., 0., 0., 0., 1., 1., 0., 0.]);
        assert_eq!(row(6), [0., 0., 0., 0., 0., 0., 1., 0.]);
        assert_eq!(plan.keys, [1., 1., 1., 1., 1., 1., 0., 0.]);
    }

    #[test]
    fn an_unpadded_last_sep_closes_no_block() {
        // the [SEP] in the last column stands alone, so the words before it (after the
        // last `.` or `?`, here after [CLS]) form no block: each attends to itself, at 0
        let c = TurboConfig {
            pad_to_longest: true,
            ..cfg()
        };
        let plan = TextPlan::new(&c, &[101, 7, 8, 102], None);
        assert_eq!(plan.len, 4);
        assert_eq!(plan.positions, [0.; 4]);
        assert_eq!(&plan.mask[12..16], [0., 0., 0., 1.]);
        assert_eq!(&plan.mask[4..8], [0., 1., 0., 0.]);
        // a `.` before it closes the block
        let plan = TextPlan::new(&c, &[101, 7, 1012, 102], None);
        assert_eq!(plan.positions, [0., 0., 1., 0.]);
        assert_eq!(&plan.mask[4..8], [0., 1., 1., 0.]);
    }

    #[test]
    fn a_group_pads_bert_to_its_own_length() {
        let mut c = cfg();
        c.groups.push(super::super::config::TextGroup {
            tokens: vec![101, 7, 102],
            pad_to: 4,
        });
        let plan = TextPlan::new(&c, &[101, 7, 102], None);
        assert_eq!((plan.bert_len, plan.len), (4, 8));
        assert_eq!(plan.ids, [101, 7, 102, 0]);
        assert_eq!(plan.bert_mask().len(), 16);
        assert_eq!(plan.keys[..4], [1., 1., 1., 0.]);
    }
}
