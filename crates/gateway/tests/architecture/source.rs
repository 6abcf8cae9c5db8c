//! The workspace's sources as the architecture tests read them: each file's module path and
//! code lines, the module paths a line names, the item a line defines.

use std::path::{Path, PathBuf};

/// A module path inside a crate: `["cluster", "control"]`.
pub(crate) type ModPath = Vec<String>;

/// One source file: its module path and its code lines (1-based line numbers).
pub(crate) struct Source {
    pub(crate) path: ModPath,
    pub(crate) file: PathBuf,
    pub(crate) lines: Vec<(usize, String)>,
}

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `src` (binaries under `src/bin` and the crate root files left out:
/// they declare modules), with its module path.
pub(crate) fn sources(src: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let file = entry.unwrap().path();
            if file.is_dir() {
                if file.file_name().is_some_and(|n| n != "bin") {
                    stack.push(file);
                }
                continue;
            }
            if file.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = file.strip_prefix(src).unwrap();
            let mut path: ModPath = rel
                .iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(
                path.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                path.pop();
            }
            // A `#[cfg(test)] mod tests;` in a file (or directory) of its own: test code,
            // as the module at the end of a file is.
            if path.iter().any(|p| p == "tests") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            // The test module at the end of a file (clippy's `items_after_test_module` keeps
            // it last); a `#[cfg(test)] mod tests;` above it is a file of its own.
            let code = text.split("\n#[cfg(test)]\nmod tests {").next().unwrap();
            let lines = code
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim_start().starts_with("//"))
                .map(|(i, l)| (i + 1, l.to_string()))
                .collect();
            out.push(Source { path, file, lines });
        }
    }
    out
}

/// Where each path of a line starts: the module its `crate::`, `super::` (`super::super::`…)
/// or `self::` names, resolved against the file's module path `at`, and the rest of the line
/// after it.
pub(crate) fn path_starts<'a>(line: &'a str, at: &ModPath) -> Vec<(ModPath, &'a str)> {
    // A trailing comment (` // …`) names nothing.
    let line = line.find(" //").map_or(line, |i| &line[..i]);
    let mut found = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in line.match_indices(start) {
            let before = line[..i].chars().last();
            let tail = &line[i + start.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // `mycrate::`, `xsuper::`, the second `super::` of `super::super::`
            }
            // The base the path starts from. A `mod.rs` is its directory's module: its
            // `self` is the directory, its `super` the parent.
            let mut base: ModPath = match start {
                "crate::" => Vec::new(),
                "self::" => at.clone(),
                _ => {
                    let mut p = at.clone();
                    p.pop();
                    p
                }
            };
            let mut tail = tail;
            while let Some(more) = tail.strip_prefix("super::") {
                base.pop();
                tail = more;
            }
            found.push((base, tail));
        }
    }
    found
}

/// The module paths a line names: `crate::a::b`, `super::x`, `self::y`, and the items of
/// `super::{x, y}` groups, resolved against the file's module path `at`.
pub(crate) fn named(line: &str, at: &ModPath) -> Vec<ModPath> {
    let mut found = Vec::new();
    for (base, mut tail) in path_starts(line, at) {
        if let Some(group) = tail.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                // `x as y`: the item is `x`.
                let head = item.trim().split("::").next().unwrap_or("");
                let head = head.split_whitespace().next().unwrap_or("");
                if !head.is_empty() && head != "self" {
                    let mut p = base.clone();
                    p.push(head.to_string());
                    found.push(p);
                }
            }
            continue;
        }
        let mut p = base;
        for seg in tail.split("::") {
            let seg: String = seg
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if seg.is_empty() {
                break;
            }
            let last = seg.len() < tail.len() && tail[seg.len()..].starts_with("::");
            p.push(seg);
            if !last {
                break;
            }
            tail = &tail[p.last().unwrap().len() + 2..];
        }
        found.push(p);
    }
    found
}

/// The item a line of code defines, if it defines one: `pub(crate) async fn name(`.
pub(crate) fn item_on(line: &str) -> Option<(&str, &str)> {
    let mut rest = line.trim_start();
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => r,
        }
        .trim_start();
    }
    loop {
        let before = rest;
        for q in ["async ", "const ", "unsafe ", "default "] {
            rest = rest.strip_prefix(q).unwrap_or(rest).trim_start();
        }
        if let Some(r) = rest.strip_prefix("extern \"") {
            rest = r.split_once('"')?.1.trim_start();
        }
        if rest == before {
            break;
        }
    }
    let (kind, rest) = rest.split_once(' ')?;
    if !matches!(kind, "fn" | "struct" | "enum" | "trait" | "type" | "mod") {
        return None;
    }
    let name = rest.trim_start();
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| (kind, &name[..end]))
}

/// docs/architecture.md's ```name block: the words of each of its lines, `#` starting a
/// comment, empty lines left out.
pub(crate) fn doc_block(name: &str) -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let block = doc
        .split(&format!("```{name}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/architecture.md has a ```{name} block"))
        .split("```")
        .next()
        .unwrap();
    block
        .lines()
        .map(|l| l.split('#').next().unwrap())
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| !l.is_empty())
        .collect()
}
