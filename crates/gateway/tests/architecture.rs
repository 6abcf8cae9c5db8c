//! The map in docs/architecture.md, kept true: the gateway's modules import one way, down the
//! layers the document lists (its ```layers block is the one list, read here), and no module
//! of any crate of the workspace imports in a circle with a sibling (files of one directory,
//! or the crate's top modules).
//!
//! Imports are read from the source: every `crate::…`, `super::…` and `self::…` path outside
//! comments, outside the `#[cfg(test)]` module at the end of a file and outside the `tests`
//! modules in files of their own (tests may reach anywhere), resolved to the module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate: `["cluster", "control"]`.
type ModPath = Vec<String>;

/// One source file: its module path and its code lines (1-based line numbers).
struct Source {
    path: ModPath,
    file: PathBuf,
    lines: Vec<(usize, String)>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `src` (binaries under `src/bin` and the crate root files left out:
/// they declare modules), with its module path.
fn sources(src: &Path) -> Vec<Source> {
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
            let code = text.split("\n#[cfg(test)]").next().unwrap();
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

/// The module paths a line names: `crate::a::b`, `super::x`, `self::y`, and the items of
/// `super::{x, y}` groups, resolved against the file's module path `at`.
fn named(line: &str, at: &ModPath) -> Vec<ModPath> {
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
            if let Some(group) = tail.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    let head = item.trim().split("::").next().unwrap_or("").trim();
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
    }
    found
}

/// An import between two sibling modules: where siblings `from` and `to` (children of
/// `parent`) meet, and the line that makes it.
#[derive(Debug)]
struct Edge {
    parent: ModPath,
    from: String,
    to: String,
    at: String,
}

/// The imports between siblings in the crate at `src`.
fn edges(src: &Path) -> Vec<Edge> {
    let files = sources(src);
    let modules: BTreeSet<ModPath> = files.iter().map(|s| s.path.clone()).collect();
    let mut out = Vec::new();
    for source in &files {
        for (n, line) in &source.lines {
            for mut target in named(line, &source.path) {
                // The longest prefix that is a module: items are not modules.
                while !target.is_empty() && !modules.contains(&target) {
                    target.pop();
                }
                let common = source
                    .path
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                // A module reaching into its own children, or up to an ancestor's items
                // (the glue a `mod.rs` holds): no edge between siblings.
                if common == source.path.len() || common == target.len() {
                    continue;
                }
                out.push(Edge {
                    parent: source.path[..common].to_vec(),
                    from: source.path[common].clone(),
                    to: target[common].clone(),
                    at: format!(
                        "{}:{n}",
                        source
                            .file
                            .strip_prefix(workspace())
                            .unwrap_or(&source.file)
                            .display()
                    ),
                });
            }
        }
    }
    out
}

/// A circle among the siblings under each parent, if any: the modules in order and the lines.
fn circles(edges: &[Edge]) -> Vec<String> {
    let mut by_parent: BTreeMap<&ModPath, BTreeMap<&str, BTreeMap<&str, &str>>> = BTreeMap::new();
    for e in edges {
        by_parent
            .entry(&e.parent)
            .or_default()
            .entry(&e.from)
            .or_default()
            .entry(&e.to)
            .or_insert(&e.at);
    }
    let mut found = Vec::new();
    for (parent, graph) in by_parent {
        // Depth-first search for a back edge.
        fn visit<'a>(
            node: &'a str,
            graph: &BTreeMap<&'a str, BTreeMap<&'a str, &'a str>>,
            stack: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) -> Option<Vec<&'a str>> {
            if let Some(i) = stack.iter().position(|n| *n == node) {
                let mut circle = stack[i..].to_vec();
                circle.push(node);
                return Some(circle);
            }
            if !done.insert(node) {
                return None;
            }
            stack.push(node);
            for next in graph.get(node).into_iter().flat_map(|m| m.keys()) {
                if let Some(c) = visit(next, graph, stack, done) {
                    return Some(c);
                }
            }
            stack.pop();
            None
        }
        let mut done = BTreeSet::new();
        for node in graph.keys() {
            if let Some(circle) = visit(node, &graph, &mut Vec::new(), &mut done) {
                let hops: Vec<String> = circle
                    .windows(2)
                    .map(|w| format!("{} -> {} ({})", w[0], w[1], graph[w[0]][w[1]]))
                    .collect();
                found.push(format!("in {:?}: {}", parent, hops.join(", ")));
                break;
            }
        }
    }
    found
}

/// The gateway's layers as docs/architecture.md lists them, top first (its ```layers block:
/// one layer a line, module names separated by spaces, `#` starts a comment).
fn layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let block = doc
        .split("```layers\n")
        .nth(1)
        .expect("docs/architecture.md has a ```layers block")
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

#[test]
fn the_gateway_imports_down_the_layers_the_architecture_document_lists() {
    let src = workspace().join("crates/gateway/src");
    let layers = layers();
    let layer_of = |m: &str| layers.iter().position(|l| l.iter().any(|x| x == m));
    let tops: BTreeSet<String> = sources(&src)
        .into_iter()
        .filter_map(|s| s.path.first().cloned())
        .collect();
    let unlisted: Vec<&String> = tops.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unlisted.is_empty(),
        "modules missing from the ```layers block of docs/architecture.md: {unlisted:?}"
    );
    let listed: Vec<&String> = layers
        .iter()
        .flatten()
        .filter(|m| !tops.contains(*m))
        .collect();
    assert!(
        listed.is_empty(),
        "layers name modules that do not exist: {listed:?}"
    );
    let upward: Vec<String> = edges(&src)
        .into_iter()
        .filter(|e| e.parent.is_empty() && layer_of(&e.to) < layer_of(&e.from))
        .map(|e| format!("{} imports {}, a layer above it ({})", e.from, e.to, e.at))
        .collect();
    assert!(
        upward.is_empty(),
        "imports against the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_module_of_the_workspace_imports_in_a_circle_with_its_siblings() {
    let mut found = Vec::new();
    for krate in ["core", "gateway", "loadgen"] {
        let src = workspace().join("crates").join(krate).join("src");
        found.extend(
            circles(&edges(&src))
                .into_iter()
                .map(|c| format!("{krate}: {c}")),
        );
    }
    assert!(found.is_empty(), "circles:\n{}", found.join("\n"));
}

#[test]
fn imports_are_read_as_the_compiler_resolves_them() {
    let at: ModPath = vec!["cluster".into(), "members".into()];
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<ModPath>();
    assert_eq!(
        named("use super::control::{self, Action};", &at),
        vec![path(&["cluster", "control"])]
    );
    assert_eq!(
        named("let x = crate::bridge::now_ms();", &at),
        vec![path(&["bridge", "now_ms"])]
    );
    assert_eq!(
        named(
            "use super::{Delivery, open_feed};",
            &path(&["transport", "poll"])
        ),
        vec![
            path(&["transport", "Delivery"]),
            path(&["transport", "open_feed"])
        ]
    );
    assert_eq!(
        named(
            "use super::super::error::ApiError;",
            &path(&["transport", "ws", "socket"])
        ),
        vec![path(&["transport", "error", "ApiError"])]
    );
    assert!(named("use herald_core::Feed; // see crate::x", &at).is_empty());
    assert!(named("let url = \"http://crate::x\";", &at).len() == 1);
}
