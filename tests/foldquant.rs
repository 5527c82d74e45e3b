//! FoldQuant files (issue 23): the uncalibrated export (`vla-quantize --type fq-*`) of a
//! SmolVLA whose projections are multiples of 64, read back, checked, and run in dequant
//! mode on cpu; hostile files refused with a clear error.

mod support;

use support::{chunk_on, cosine};
use vla::foldquant::{dequantize_site, export, FoldQuant, Module, Scheme};
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::models::smolvla::{demo_config, random_gguf, SmolVlaConfig};

/// The demo with a 128-wide language model and expert: every decoder projection qualifies.
fn config() -> SmolVlaConfig {
    let mut c = demo_config();
    c.lm.hidden = 128;
    c.attn.q_heads = 4;
    c.attn.kv_heads = 2;
    c.attn.head_dim = 32;
    c.expert.hidden = 128;
    c
}

fn float_file() -> GgufFile {
    GgufFile::from_bytes(random_gguf(&config(), 3, GgmlType::F32).unwrap()).unwrap()
}

fn fq_bytes(f: &GgufFile, scheme: Scheme) -> Vec<u8> {
    let (w, _) = export(f, scheme, |_, _| {}).unwrap();
    w.to_bytes().unwrap()
}

fn fq_file(f: &GgufFile, scheme: Scheme) -> GgufFile {
    GgufFile::from_bytes(fq_bytes(f, scheme)).unwrap()
}

fn chunk(f: GgufFile) -> Vec<f32> {
    chunk_on(f, "cpu").0
}

/// Every projection of both modules is a site, with the scheme's widths; each site's
/// dequantized matrix is the float one within the quantization step; the file loads and its
/// chunk is close to the float model's.
#[test]
fn export_reads_back_and_runs() {
    let f = float_file();
    let want = chunk(float_file());
    let kinds = [
        "attn_q", "attn_k", "attn_v", "attn_o", "ffn_gate", "ffn_up", "ffn_down",
    ];
    let projections = (f.tensors().iter())
        .filter(|t| {
            t.name.starts_with("vlm.blk.")
                && kinds
                    .iter()
                    .any(|k| t.name.ends_with(&format!(".{k}.weight")))
        })
        .count();
    assert!(projections >= 7, "{projections}");
    for (scheme, min_cos) in [
        (Scheme::W8A8, 0.999),
        (Scheme::W4A8, 0.95),
        (Scheme::W4A4, 0.95),
    ] {
        let q = fq_file(&f, scheme);
        let fq = FoldQuant::read(&q).unwrap().expect("a FoldQuant file");
        let sites = fq.sites(&q).unwrap();
        let llm = sites.iter().filter(|s| s.module == Module::Llm).count();
        assert_eq!(llm, projections, "{scheme:?}: every LM projection");
        assert!(
            sites.iter().any(|s| s.module == Module::Action),
            "{scheme:?}"
        );
        let bits = if scheme == Scheme::W8A8 { 8 } else { 4 };
        for s in &sites {
            assert_eq!((s.weight_bits, s.block), (bits, 64), "{}", s.name);
            let got = dequantize_site(&q, s, fq.fold_order).unwrap();
            let orig = f.dequantize(&format!("{}.weight", s.name)).unwrap();
            let wmax = orig.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(&orig)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            // a code step is at most 2 amax / qmax of the rotated row; rotation keeps norms
            let step = if bits == 8 { 2.0 / 127.0 } else { 2.0 / 7.0 };
            assert!(
                err <= step * wmax * 8.0,
                "{}: max error {err} (max |w| {wmax})",
                s.name
            );
        }
        let got = chunk(q);
        let cos = cosine(&got, &want);
        eprintln!(
            "{scheme:?}: {} sites, chunk cosine vs f32 {cos:.6}",
            sites.len()
        );
        assert!(cos >= min_cos, "{scheme:?}: cosine {cos}");
    }
}

/// A small hand-made file: `smolvla` metadata, one site `vlm.blk.0.attn_o` of `[n, k]`
/// (`packed` = k or k / 2 columns of codes), and what `edit` adds.
fn crafted(k_packed: u64, n: u64, codes: u8, edit: impl FnOnce(&mut GgufWriter)) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "smolvla").unwrap();
    w.add_metadata("smolvla.quant.method", "foldquant").unwrap();
    let bytes = vec![codes; (k_packed * n) as usize];
    w.add_tensor(
        "vlm.blk.0.attn_o.weight",
        GgmlType::I8,
        &[k_packed, n],
        bytes,
    )
    .unwrap();
    edit(&mut w);
    w.to_bytes().unwrap()
}

fn wscale(n: u64) -> impl FnOnce(&mut GgufWriter) {
    move |w| {
        w.add_f32(
            "vlm.blk.0.attn_o.wscale",
            GgmlType::F32,
            &[n],
            &vec![0.01; n as usize],
        )
        .unwrap()
    }
}

/// An edit adding the site's `wscale` and the metadata `key = value`.
fn with_meta(
    key: &'static str,
    value: impl Into<vla::gguf::Value>,
) -> impl FnOnce(&mut GgufWriter) {
    let value = value.into();
    move |w| {
        wscale(64)(w);
        w.add_metadata(key, value).unwrap();
    }
}

fn load_error(bytes: Vec<u8>) -> String {
    let f = GgufFile::from_bytes(bytes).unwrap();
    match FoldQuant::read(&f).and_then(|fq| match fq {
        Some(fq) => fq.sites(&f).map(|_| ()),
        None => Ok(()),
    }) {
        Ok(()) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hostile_files_are_refused_clearly() {
    // a well-formed one passes
    let f = GgufFile::from_bytes(crafted(64, 64, 3, wscale(64))).unwrap();
    assert_eq!(
        FoldQuant::read(&f)
            .unwrap()
            .unwrap()
            .sites(&f)
            .unwrap()
            .len(),
        1
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("multiples of 64", crafted(96, 64, 3, wscale(64))),
        ("multiples of 64", crafted(64, 40, 3, wscale(40))),
        ("code -128", crafted(64, 64, 0x80, wscale(64))),
        ("has no vlm.blk.0.attn_o.wscale", crafted(64, 64, 3, |_| {})),
        ("expected F32 [64]", crafted(64, 64, 3, wscale(32))),
        (
            "carry no ascale",
            crafted(64, 64, 3, |w| {
                wscale(64)(w);
                w.add_f32("vlm.blk.0.attn_o.ascale", GgmlType::F32, &[64], &[1.0; 64])
                    .unwrap();
            }),
        ),
        (
            "expected 4 or 8",
            crafted(64, 64, 3, with_meta("smolvla.quant.llm_weight_bits", 5u32)),
        ),
        (
            "power of two",
            crafted(
                64,
                64,
                3,
                with_meta("smolvla.quant.llm_rot_block_size", 48u32),
            ),
        ),
        (
            "is not <qkv|o|gateup|down>",
            crafted(64, 64, 3, with_meta("smolvla.quant.site_bits", "o:6")),
        ),
        (
            // INT4: the nibble 0x8 is -8
            "code -8",
            crafted(
                32,
                64,
                0x08,
                with_meta("smolvla.quant.llm_weight_bits", 4u32),
            ),
        ),
        (
            "all quantized or all float",
            crafted(64, 64, 3, |w| {
                wscale(64)(w);
                let qv = |w: &mut GgufWriter, name: &str| {
                    w.add_tensor(name, GgmlType::I8, &[64, 64], vec![1u8; 4096])
                        .unwrap();
                    let s = name.replace(".weight", ".wscale");
                    w.add_f32(s, GgmlType::F32, &[64], &[0.01; 64]).unwrap();
                };
                qv(w, "vlm.blk.0.attn_q.weight");
                qv(w, "vlm.blk.0.attn_k.weight");
                w.add_f32(
                    "vlm.blk.0.attn_v.weight",
                    GgmlType::F32,
                    &[64, 64],
                    &[0.0; 4096],
                )
                .unwrap();
            }),
        ),
        (
            "neither the language model",
            crafted(64, 64, 3, |w| {
                wscale(64)(w);
                w.add_tensor(
                    "vit.blk.0.fc1.weight",
                    GgmlType::I8,
                    &[64, 64],
                    vec![1u8; 4096],
                )
                .unwrap();
                w.add_f32("vit.blk.0.fc1.wscale", GgmlType::F32, &[64], &[0.01; 64])
                    .unwrap();
            }),
        ),
    ];
    for (want, bytes) in cases {
        let err = load_error(bytes);
        assert!(err.contains(want), "want {want:?} in: {err}");
    }
    // I8 weights without the method key, and an unknown method
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "smolvla").unwrap();
    w.add_tensor(
        "vlm.blk.0.attn_o.weight",
        GgmlType::I8,
        &[64, 64],
        vec![1u8; 4096],
    )
    .unwrap();
    let err = load_error(w.to_bytes().unwrap());
    assert!(err.contains("without smolvla.quant.method"), "{err}");
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "smolvla").unwrap();
    w.add_metadata("smolvla.quant.method", "awq").unwrap();
    let err = load_error(w.to_bytes().unwrap());
    assert!(err.contains("not \"foldquant\""), "{err}");
}

/// Both fold orders, as a calibrated exporter would fold `ascale` (before: rotate
/// `W diag(a)`; after: scale `W H` by `diag(a)`): the integer site and its dequantized
/// matrix both give `W x` back, within 8-bit quantization.
#[test]
fn ascale_folds_both_ways() {
    use vla::graph::FqParams;
    use vla::ops::foldquant::{export_weight, fold_weight, linear, FoldOrder};
    use vla::Tensor;
    let (k, n, rows) = (128usize, 64usize, 3usize);
    let r = |i: usize, s: u64| (((i as u64 * 2654435761 + s * 97) % 1000) as f32 / 500.0) - 1.0;
    let w: Vec<f32> = (0..n * k).map(|i| r(i, 1)).collect();
    let a: Vec<f32> = (0..k).map(|i| 0.5 + r(i, 2).abs()).collect();
    let x: Vec<f32> = (0..rows * k).map(|i| 3.0 * r(i, 3)).collect();
    let want: Vec<f32> = (0..rows)
        .flat_map(|t| {
            let (w, x) = (&w, &x);
            (0..n).map(move |j| (0..k).map(|i| w[j * k + i] * x[t * k + i]).sum::<f32>())
        })
        .collect();
    for order in [FoldOrder::Before, FoldOrder::After] {
        let folded: Vec<f32> = match order {
            FoldOrder::Before => {
                let scaled: Vec<f32> = w.iter().enumerate().map(|(i, v)| v * a[i % k]).collect();
                fold_weight(&scaled, k, 64)
            }
            FoldOrder::After => {
                let f = fold_weight(&w, k, 64);
                f.iter().enumerate().map(|(i, v)| v * a[i % k]).collect()
            }
        };
        // export_weight folds again: undo it (the rotation is its own inverse)
        let (codes, ws) = export_weight(&fold_weight(&folded, k, 64), k, 64, 8);
        let p = FqParams {
            weight_bits: 8,
            act_bits: 8,
            act: vla::ops::foldquant::ActRule::FoldQuant,
            block: 64,
            clip: 1.0,
            fold: Some(order),
            norm: None,
            addend: false,
        };
        let t = |shape: Vec<usize>, v: &[f32]| Tensor::from_f32(shape, v.to_vec()).unwrap();
        let codes_t = Tensor::from_bytes(
            vec![n, k],
            GgmlType::I8,
            codes.iter().map(|&c| c as u8).collect::<Vec<_>>(),
        )
        .unwrap();
        let got = linear(
            &t(vec![rows, k], &x),
            &codes_t,
            &t(vec![n], &ws),
            Some(&t(vec![k], &a)),
            None,
            None,
            &p,
            None,
        )
        .unwrap()
        .to_vec_f32()
        .unwrap();
        let cos = cosine(&got, &want);
        assert!(cos > 0.9995, "{order:?}: integer site cosine {cos}");

        // the same site in a file, dequantized
        let mut wr = GgufWriter::new();
        wr.add_metadata("general.architecture", "smolvla").unwrap();
        wr.add_metadata("smolvla.quant.method", "foldquant")
            .unwrap();
        let fo = if order == FoldOrder::Before {
            "before"
        } else {
            "after"
        };
        wr.add_metadata("smolvla.quant.action_fold_order", fo)
            .unwrap();
        let bytes: Vec<u8> = codes.iter().map(|&c| c as u8).collect();
        wr.add_tensor(
            "aex.blk.0.attn_o.weight",
            GgmlType::I8,
            &[k as u64, n as u64],
            bytes,
        )
        .unwrap();
        wr.add_f32("aex.blk.0.attn_o.wscale", GgmlType::F32, &[n as u64], &ws)
            .unwrap();
        wr.add_f32("aex.blk.0.attn_o.ascale", GgmlType::F32, &[k as u64], &a)
            .unwrap();
        let f = GgufFile::from_bytes(wr.to_bytes().unwrap()).unwrap();
        let fq = FoldQuant::read(&f).unwrap().unwrap();
        let site = &fq.sites(&f).unwrap()[0];
        assert!(site.ascale);
        let deq = dequantize_site(&f, site, fq.fold_order).unwrap();
        let cos = cosine(&deq, &w);
        assert!(cos > 0.9999, "{order:?}: dequantized cosine {cos}");
    }
}

/// The integer path (cpu, vulkan) and dequant mode (ggml) run the same file to nearly the
/// same chunk: the backends' float ops differ in rounding, and dequant mode does not
/// quantize the activations. SmolVLA, and pi0.5 (Gemma's folded gains, the adaRMS expert's
/// sites).
#[test]
fn every_backend_runs_the_file() {
    let mut pi05 = vla::models::pi0::small_config(vla::models::pi0::Variant::Pi05);
    pi05.lm.hidden = 128;
    pi05.lm.inter = 256;
    (pi05.attn.q_heads, pi05.attn.kv_heads, pi05.attn.head_dim) = (4, 1, 64);
    (pi05.expert.hidden, pi05.expert.inter) = (128, 256);
    let models = [
        ("smolvla", random_gguf(&config(), 3, GgmlType::F32).unwrap()),
        (
            "pi05",
            vla::models::pi0::random_gguf(&pi05, 3, GgmlType::F32).unwrap(),
        ),
    ];
    for (arch, float) in models {
        let float = GgufFile::from_bytes(float).unwrap();
        let bytes = fq_bytes(&float, Scheme::W8A8);
        let q = GgufFile::from_bytes(bytes.clone()).unwrap();
        let sites = FoldQuant::read(&q).unwrap().unwrap().sites(&q).unwrap();
        assert!(
            sites.iter().any(|s| s.module == Module::Action),
            "{arch}: expert sites"
        );
        let cpu = chunk(q);
        let f32_chunk = chunk(float);
        let cos = cosine(&cpu, &f32_chunk);
        eprintln!(
            "{arch} W8A8 ({} sites) vs f32 on cpu: cosine {cos:.7}",
            sites.len()
        );
        assert!(cos > 0.999, "{arch}: cosine vs f32 {cos}");
        for (backend, integer) in [("vulkan", true), ("ggml", false)] {
            let (got, dtypes) = chunk_on(GgufFile::from_bytes(bytes.clone()).unwrap(), backend);
            assert_eq!(dtypes.contains("I8"), integer, "{arch} {backend}: {dtypes}");
            let cos = cosine(&got, &cpu);
            eprintln!(
                "{arch} W8A8 cpu (integer) vs {backend} (integer {integer}): cosine {cos:.7}"
            );
            assert!(cos > 0.9995, "{arch} {backend}: cosine {cos}");
        }
    }
}

/// A file written to the published format by an independent writer
/// (tests/interop/foldquant_writer.py: numpy + gguf-py, needs what scripts/test.sh installs)
/// has byte-identical sites to ours and gives the same chunk.
#[test]
fn independent_writer_gives_the_same_file_and_chunk() {
    let dir = std::env::temp_dir().join(format!("vla-fq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("float.gguf");
    std::fs::write(&src, random_gguf(&config(), 3, GgmlType::F32).unwrap()).unwrap();
    for scheme in [Scheme::W8A8, Scheme::W4A4] {
        let out = dir.join(format!("{}.gguf", scheme.name()));
        let arg = scheme.name().trim_start_matches("fq-");
        support::interop(
            "foldquant_writer.py",
            &[src.as_os_str(), out.as_os_str(), arg.as_ref()],
        );
        let theirs = GgufFile::open(&out).unwrap();
        let ours = fq_file(&float_file(), scheme);
        support::same_sites(&theirs, &ours, &format!("{scheme:?}"));
        assert_eq!(chunk(theirs), chunk(ours), "{scheme:?}: chunks");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// In the predict graph of an integer-form file, every language-model q/k/v and gate/up
/// site fuses the RMSNorm before it (vla.cpp's order), and no other site does.
#[test]
fn language_model_sites_fuse_their_norm() {
    use vla::foldquant::integer_form;
    use vla::graph::Op;
    use vla::models::flow::{predict_graph, FlowArch};
    let q = fq_file(&float_file(), Scheme::W8A8);
    let fq = FoldQuant::read(&q).unwrap().unwrap();
    let sites = fq.sites(&q).unwrap();
    let ints = integer_form(q, &fq, &sites).unwrap();
    let cfg = config();
    let spec = cfg.spec();
    let g = predict_graph(&cfg, &spec, Some(&ints), &spec.model_frames()).unwrap();
    // (site, fused) of every FqLinear node; expert sites repeat once a denoise step
    let mut seen = std::collections::BTreeSet::new();
    for n in g.nodes() {
        let Op::FqLinear(p) = &n.op else { continue };
        if let Op::Weight(w) = &g.node(n.inputs[1]).op {
            seen.insert((w.trim_end_matches(".weight").to_owned(), p.norm.is_some()));
        }
    }
    // a site fuses its norm exactly when it is a language model's q/k/v or gate/up (the
    // graph holds the sites whose outputs matter: the last layer's unused ones are dropped)
    let kinds = ["attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"];
    let module = |name: &str| sites.iter().find(|s| s.name == name).map(|s| s.module);
    for (name, fused) in &seen {
        let want = module(name) == Some(Module::Llm) && kinds.iter().any(|k| name.ends_with(k));
        assert_eq!(*fused, want, "{name}");
    }
    let fused = seen.iter().filter(|s| s.1).count();
    assert!(
        fused >= 5 * (config().lm.n_layers - 1),
        "{fused} fused sites"
    );
    let names: std::collections::BTreeSet<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names.len(), seen.len(), "a site both fused and not");
}

/// The OpenVLA family's language model (`lm.blk`: Qwen2.5's q/k/v with biases, Llama 2's
/// without) quantizes as another language model's: every projection a site, the towers and
/// heads float; the integer path (cpu, vulkan) and dequant mode (ggml) give the float chunk.
#[test]
fn openvla_language_models_run_as_integers() {
    use vla::models::openvla::random_writer;
    use vla::models::presets::{openvla_oft_small_config, vla_adapter_small_config};
    let mut oft = openvla_oft_small_config();
    (oft.lm.hidden, oft.lm.inter, oft.lm.head_dim) = (64, 128, 16);
    let mut va = vla_adapter_small_config();
    (va.lm.hidden, va.lm.inter, va.lm.head_dim, va.lm.kv_heads) = (64, 128, 16, 4);
    let models = [
        (
            "openvla_oft",
            oft.lm.layers,
            random_writer(&oft, 3, GgmlType::F32, None),
        ),
        (
            "vla_adapter",
            va.lm.layers,
            random_writer(&va, 3, GgmlType::F32, None),
        ),
    ];
    for (arch, layers, w) in models {
        let float = GgufFile::from_bytes(w.unwrap().to_bytes().unwrap()).unwrap();
        let bytes = fq_bytes(&float, Scheme::W8A8);
        let q = GgufFile::from_bytes(bytes.clone()).unwrap();
        let sites = FoldQuant::read(&q).unwrap().unwrap().sites(&q).unwrap();
        assert_eq!(sites.len(), 7 * layers, "{arch}: sites");
        assert!(sites.iter().all(|s| s.module == Module::Llm), "{arch}");
        let cpu = chunk(q);
        let cos = cosine(&cpu, &chunk(float));
        eprintln!("{arch} W8A8 vs f32 on cpu: cosine {cos:.7}");
        assert!(cos > 0.999, "{arch}: cosine vs f32 {cos}");
        for (backend, integer) in [("vulkan", true), ("ggml", false)] {
            let (got, dtypes) = chunk_on(GgufFile::from_bytes(bytes.clone()).unwrap(), backend);
            assert_eq!(dtypes.contains("I8"), integer, "{arch} {backend}: {dtypes}");
            let cos = cosine(&got, &cpu);
            eprintln!("{arch} W8A8 cpu vs {backend}: cosine {cos:.7}");
            assert!(cos > 0.9995, "{arch} {backend}: cosine {cos}");
        }
    }
}
