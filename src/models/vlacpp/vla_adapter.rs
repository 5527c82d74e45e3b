//! VLA-Adapter files (`convert_vla_adapter_to_gguf.py` with `gguf_blocks.py`'s
//! `write_prismatic_tower` and `write_prismatic_lm`): the keys are ours (the same
//! `vla_adapter.` names, ours taken from vla.cpp), the language model, projector and head
//! tensors too; what differs: the towers, the register and camera counts, the statistics and
//! the tokenizer, as for every vla.cpp Prismatic file ([`super::prismatic`]), and the head's
//! `aex.head.blk.{i}.gating` (ours `gating.weight`). The file states `action.head_dim`,
//! checked against ours (`lm.hidden / action.head_heads`).
//!
//! Tensors vla.cpp's file holds that the graphs do not read stay unread. vla.cpp itself
//! departs from the reference in two ways that we do not copy: it feeds the proprio state
//! raw, where the reference normalises it with the suite's q01 / q99 (we do), and it computes
//! the head's rotary table in f64, where the reference's bf16 head rounds it (we use the
//! reference's table, [`crate::models::vla_adapter::graphs::pair_tables`]). A vla.cpp file
//! served here therefore gives the reference's chunk, not vla.cpp's.

use crate::gguf::GgufFile;
use crate::models::vla_adapter::ARCH;
use crate::Result;

use super::prismatic::{self, Layout};

const LAYOUT: Layout = Layout {
    arch: ARCH,
    model: "VLA-Adapter",
    ratios: &[("action.head_dim", "lm.hidden", "action.head_heads")],
};

/// `file` in our layout when it is in vla.cpp's ([`prismatic::is_vlacpp`]); otherwise as it
/// is.
pub(crate) fn translate(file: GgufFile) -> Result<GgufFile> {
    prismatic::translate(file, &LAYOUT, gating)
}

/// The head's gates as ours.
fn gating(file: &mut GgufFile) -> Result<()> {
    for i in 0..file.get_u64(&format!("{ARCH}.action.head_blocks"))? {
        let blk = format!("aex.head.blk.{i}");
        let gate = format!("{blk}.gating");
        file.reshape_tensor(&gate, &[1])?;
        file.rename_tensor(&gate, &format!("{blk}.gating.weight"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::vlacpp::prismatic::testing::{file, STATS};

    /// One head block, heads of 2 over a width of 4; `head_dim` as stated; `skip` a tensor
    /// left out.
    fn adapter(head_dim: u32, skip: &str) -> Result<GgufFile> {
        let keys = [
            ("lm.hidden", 4),
            ("action.head_heads", 2),
            ("action.head_dim", head_dim),
            ("action.head_blocks", 1),
        ];
        let gate = [("aex.head.blk.0.gating", vec![1])];
        translate(file(ARCH, &keys, &gate, Some(STATS), skip))
    }

    #[test]
    fn translates_the_gates_and_the_towers() {
        let f = adapter(2, "").unwrap();
        assert_eq!(
            f.tensor_info("aex.head.blk.0.gating.weight")
                .unwrap()
                .shape(),
            [1]
        );
        assert!(f.tensor_info("vis.d.blk.0.attn_q.weight").is_ok());
        assert_eq!(crate::preprocess::normalize::embodiments(&f), ["a", "b"]);
    }

    #[test]
    fn refuses_another_head_dim_and_a_missing_gate() {
        let e = adapter(3, "").err().unwrap().to_string();
        assert!(
            e.contains("action.head_dim = 3; vla-rs runs VLA-Adapter with 2"),
            "{e}"
        );
        let e = adapter(2, "aex.head.blk.0.gating")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("aex.head.blk.0.gating"), "{e}");
    }
}
