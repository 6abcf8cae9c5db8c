//! The map in docs/architecture.md, kept true: the gateway's modules import one way, down the
//! layers the document lists (its ```layers block is the one list, read here), no module
//! of any crate of the workspace imports in a circle with a sibling (files of one directory,
//! or the crate's top modules), no file imports what its parent's `mod.rs` defines but the
//! document's listed exceptions (`architecture/parents.rs`), and each word of its vocabulary
//! (its "Vocabulary" table, read here too) names types, functions and modules only where the
//! table says.
//!
//! Imports are read from the source: every `crate::…`, `super::…` and `self::…` path outside
//! comments, outside the `#[cfg(test)] mod tests {` at the end of a file and outside the `tests`
//! modules in files of their own (tests may reach anywhere), resolved to the module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "architecture/parents.rs"]
mod parents;
#[path = "architecture/source.rs"]
mod source;

use source::{ModPath, doc_block, item_on, named, sources, workspace};

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
    doc_block("layers")
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

/// One word of docs/architecture.md's vocabulary (its "Vocabulary" table): the word, and the
/// places (paths from the workspace root: a file, or a directory and everything under it)
/// where a name holding it may be defined.
#[derive(Debug)]
struct Word {
    word: String,
    places: Vec<String>,
}

/// The vocabulary table of docs/architecture.md: a row per word, the word in the first cell,
/// the places as the `code` spans of the last.
fn vocabulary() -> Vec<Word> {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## Vocabulary")
        .nth(1)
        .expect("docs/architecture.md has a ## Vocabulary section");
    let section = section.split("\n## ").next().unwrap();
    let mut words = Vec::new();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let word = cells[0].trim_matches(|c| c == '*' || c == '`');
        if word == "word" || word.starts_with("---") {
            continue; // the table's head
        }
        let places = cells[cells.len() - 1]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|p| p.trim_end_matches('/').to_string())
            .collect();
        words.push(Word {
            word: word.to_lowercase(),
            places,
        });
    }
    words
}

/// A named item: `fn`, `struct`, `enum`, `trait`, `type` or `mod`, where it is written and
/// where it lives (a `mod name;` lives in its own file).
#[derive(Debug)]
struct Item {
    kind: String,
    name: String,
    /// Where it is written: the file, from the workspace root, and the line.
    at: String,
    /// The file it lives in, from the workspace root.
    place: String,
}

/// Every named item of the crate at `src`, outside tests (as [`sources`] reads it).
fn items(src: &Path) -> Vec<Item> {
    let rel = |f: &Path| {
        f.strip_prefix(workspace())
            .unwrap_or(f)
            .to_string_lossy()
            .into_owned()
    };
    let mut out = Vec::new();
    for source in sources(src) {
        for (n, line) in &source.lines {
            let line = line.find(" //").map_or(line.as_str(), |i| &line[..i]);
            let Some((kind, name)) = item_on(line) else {
                continue;
            };
            let mut place = rel(&source.file);
            if kind == "mod" && line.trim_end().ends_with(';') {
                // `mod name;`: its file, beside a `mod.rs` or `lib.rs`, else under the file's
                // own directory.
                let dir = match source.file.file_stem().and_then(|s| s.to_str()) {
                    Some("mod" | "lib" | "main") => source.file.parent().unwrap().to_path_buf(),
                    _ => source.file.with_extension(""),
                };
                let flat = dir.join(format!("{name}.rs"));
                place = match flat.exists() {
                    true => rel(&flat),
                    false => rel(&dir.join(name).join("mod.rs")),
                };
            }
            out.push(Item {
                kind: kind.to_string(),
                name: name.to_string(),
                at: format!("{}:{n}", rel(&source.file)),
                place,
            });
        }
    }
    out
}

/// The word parts of a name, lower case: `open_feed` and `FeedEvent` both hold `feed`;
/// `HTTPServer` is `http`, `server`.
fn parts(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in name.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let lower_to_upper = !chars[i - 1].is_uppercase() && chars[i].is_uppercase();
            let acronym_end = chars[i - 1].is_uppercase()
                && chars[i].is_uppercase()
                && chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            if lower_to_upper || acronym_end {
                out.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        out.push(chars[start..].iter().collect::<String>().to_lowercase());
    }
    out
}

/// Whether a name holds `word` as a whole part, or one of its forms (-s, -es, -ed, -er, -ers,
/// -ing, a final y as i: `feeds`, `feeder`, `groups`, `passes`, `carrier`, `Carried`).
fn holds_word(name: &str, word: &str) -> bool {
    let i_stem = word.strip_suffix('y').map(|stem| format!("{stem}i"));
    parts(name).iter().any(|p| {
        let formed = |stem: &str, endings: &[&str]| {
            p.strip_prefix(stem)
                .is_some_and(|rest| endings.contains(&rest))
        };
        formed(word, &["", "s", "es", "ed", "er", "ers", "ing"])
            || i_stem
                .as_deref()
                .is_some_and(|i| formed(i, &["es", "ed", "er", "ers"]))
    })
}

#[test]
fn each_word_of_the_vocabulary_names_things_only_where_the_architecture_document_says() {
    let words = vocabulary();
    assert!(
        words.len() >= 5,
        "the vocabulary table of docs/architecture.md reads as {words:?}"
    );
    let mut missing: Vec<String> = words
        .iter()
        .flat_map(|w| w.places.iter().map(move |p| (w, p)))
        .filter(|(_, p)| !workspace().join(p).exists())
        .map(|(w, p)| format!("{p} (for {:?})", w.word))
        .collect();
    missing.extend(
        (words.iter())
            .filter(|w| w.places.is_empty())
            .map(|w| format!("{:?} lists no place", w.word)),
    );
    assert!(
        missing.is_empty(),
        "the vocabulary of docs/architecture.md lists places that do not exist: {missing:?}"
    );
    let mut found = Vec::new();
    for krate in ["core", "gateway"] {
        for item in items(&workspace().join("crates").join(krate).join("src")) {
            for w in &words {
                let allowed = w
                    .places
                    .iter()
                    .any(|p| item.place == *p || item.place.starts_with(&format!("{p}/")));
                if holds_word(&item.name, &w.word) && !allowed {
                    found.push(format!(
                        "{}: {} {} holds the word {:?}, whose names live only in {}",
                        item.at,
                        item.kind,
                        item.name,
                        w.word,
                        w.places.join(", ")
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "names against the vocabulary of docs/architecture.md (one word, one meaning: rename \
         the item, or, if the word means the same there, list the place):\n{}",
        found.join("\n")
    );
}

#[test]
fn names_are_split_into_words_as_written() {
    assert_eq!(parts("open_query_feed"), ["open", "query", "feed"]);
    assert_eq!(parts("FeedEvent"), ["feed", "event"]);
    assert_eq!(parts("HTTPServer"), ["http", "server"]);
    assert_eq!(parts("SseForm"), ["sse", "form"]);
    assert!(holds_word("feeder", "feed"));
    assert!(holds_word("Feeds", "feed"));
    assert!(holds_word("bridge_groups_followed", "group"));
    assert!(!holds_word("passwords_are_redacted", "pass"));
    assert!(!holds_word("feedback", "feed"));
    assert!(holds_word("carrier", "carry") && holds_word("Carried", "carry"));
    assert!(holds_word("carry_out", "carry") && !holds_word("carriage", "carry"));
    assert_eq!(
        item_on("    pub(crate) async fn carrier(&self, topic: &str) {"),
        Some(("fn", "carrier"))
    );
    assert_eq!(item_on("pub mod feed;"), Some(("mod", "feed")));
    assert_eq!(item_on("impl Feed {"), None);
    assert_eq!(item_on("let f: fn(u8) = g;"), None);
}
