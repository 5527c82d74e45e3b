//! Which converter a checkpoint folder needs, from the checkpoint's own files: lerobot
//! writes the policy `type` into `config.json`; GR00T N1.5 and N1.7 share the type `groot`
//! and differ in their pre-processor's packing step. Every converter checks this first, so
//! a checkpoint given to the wrong one is named, with the right subcommand, before any
//! arch-specific key is missing.

use super::{ckpt_err, read_json};
use crate::{Error, Result};
use std::path::Path;

/// The checkpoint kinds `vla-convert` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Smolvla,
    Pi0,
    Pi05,
    Gr00tN15,
    /// An Isaac-GR00T N1.6 checkpoint (no lerobot policy: `config.json`'s `model_type`).
    Gr00tN16,
    Gr00tN17,
    VlaJepa,
    Evo1,
    Act,
    /// A VLA-Adapter checkpoint (the reference's own layout: `config.json`'s `model_type`
    /// "openvla" over Qwen2.5, the head's `.pt` files beside it).
    VlaAdapter,
    /// An OpenVLA-OFT checkpoint (`model_type` "openvla" over Llama 2, the L1 head's `.pt`
    /// files beside it).
    OpenvlaOft,
    /// A BitVLA checkpoint (LLaVA's config over a BitNet `text_config`, the L1 head's `.pt`
    /// files beside it).
    Bitvla,
    /// An Octo checkpoint (`OctoModel.save_pretrained`: `config.json`'s `model` spec).
    Octo,
    /// A TurboVLA checkpoint (H-EmbodVis/TurboVLA: its `.pth`, a folder holding one, or a
    /// folder with `model.safetensors` and the model_config as `config.json`).
    Turbovla,
}

/// GR00T N1.7's packing step (GR00T N1.5's is `groot_pack_inputs_v3`).
const N17_PACK: &str = "groot_n1_7_pack_inputs_v1";

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Smolvla,
        Kind::Pi0,
        Kind::Pi05,
        Kind::Gr00tN15,
        Kind::Gr00tN16,
        Kind::Gr00tN17,
        Kind::VlaJepa,
        Kind::Evo1,
        Kind::Act,
        Kind::VlaAdapter,
        Kind::OpenvlaOft,
        Kind::Bitvla,
        Kind::Octo,
        Kind::Turbovla,
    ];

    /// The `vla-convert` subcommand (and GGUF arch name).
    pub fn subcommand(self) -> &'static str {
        match self {
            Kind::Smolvla => "smolvla",
            Kind::Pi0 => "pi0",
            Kind::Pi05 => "pi05",
            Kind::Gr00tN15 => "gr00t_n1_5",
            Kind::Gr00tN16 => "gr00t_n1_6",
            Kind::Gr00tN17 => "gr00t_n1_7",
            Kind::VlaJepa => "vla_jepa",
            Kind::Evo1 => "evo1",
            Kind::Act => "act",
            Kind::VlaAdapter => "vla_adapter",
            Kind::OpenvlaOft => "openvla_oft",
            Kind::Bitvla => "bitvla",
            Kind::Octo => "octo",
            Kind::Turbovla => "turbovla",
        }
    }

    /// How people name it.
    pub fn display_name(self) -> &'static str {
        match self {
            Kind::Smolvla => "SmolVLA",
            Kind::Pi0 => "pi0",
            Kind::Pi05 => "pi0.5",
            Kind::Gr00tN15 => "GR00T N1.5",
            Kind::Gr00tN16 => "GR00T N1.6",
            Kind::Gr00tN17 => "GR00T N1.7",
            Kind::VlaJepa => "VLA-JEPA",
            Kind::Evo1 => "Evo-1",
            Kind::Act => "ACT",
            Kind::VlaAdapter => "VLA-Adapter",
            Kind::OpenvlaOft => "OpenVLA-OFT",
            Kind::Bitvla => "BitVLA",
            Kind::Octo => "Octo",
            Kind::Turbovla => "TurboVLA",
        }
    }
}

/// The kind of the lerobot checkpoint folder `ckpt`, or an error saying what the folder is
/// not (no folder, no `config.json`, a policy type vla-rs does not serve).
pub fn detect(ckpt: &Path) -> Result<Kind> {
    if ckpt.is_file() && turbovla_pth(ckpt) {
        return Ok(Kind::Turbovla);
    }
    if !ckpt.is_dir() {
        let what = if ckpt.exists() {
            "is not a folder (nor a TurboVLA .pth)"
        } else {
            "does not exist"
        };
        return Err(ckpt_err(
            ckpt,
            format!(
                "{what}: vla-convert reads a lerobot checkpoint folder (config.json, \
                 model.safetensors and the policy_*processor* files, as lerobot's \
                 save_pretrained writes them)"
            ),
        ));
    }
    let config = ckpt.join("config.json");
    if !config.is_file() {
        let pth = super::turbovla::torch_file(ckpt).ok().flatten();
        if pth.is_some_and(|p| turbovla_pth(&p)) {
            return Ok(Kind::Turbovla);
        }
        return Err(ckpt_err(
            ckpt,
            "no config.json: not a lerobot checkpoint folder (a training run's checkpoint is \
             in its checkpoints/<step>/pretrained_model folder)",
        ));
    }
    let json = read_json(&config)?;
    // BitVLA: a BitNet language model, whatever the top model_type says (the evaluation picks
    // its classes through auto_map)
    let text = json
        .pointer("/text_config/model_type")
        .and_then(|t| t.as_str());
    if text.is_some_and(|t| t.eq_ignore_ascii_case("bitnet")) {
        return Ok(Kind::Bitvla);
    }
    if json.pointer("/model/readouts").is_some() && json.pointer("/model/heads").is_some() {
        return Ok(Kind::Octo);
    }
    if super::turbovla::is_turbovla_config(&json) {
        return Ok(Kind::Turbovla);
    }
    match json.get("model_type").and_then(|t| t.as_str()) {
        Some("Gr00tN1d6") => return Ok(Kind::Gr00tN16),
        Some("openvla") => return openvla(&config, &json),
        _ => {}
    }
    let Some(ty) = json.get("type").and_then(|t| t.as_str()) else {
        return Err(ckpt_err(
            &config,
            "no policy \"type\": not a lerobot policy config",
        ));
    };
    Ok(match ty {
        "smolvla" => Kind::Smolvla,
        "pi0" => Kind::Pi0,
        "pi05" => Kind::Pi05,
        "groot" => groot_version(ckpt)?,
        "vla_jepa" => Kind::VlaJepa,
        "evo1" => Kind::Evo1,
        "act" => Kind::Act,
        other => {
            let served: Vec<&str> =
                ["smolvla", "pi0", "pi05", "groot", "vla_jepa", "evo1", "act"].into();
            return Err(ckpt_err(
                &config,
                format!(
                    "policy type {other:?} is not one vla-rs converts (it converts {})",
                    served.join(", ")
                ),
            ));
        }
    })
}

/// Whether `file` is a `torch.save`d dict whose `model_config` is TurboVLA's (only the
/// pickle is read, no tensor).
fn turbovla_pth(file: &Path) -> bool {
    let config = super::torch_pt::TorchCheckpoint::peek(file, "model_config");
    config.is_ok_and(|c| c.is_some_and(|c| super::turbovla::is_turbovla_config(&c)))
}

/// An OpenVLA-family checkpoint: VLA-Adapter over Qwen2.5, OpenVLA-OFT over Llama 2 (its
/// `llm_backbone_id`); OpenVLA itself (discrete action tokens, no L1 head) is not served.
fn openvla(config: &Path, json: &serde_json::Value) -> Result<Kind> {
    let llm = json
        .get("llm_backbone_id")
        .and_then(|t| t.as_str())
        .unwrap_or("");
    let dir = config.parent().unwrap_or(Path::new("."));
    let head = std::fs::read_dir(dir).is_ok_and(|d| {
        d.filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with("action_head--"))
    });
    match (llm, head) {
        (l, _) if l.starts_with("qwen25") => Ok(Kind::VlaAdapter),
        (l, true) if l.starts_with("llama2") => Ok(Kind::OpenvlaOft),
        (l, false) if l.starts_with("llama2") => Err(ckpt_err(
            config,
            "an OpenVLA checkpoint without an action_head--*checkpoint.pt: OpenVLA's discrete action tokens are not served (OpenVLA-OFT's L1 head is)",
        )),
        _ => Err(ckpt_err(
            config,
            format!(
                "an OpenVLA checkpoint over {llm:?}: vla-rs converts VLA-Adapter (Qwen2.5) and OpenVLA-OFT (Llama 2)"
            ),
        )),
    }
}

/// GR00T N1.5 or N1.7: the pre-processor's packing step says which.
fn groot_version(ckpt: &Path) -> Result<Kind> {
    let pre = ckpt.join("policy_preprocessor.json");
    if !pre.is_file() {
        return Err(ckpt_err(
            ckpt,
            "a groot checkpoint without policy_preprocessor.json: its statistics and \
             embodiments are missing (lerobot >= 0.4 writes it)",
        ));
    }
    let n17 = !super::processor_steps(&pre, N17_PACK)?.is_empty();
    Ok(if n17 { Kind::Gr00tN17 } else { Kind::Gr00tN15 })
}

/// Fails unless `ckpt` is a checkpoint of `want`, naming the subcommand that reads it.
pub fn expect(ckpt: &Path, want: Kind) -> Result<()> {
    let got = detect(ckpt)?;
    if got == want {
        return Ok(());
    }
    Err(Error::Checkpoint {
        path: ckpt.to_owned(),
        reason: format!(
            "this is a {} checkpoint, not {}: run `vla-convert {}` (or `vla-convert auto`)",
            got.display_name(),
            want.display_name(),
            got.subcommand()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::fixture;

    #[test]
    fn each_fixture_is_its_kind() {
        let cases = [
            ("smolvla-tiny", Kind::Smolvla),
            ("pi0-tiny", Kind::Pi0),
            ("pi05-tiny", Kind::Pi05),
            ("groot-tiny", Kind::Gr00tN15),
            ("groot17-tiny", Kind::Gr00tN17),
            ("vla-jepa-tiny", Kind::VlaJepa),
            ("evo1-tiny", Kind::Evo1),
            ("act-tiny", Kind::Act),
            ("vla-adapter-tiny", Kind::VlaAdapter),
            ("openvla-oft-tiny", Kind::OpenvlaOft),
            ("bitvla-tiny", Kind::Bitvla),
            ("turbovla-tiny/turbovla.pth", Kind::Turbovla),
        ];
        for (dir, kind) in cases {
            assert_eq!(detect(&fixture(dir)).unwrap(), kind, "{dir}");
        }
    }

    #[test]
    fn the_wrong_converter_names_the_right_one() {
        let e = expect(&fixture("evo1-tiny"), Kind::Gr00tN15)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Evo-1 checkpoint, not GR00T N1.5") && e.contains("`vla-convert evo1`"),
            "{e}"
        );
        let e = detect(&fixture("tokenizer")).unwrap_err().to_string();
        assert!(e.contains("no config.json"), "{e}");
        let e = detect(&fixture("smolvla-tiny/config.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a folder"), "{e}");
    }
}
