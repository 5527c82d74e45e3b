//! docs/ARCHITECTURE.md against the tree: its numbered list of the crate's top-level modules
//! (bottom to top) names every module of `src/`, and no module's code imports one listed
//! below it (`crate::` paths outside comments), so the import arrows go one way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `src/NAME` -> its place in ARCHITECTURE.md's "Layers of the code" list.
fn documented_order() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("## Layers of the code")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"Layers of the code\" section");
    let section = section.split("\n## ").next().unwrap();
    let mut order = BTreeMap::new();
    for line in section.lines() {
        let Some((num, rest)) = line.split_once(". `src/") else {
            continue;
        };
        let Ok(rank) = num.trim().parse::<usize>() else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        order.insert(name, rank);
    }
    order
}

/// The top-level modules a Rust file's code (not its comments) names as `crate::X`,
/// `use crate::{X::.., Y}` groups included.
fn imports(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push(first_segment(rest));
            continue;
        };
        // The group's items at depth 0, up to its closing brace.
        let (mut depth, mut start) = (0usize, 0usize);
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(first_segment(group[start..k].trim()));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(first_segment(group[start..k].trim()));
                    start = k + 1;
                }
                _ => {}
            }
        }
    }
    out.retain(|n| !n.is_empty() && n.chars().next().unwrap().is_ascii_lowercase());
    out
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn architecture_md_lists_every_module_and_imports_go_one_way() {
    let order = documented_order();
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for top in std::fs::read_dir(&src).unwrap() {
        let name = top
            .unwrap()
            .file_name()
            .to_string_lossy()
            .replace(".rs", "");
        if name != "lib" && !order.contains_key(&name) {
            problems.push(format!("src/{name} is not in ARCHITECTURE.md's list"));
        }
    }
    for name in order.keys() {
        if !src.join(name).is_dir() && !src.join(format!("{name}.rs")).is_file() {
            problems.push(format!(
                "ARCHITECTURE.md lists src/{name}, which does not exist"
            ));
        }
    }
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .replace(".rs", "");
        let Some(&rank) = order.get(&top) else {
            continue;
        };
        for used in imports(&std::fs::read_to_string(file).unwrap()) {
            if let Some(&r) = order.get(&used) {
                if r > rank {
                    problems.push(format!(
                        "src/{} ({top}, item {rank}) imports {used}, item {r}: later in the list",
                        rel.display()
                    ));
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
