//! Every binary's `--help`, as a new user reads it: every argument and option says what it
//! is (none left blank), the model file is spelled `MODEL.gguf` wherever a binary reads
//! one, and vla-server names its defaults.

use std::process::Command;

fn help(bin: &str, sub: &[&str]) -> String {
    let out = Command::new(bin).args(sub).arg("--help").output().unwrap();
    assert!(out.status.success(), "{bin} {sub:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The entries of `--help` that have no text: beside the entry (short form) or on the
/// line below it, indented (long form, when some option has several paragraphs).
fn blank_entries(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let is_entry = |l: &str| {
        let body = l.trim_start();
        let indent = l.len() - body.len();
        (indent == 2 || indent == 6) && (body.starts_with('-') || body.starts_with('<'))
    };
    let is_text = |l: &str| l.starts_with("          ") && !l.trim().is_empty();
    lines
        .iter()
        .enumerate()
        .filter(|&(i, l)| {
            let beside = l
                .trim()
                .split_once("  ")
                .is_some_and(|(_, t)| !t.trim().is_empty());
            is_entry(l) && !beside && !lines.get(i + 1).is_some_and(|n| is_text(n))
        })
        .map(|(_, l)| l.trim().to_owned())
        .filter(|l| !l.starts_with("-h, --help") && !l.starts_with("-V, --version"))
        .collect()
}

#[test]
fn no_option_is_left_without_help() {
    let cases: [(&str, &[&[&str]]); 5] = [
        (env!("CARGO_BIN_EXE_vla-server"), &[&[]]),
        (env!("CARGO_BIN_EXE_vla-bench"), &[&[]]),
        (env!("CARGO_BIN_EXE_vla-quantize"), &[&[]]),
        (
            env!("CARGO_BIN_EXE_vla-gguf"),
            &[&[], &["info"], &["dequant"], &["demo"]],
        ),
        (
            env!("CARGO_BIN_EXE_vla-convert"),
            &[
                &[],
                &["auto"],
                &["smolvla"],
                &["pi0"],
                &["pi05"],
                &["gr00t_n1_5"],
                &["gr00t_n1_7"],
                &["vla_jepa"],
                &["evo1"],
            ],
        ),
    ];
    let mut blank = Vec::new();
    for (bin, subs) in cases {
        for sub in subs {
            let text = help(bin, sub);
            for entry in blank_entries(&text) {
                blank.push(format!("{bin} {sub:?}: {entry}"));
            }
        }
    }
    assert!(
        blank.is_empty(),
        "options without help:\n{}",
        blank.join("\n")
    );
}

#[test]
fn the_model_file_is_spelled_one_way_and_defaults_are_shown() {
    for (bin, sub) in [
        (env!("CARGO_BIN_EXE_vla-server"), &[][..]),
        (env!("CARGO_BIN_EXE_vla-bench"), &[]),
        (env!("CARGO_BIN_EXE_vla-quantize"), &[]),
        (env!("CARGO_BIN_EXE_vla-gguf"), &["info"]),
        (env!("CARGO_BIN_EXE_vla-gguf"), &["dequant"]),
    ] {
        let text = help(bin, sub);
        assert!(
            text.contains("[MODEL.gguf]") || text.contains("<MODEL.gguf>"),
            "{bin} {sub:?}:\n{text}"
        );
    }
    let text = help(env!("CARGO_BIN_EXE_vla-server"), &[]);
    for default in [
        "[default: tcp://*:5555]",
        "[default: cpu]",
        "[default: info]",
    ] {
        assert!(text.contains(default), "{default}:\n{text}");
    }
}
