//! Imports point down inside a module too: no file takes what it needs from an ancestor's
//! `mod.rs` (or its crate's `lib.rs`), by `super::…` or by `crate::<the ancestor's path>::…`;
//! what siblings share lives in a sibling file. The exceptions are docs/architecture.md's
//! ```parent-imports block (a file, the items it may take, why), read here, so that the
//! document and this check cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::source::{ModPath, Source, doc_block, item_on, path_starts, sources, workspace};

/// An import of an item an ancestor's `mod.rs` or `lib.rs` defines.
#[derive(Debug)]
struct UpImport {
    /// The importing file, from the workspace root.
    file: String,
    line: usize,
    item: String,
    /// The file that defines it, from the workspace root.
    parent: String,
}

/// The name of the item a line at the top level of a file defines, if any: `fn`, `struct`,
/// `enum`, `trait`, `type`, `const`, `static`, `macro_rules!` and inline `mod … {` (a
/// `mod name;` declares a file of its own: a sibling, not an item of this one).
fn defined_on(line: &str) -> Option<&str> {
    if line.starts_with(char::is_whitespace) {
        return None; // inside an item: a field, a method, a `use` in a block
    }
    if let Some(name) = line.strip_prefix("macro_rules! ") {
        return name
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next();
    }
    if let Some((kind, name)) = item_on(line) {
        return (kind != "mod" || !line.trim_end().ends_with(';')).then_some(name);
    }
    // `const NAME: T` and `static NAME: T` (item_on reads `const` as a qualifier of `fn`).
    let mut rest = line;
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => r,
        }
        .trim_start();
    }
    let rest = (rest
        .strip_prefix("const ")
        .or_else(|| rest.strip_prefix("static ")))?;
    let rest = rest.strip_prefix("mut ").unwrap_or(rest);
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    (end > 0 && rest[end..].starts_with(':')).then(|| &rest[..end])
}

/// A file's code as statements to read imports from: a `use` written over several lines
/// joined into one, every other line as it is (with its line number).
fn statements(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in lines {
        if open {
            let last = out.last_mut().unwrap();
            last.1.push(' ');
            last.1.push_str(line.trim());
        } else {
            out.push((*n, line.clone()));
            let code = line.trim_start();
            let code = code
                .strip_prefix("pub")
                .map_or(code, |r| r.split_once(' ').map_or(r, |(_, r)| r));
            open = code.starts_with("use ");
        }
        open = open && !line.contains(';');
    }
    out
}

/// Every path a statement names, in full: `crate::a::{b::C, D as E}` names `a::b::C` and
/// `a::D` (groups at any depth, where `named` stops at the module), resolved
/// against the file's module path `at`.
fn paths(statement: &str, at: &ModPath) -> Vec<ModPath> {
    fn walk(mut path: ModPath, mut tail: &str, out: &mut Vec<ModPath>) {
        if tail.trim().is_empty() {
            return; // after a group's last comma
        }
        loop {
            tail = tail.trim_start();
            if let Some(group) = tail.strip_prefix('{') {
                // The group up to its closing brace; its items split at its own commas.
                let (mut depth, mut from) = (0, 0);
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            walk(path.clone(), &group[from..i], out);
                            return;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            walk(path.clone(), &group[from..i], out);
                            from = i + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            match &tail[..end] {
                "" => break,
                "self" => {}
                seg => path.push(seg.to_string()),
            }
            match tail[end..].strip_prefix("::") {
                Some(rest) => tail = rest,
                None => break,
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    for (base, tail) in path_starts(statement, at) {
        walk(base, tail, &mut out);
    }
    out
}

/// The imports in the crate at `src` of items its `mod.rs` and `lib.rs` files define, by the
/// modules below them (every ancestor, not only the parent).
fn up_imports(src: &Path) -> Vec<UpImport> {
    let files = sources(src);
    let rel = |s: &Source| {
        (s.file.strip_prefix(workspace()).unwrap_or(&s.file))
            .display()
            .to_string()
    };
    // Each directory module (and the crate root): the items its own file defines.
    let mut defined: BTreeMap<&ModPath, (String, BTreeSet<&str>)> = BTreeMap::new();
    for s in &files {
        if s.file
            .file_name()
            .is_some_and(|f| f == "mod.rs" || f == "lib.rs")
        {
            let names = s.lines.iter().filter_map(|(_, l)| defined_on(l)).collect();
            defined.insert(&s.path, (rel(s), names));
        }
    }
    let mut out = Vec::new();
    for s in &files {
        if s.file
            .file_name()
            .is_some_and(|f| f == "main.rs" || f == "lib.rs")
        {
            continue;
        }
        for (n, statement) in statements(&s.lines) {
            for path in paths(&statement, &s.path) {
                for depth in 0..s.path.len() {
                    let ancestor = &s.path[..depth];
                    let Some((parent, names)) = defined.get(&ancestor.to_vec()) else {
                        continue;
                    };
                    if path.len() > depth
                        && path[..depth] == *ancestor
                        && names.contains(path[depth].as_str())
                    {
                        out.push(UpImport {
                            file: rel(s),
                            line: n,
                            item: path[depth].clone(),
                            parent: parent.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The exceptions docs/architecture.md lists (its ```parent-imports block: a file from the
/// workspace root, then the items it may take from above, `#` starts the reason).
fn exceptions() -> Vec<(String, Vec<String>)> {
    (doc_block("parent-imports").into_iter())
        .map(|mut words| (words.remove(0), words))
        .collect()
}

#[test]
fn no_file_imports_what_its_parent_mod_rs_defines_but_the_documented_exceptions() {
    let allowed = exceptions();
    assert!(
        allowed.len() <= 2,
        "docs/architecture.md lists {} files that import from their parent's mod.rs; at most \
         two should (issue 43): move what siblings share into a sibling file",
        allowed.len()
    );
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for krate in ["core", "gateway"] {
        for up in up_imports(&workspace().join("crates").join(krate).join("src")) {
            let listed = allowed
                .iter()
                .any(|(file, items)| *file == up.file && items.contains(&up.item));
            if listed {
                used.insert((up.file.clone(), up.item.clone()));
                continue;
            }
            found.push(format!(
                "{}:{}: imports {} from its parent {}",
                up.file, up.line, up.item, up.parent
            ));
        }
    }
    assert!(
        found.is_empty(),
        "imports running back up to a parent's mod.rs (what siblings share lives in a sibling \
         file; or list the import in docs/architecture.md's ```parent-imports block, with \
         why):\n{}",
        found.join("\n")
    );
    let stale: Vec<String> = (allowed.iter())
        .flat_map(|(file, items)| items.iter().map(move |i| (file.clone(), i.clone())))
        .filter(|key| !used.contains(key))
        .map(|(file, item)| format!("{file} {item}"))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/architecture.md's ```parent-imports block lists imports that no longer happen \
         (remove them): {stale:?}"
    );
}

#[test]
fn definitions_and_imports_over_several_lines_are_read() {
    assert_eq!(
        defined_on("pub(crate) struct Session<S> {"),
        Some("Session")
    );
    assert_eq!(
        defined_on("pub(super) const NAME: &str = \"redis\";"),
        Some("NAME")
    );
    assert_eq!(
        defined_on("static APPEND: LazyLock<Script> = x;"),
        Some("APPEND")
    );
    assert_eq!(defined_on("pub const fn new() -> Self {"), Some("new"));
    assert_eq!(
        defined_on("macro_rules! forward_async_write {"),
        Some("forward_async_write")
    );
    assert_eq!(
        defined_on("pub(crate) mod close_code {"),
        Some("close_code")
    );
    assert_eq!(defined_on("pub(crate) mod close_code;"), None);
    assert_eq!(defined_on("    fn method(&self) {"), None);
    assert_eq!(defined_on("pub(crate) use logs::Ingest;"), None);
    let lines: Vec<(usize, String)> = [
        "use super::{",
        "    Flow, FrameError,",
        "    Session,",
        "};",
        "let x = 1;",
    ]
    .iter()
    .enumerate()
    .map(|(i, l)| (i + 1, l.to_string()))
    .collect();
    let joined = statements(&lines);
    assert_eq!(joined.len(), 2);
    assert_eq!(joined[0].0, 1);
    let at: ModPath = vec!["transport".into(), "ws".into(), "commands".into()];
    let names: Vec<String> = paths(&joined[0].1, &at)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        names,
        [
            "transport::ws::Flow",
            "transport::ws::FrameError",
            "transport::ws::Session"
        ]
    );
    let names: Vec<String> = paths(
        "use crate::transport::ws::{session::{self, Flow}, PATH as _};",
        &at,
    )
    .into_iter()
    .map(|p| p.join("::"))
    .collect();
    assert_eq!(
        names,
        [
            "transport::ws::session",
            "transport::ws::session::Flow",
            "transport::ws::PATH"
        ]
    );
    assert_eq!(
        paths("let t = crate::bridge::Together::new();", &at),
        [["bridge", "Together", "new"].map(String::from).to_vec()]
    );
}
