//! FoldQuant files of GR00T N1.5, N1.6 and N1.7 (vla.cpp's sites: the Qwen3 language model's
//! decoder projections and the DiT blocks' `aex.dit.{i}.{attn_q, attn_k, attn_v, attn_o,
//! ff0, ff2}` with their biases; the VL self-attention, adaLN, encoders and towers stay
//! float), from our export and from an independent writer, run as integers on cpu and
//! vulkan and in dequant mode on ggml.

mod support;

use support::{chunk_on, cosine};
use vla::foldquant::{dequantized, export, FoldQuant, Module, Scheme};
use vla::gguf::{GgmlType, GgufFile};
use vla::models::presets::{
    gr00t_n1_6_small_config, gr00t_n1_7_small_config, gr00t_small_config, random_writer,
};

/// The small GR00T N1.5, N1.6 and N1.7 with every language-model and DiT projection a multiple of
/// 64 (heads of 32, FFNs of 128, DiT 2 x 32), as float files.
fn float_models() -> Vec<(&'static str, Vec<u8>)> {
    let mut n15 = gr00t_small_config();
    n15.attn.head_dim = 32;
    n15.lm.inter = 128;
    n15.dit.head_dim = 32;
    n15.head.embed = 64;
    let mut n16 = gr00t_n1_6_small_config();
    n16.attn.head_dim = 32;
    n16.lm.inter = 128;
    n16.dit.head_dim = 32;
    n16.head.embed = 64;
    let mut n17 = gr00t_n1_7_small_config();
    n17.attn.head_dim = 32;
    n17.mrope.sections = [6, 5, 5];
    n17.lm.inter = 128;
    n17.dit.head_dim = 32;
    n17.head.embed = 64;
    let bytes = |w: vla::gguf::GgufWriter| w.to_bytes().unwrap();
    vec![
        (
            "gr00t_n1_5",
            bytes(random_writer(&n15, 3, GgmlType::F32, None).unwrap()),
        ),
        (
            "gr00t_n1_6",
            bytes(random_writer(&n16, 3, GgmlType::F32, None).unwrap()),
        ),
        (
            "gr00t_n1_7",
            bytes(random_writer(&n17, 3, GgmlType::F32, None).unwrap()),
        ),
    ]
}

fn fq_bytes(f: &GgufFile) -> Vec<u8> {
    let (w, _) = export(f, Scheme::W8A8, |_, _| {}).unwrap();
    w.to_bytes().unwrap()
}

/// Every DiT block's six projections and every language-model projection are sites, the VL
/// self-attention none; the integer chunk is close to the float model's on cpu, and vulkan
/// (integers) and ggml (dequant mode) give nearly cpu's.
#[test]
fn dit_and_language_model_sites_run_everywhere() {
    for (arch, float) in float_models() {
        let float = GgufFile::from_bytes(float).unwrap();
        let bytes = fq_bytes(&float);
        let q = GgufFile::from_bytes(bytes.clone()).unwrap();
        let sites = FoldQuant::read(&q).unwrap().unwrap().sites(&q).unwrap();
        let names: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
        for kind in ["attn_q", "attn_k", "attn_v", "attn_o", "ff0", "ff2"] {
            let site = format!("aex.dit.0.{kind}");
            assert!(
                names.contains(&site.as_str()),
                "{arch}: {site} in {names:?}"
            );
            let bias = q.tensor_info(&format!("{site}.bias")).unwrap();
            assert_eq!(bias.ty, GgmlType::F32, "{arch}: {site}.bias stays float");
        }
        assert!(
            names.iter().all(|n| !n.starts_with("aex.vlsa")),
            "{arch}: {names:?}"
        );
        let llm = sites.iter().filter(|s| s.module == Module::Llm).count();
        assert!(llm >= 7, "{arch}: {llm} language-model sites");
        let (cpu, dtypes) = chunk_on(q, "cpu");
        assert!(dtypes.contains("I8"), "{arch}: {dtypes}");
        let cos = cosine(&cpu, &chunk_on(float, "cpu").0);
        eprintln!(
            "{arch} W8A8 ({} sites) vs f32 on cpu: cosine {cos:.7}",
            sites.len()
        );
        assert!(cos > 0.999, "{arch}: cosine vs f32 {cos}");
        for (backend, integer) in [("vulkan", true), ("ggml", false)] {
            let (got, dtypes) = chunk_on(GgufFile::from_bytes(bytes.clone()).unwrap(), backend);
            assert_eq!(dtypes.contains("I8"), integer, "{arch} {backend}: {dtypes}");
            let cos = cosine(&got, &cpu);
            eprintln!("{arch} W8A8 cpu vs {backend} (integer {integer}): cosine {cos:.7}");
            assert!(cos > 0.9995, "{arch} {backend}: cosine {cos}");
        }
    }
}

/// A file written to the published format by an independent writer
/// (tests/interop/foldquant_writer.py: numpy + gguf-py) has byte-identical sites to ours, and
/// run as integers gives the chunk of its dequantised reading within the activations'
/// quantization.
#[test]
fn independent_writer_gives_the_same_sites_and_chunk() {
    let dir = std::env::temp_dir().join(format!("vla-fq-gr00t-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (arch, float) in float_models() {
        let (src, out) = (
            dir.join(format!("{arch}.gguf")),
            dir.join(format!("{arch}-fq.gguf")),
        );
        std::fs::write(&src, &float).unwrap();
        support::interop(
            "foldquant_writer.py",
            &[src.as_os_str(), out.as_os_str(), "w8a8".as_ref()],
        );
        let theirs = GgufFile::open(&out).unwrap();
        let ours = GgufFile::from_bytes(fq_bytes(&GgufFile::from_bytes(float).unwrap())).unwrap();
        let sites = support::same_sites(&theirs, &ours, arch);
        let fq = FoldQuant::read(&theirs).unwrap().unwrap();
        let integer = chunk_on(GgufFile::open(&out).unwrap(), "cpu").0;
        let read = dequantized(GgufFile::open(&out).unwrap(), &fq, &sites).unwrap();
        let cos = cosine(&integer, &chunk_on(read, "cpu").0);
        eprintln!(
            "{arch}: independent file as integers vs its dequantised reading: cosine {cos:.7}"
        );
        assert!(cos > 0.9995, "{arch}: cosine {cos}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
