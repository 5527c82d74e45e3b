//! OpenVLA-OFT files (`convert_openvla_oft_to_gguf.py` with `gguf_blocks.py`'s
//! `write_prismatic_tower` and `write_prismatic_lm`, no q/k/v biases): the keys are ours (the
//! same `openvla_oft.` names, ours taken from vla.cpp, `vit.num_images` included), the
//! language model's, projector's, proprio projector's and head's tensors too (`token_embd`,
//! `lm.blk.{i}.*`, `lm.output_norm`, `vis.proj.fc{1,2,3}`, `aex.proprio.fc{1,2}`,
//! `aex.head.{ln1,fc1,ln2,fc2}`, `aex.head.blk.{i}.{ln,lin}`); what differs is what every
//! vla.cpp Prismatic file names otherwise: the towers, the register count, the statistics
//! (`statistics_json`) and the tokenizer ([`super::prismatic`]).
//!
//! vla.cpp's runtime (`src/models/openvla_oft.cpp`) builds the reference's sequence (`[BOS,
//! patches, proprio, the rest of the prompt, zeroed action slots, stop]`), runs Llama with no
//! mask (bidirectional, as the reference's transformers fork) and reads the head's rows one
//! before the slots, as the reference slices; where it departs from the reference, we follow
//! the reference:
//!
//! - the proprio state: vla.cpp feeds the request's state as given (its client normalises it
//!   with the suite's proprio q01 / q99 first); we normalise it with the file's statistics,
//!   as the reference's evaluation does (`normalize_proprio`), so clients send the raw state;
//! - the empty token (`tokens.empty_id`, 29871): vla.cpp reads the ids as sent (its client
//!   appends it); we append it where the ids do not end with it, as the reference's
//!   `predict_action` does (ids that end with it read the same);
//! - the cameras: vla.cpp takes as many views as a request brings, each already 224 x 224
//!   (its client resizes them); we compile for the file's `vit.num_images` and
//!   stretch any frame with the reference processor's bicubic resize;
//! - the weights: vla.cpp re-encodes its matrices to bf16 at load; we keep the file's types
//!   (`--weight-dtype` re-encodes).

use crate::gguf::GgufFile;
use crate::models::openvla_oft::ARCH;
use crate::Result;

use super::prismatic::{self, Layout};

const LAYOUT: Layout = Layout {
    arch: ARCH,
    model: "OpenVLA-OFT",
    ratios: &[],
};

/// `file` in our layout when it is in vla.cpp's ([`prismatic::is_vlacpp`]); otherwise as it
/// is.
pub(crate) fn translate(file: GgufFile) -> Result<GgufFile> {
    prismatic::translate(file, &LAYOUT, |_| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::vlacpp::prismatic::testing::{file, STATS};

    /// vla.cpp's keys besides the towers' (its converter states the camera count), and the
    /// head's tensors, which are ours.
    fn oft(stats: Option<&str>, image_size: u32) -> Result<GgufFile> {
        let keys = [
            ("vit.num_images", 2),
            ("vit.n_patches", 4),
            ("vit.image_size", image_size),
        ];
        let head = [
            ("aex.head.blk.0.ln.weight", vec![4]),
            ("aex.head.blk.0.lin.weight", vec![4, 4]),
        ];
        translate(file(ARCH, &keys, &head, stats, ""))
    }

    #[test]
    fn translates_the_towers_and_statistics_and_keeps_the_rest() {
        let f = oft(Some(STATS), 2).unwrap();
        let shape = |n: &str| f.tensor_info(n).unwrap().shape();
        assert_eq!(shape("vis.d.reg_embd.weight"), [3, 2]);
        assert_eq!(shape("vis.s.blk.0.attn_q.weight"), [2, 2]);
        assert_eq!(shape("aex.head.blk.0.lin.weight"), [4, 4]);
        assert_eq!(f.get_u64(&format!("{ARCH}.vit.num_images")).unwrap(), 2);
        assert_eq!(f.get_u64(&format!("{ARCH}.vit.dino.registers")).unwrap(), 3);
        assert_eq!(f.dequantize("action_q01.b").unwrap(), [0.0, 1.0]);
        assert_eq!(f.dequantize("state_q99.a").unwrap(), [1.0]);
    }

    #[test]
    fn refuses_a_file_without_statistics_or_with_another_patch_grid() {
        let e = oft(None, 2).err().unwrap().to_string();
        assert!(
            e.contains("vla.cpp's openvla_oft file has no openvla_oft.statistics_json"),
            "{e}"
        );
        // 4 patches stated, a 3 x 3 grid implied
        let e = oft(Some(STATS), 3).err().unwrap().to_string();
        assert!(
            e.contains("vit.n_patches = 4; vla-rs runs OpenVLA-OFT with 9 only"),
            "{e}"
        );
    }
}
