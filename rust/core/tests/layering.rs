//! The layering of `weir-core`, as a test over its sources.
//!
//! Every `crate::…` and `super::…` path in `src/**/*.rs` (imports and paths in
//! code alike; comments and doc links aside) is resolved to the node it names:
//! a folder (`backend/cpu`, `completion`, `scheduler`: every file in it,
//! `mod.rs` included) or a top-level file (`runtime.rs` is `runtime`). A name
//! the crate root re-exports (`crate::Error`) counts as the module it comes
//! from; `lib.rs` itself, which only declares and re-exports, is no node.
//! A module naming its own submodules by a relative path (`backend/mod.rs`'s
//! `cpu::CpuRawAccess`) is composition, not an import between layers, and is
//! not counted.
//!
//! The test fails, printing the graph, if
//! - an import cycle spans more than one folder (the top-level files are all
//!   in one folder, `src/`, so a cycle among them alone is allowed), or
//! - the engines (anything under `backend/` or `completion/`) import the
//!   layers above them: the scheduler, or the handles users hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers above the engines: the scheduler, and the handles and calls users hold.
const ABOVE_ENGINES: [&str; 14] = [
    "scheduler",
    "runtime",
    "builder",
    "stream",
    "buffer",
    "fence",
    "cancel",
    "ops",
    "graph",
    "group",
    "collective",
    "blas",
    "timestamp",
    "timeline",
];

/// The engines: how work runs (`backend/`) and how its completion reaches waiters (`completion/`).
fn is_engine(node: &str) -> bool {
    ["backend", "completion"].iter().any(|root| node == *root || node.starts_with(&format!("{root}/")))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// `path` relative to `src/`, with `/` separators.
fn relative(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("a path under src/");
    rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

/// The node a file belongs to: its folder, or its own stem at the top level.
fn node_of(file: &Path) -> Option<String> {
    let rel = relative(file);
    match rel.rsplit_once('/') {
        Some((folder, _)) => Some(folder.to_owned()),
        None if rel == "lib.rs" => None,
        None => Some(rel.trim_end_matches(".rs").to_owned()),
    }
}

/// The folder a node is in: itself for a folder, `src/` (the empty string) for a top-level file.
fn folder_of(node: &str) -> &str {
    if src().join(node).is_dir() {
        node
    } else {
        ""
    }
}

/// The module path of a file: `backend/cpu/worker.rs` is `backend::cpu::worker`.
fn module_of(file: &Path) -> Vec<String> {
    let rel = relative(file);
    let mut segments: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
    if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
        segments.pop();
    }
    segments
}

/// The code of a Rust file without its comments (doc links are not imports)
/// and without the contents of string and char literals.
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied()) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n'); a lifetime ('a) has no closing quote.
            ('\'', Some(_)) if chars.get(i + 2) == Some(&'\'') || chars.get(i + 1) == Some(&'\\') => {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        i += 1;
        match c {
            ':' if chars.get(i) == Some(&':') => {
                i += 1;
                out.push(Token::Path);
            }
            '{' => out.push(Token::Open),
            '}' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            c if c.is_whitespace() => {}
            _ => out.push(Token::Other),
        }
    }
    out
}

/// Parses a path tree after `prefix::` at `tokens[*at]`: `a::b`, `a::{b, c::d}`,
/// `a as b`, `*`. Pushes each full path.
fn tree(tokens: &[Token], at: &mut usize, prefix: &[String], paths: &mut Vec<Vec<String>>) {
    match tokens.get(*at) {
        Some(Token::Open) => {
            *at += 1;
            loop {
                match tokens.get(*at) {
                    Some(Token::Close) | None => {
                        *at += 1;
                        return;
                    }
                    Some(Token::Comma) => *at += 1,
                    _ => {
                        let before = *at;
                        tree(tokens, at, prefix, paths);
                        if *at == before {
                            *at += 1;
                        }
                    }
                }
            }
        }
        Some(Token::Ident(name)) => {
            let mut path = prefix.to_vec();
            path.push(name.clone());
            *at += 1;
            if tokens.get(*at) == Some(&Token::Path) {
                *at += 1;
                tree(tokens, at, &path, paths);
            } else {
                if matches!(tokens.get(*at), Some(Token::Ident(word)) if word == "as") {
                    *at += 2;
                }
                paths.push(path);
            }
        }
        // `*`, or a path that ends in `::<` (turbofish): what was named so far.
        _ => paths.push(prefix.to_vec()),
    }
}

/// Every absolute module path a file names through `crate::` or `super::`.
fn crate_paths(file: &Path, code: &str) -> Vec<Vec<String>> {
    let tokens = tokens(&strip(code));
    let module = module_of(file);
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts_path = i == 0 || tokens[i - 1] != Token::Path;
        let (base, mut at) = match &tokens[i] {
            Token::Ident(word) if starts_path && word == "crate" && tokens.get(i + 1) == Some(&Token::Path) => {
                (Vec::new(), i + 2)
            }
            Token::Ident(word) if starts_path && word == "super" && tokens.get(i + 1) == Some(&Token::Path) => {
                let mut base = module.clone();
                let mut at = i;
                while matches!(tokens.get(at), Some(Token::Ident(word)) if word == "super")
                    && tokens.get(at + 1) == Some(&Token::Path)
                {
                    base.pop();
                    at += 2;
                }
                (base, at)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        tree(&tokens, &mut at, &base, &mut paths);
        i = at.max(i + 1);
    }
    paths
}

/// The node an absolute path names, if any: the deepest folder or top-level
/// file it walks through, or for a root re-export, the node it re-exports.
fn resolve(path: &[String], reexports: &BTreeMap<String, Vec<String>>, depth: usize) -> Option<String> {
    let root = src();
    let mut dir = root.clone();
    let mut node = None;
    for segment in path {
        if dir.join(segment).is_dir() {
            dir = dir.join(segment);
            node = Some(relative(&dir));
        } else if dir.join(format!("{segment}.rs")).is_file() {
            if dir == root {
                node = Some(segment.clone());
            }
            break;
        } else {
            break;
        }
    }
    match (node, path.first()) {
        (Some(node), _) => Some(node),
        (None, Some(name)) if depth < 4 => resolve(reexports.get(name)?, reexports, depth + 1),
        _ => None,
    }
}

struct Graph {
    /// node -> node -> the files and paths behind the edge.
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Graph {
    fn build() -> Graph {
        let mut files = Vec::new();
        rust_files(&src(), &mut files);
        assert!(files.len() > 10, "found only {} files under {}", files.len(), src().display());
        let read = |file: &Path| std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));

        // What the crate root re-exports: `pub use error::{Error, Result}` maps Error -> error::Error.
        let lib = src().join("lib.rs");
        let mut reexports = BTreeMap::new();
        let tokens = tokens(&strip(&read(&lib)));
        for i in 0..tokens.len() {
            if tokens[i] == Token::Ident("use".into())
                && tokens.get(i.wrapping_sub(1)) == Some(&Token::Ident("pub".into()))
            {
                let mut paths = Vec::new();
                tree(&tokens, &mut (i + 1), &[], &mut paths);
                for path in paths {
                    if let Some(name) = path.last() {
                        reexports.insert(name.clone(), path);
                    }
                }
            }
        }

        let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for file in &files {
            let Some(from) = node_of(file) else { continue };
            let targets = edges.entry(from.clone()).or_default();
            for path in crate_paths(file, &read(file)) {
                match resolve(&path, &reexports, 0) {
                    Some(to) if to != from => {
                        targets.entry(to).or_default().insert(format!(
                            "{}: crate::{}",
                            relative(file),
                            path.join("::")
                        ));
                    }
                    _ => {}
                }
            }
        }
        Graph { edges }
    }

    fn nodes(&self) -> BTreeSet<String> {
        let mut nodes: BTreeSet<String> = self.edges.keys().cloned().collect();
        nodes.extend(self.edges.values().flat_map(|targets| targets.keys().cloned()));
        nodes
    }

    fn successors(&self, node: &str) -> impl Iterator<Item = &String> {
        self.edges.get(node).into_iter().flat_map(|targets| targets.keys())
    }

    /// Strongly connected components of more than one node (Tarjan's algorithm).
    fn cycles(&self) -> Vec<Vec<String>> {
        struct Tarjan<'a> {
            graph: &'a Graph,
            index: BTreeMap<String, usize>,
            low: BTreeMap<String, usize>,
            stack: Vec<String>,
            on_stack: BTreeSet<String>,
            components: Vec<Vec<String>>,
        }
        impl Tarjan<'_> {
            fn visit(&mut self, node: &str) {
                let n = self.index.len();
                self.index.insert(node.to_owned(), n);
                self.low.insert(node.to_owned(), n);
                self.stack.push(node.to_owned());
                self.on_stack.insert(node.to_owned());
                let successors: Vec<String> = self.graph.successors(node).cloned().collect();
                for next in successors {
                    if !self.index.contains_key(&next) {
                        self.visit(&next);
                        let low = self.low[node].min(self.low[&next]);
                        self.low.insert(node.to_owned(), low);
                    } else if self.on_stack.contains(&next) {
                        let low = self.low[node].min(self.index[&next]);
                        self.low.insert(node.to_owned(), low);
                    }
                }
                if self.low[node] == self.index[node] {
                    let mut component = Vec::new();
                    while let Some(top) = self.stack.pop() {
                        self.on_stack.remove(&top);
                        let done = top == node;
                        component.push(top);
                        if done {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        self.components.push(component);
                    }
                }
            }
        }
        let mut tarjan = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            components: Vec::new(),
        };
        for node in self.nodes() {
            if !tarjan.index.contains_key(&node) {
                tarjan.visit(&node);
            }
        }
        tarjan.components
    }
}

impl std::fmt::Display for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "import graph of weir-core (node -> nodes it imports, with one example path):")?;
        for (from, targets) in &self.edges {
            writeln!(f, "  {from}")?;
            for (to, uses) in targets {
                let example = uses.iter().next().map(String::as_str).unwrap_or_default();
                writeln!(f, "    -> {to:<14} ({} uses; e.g. {example})", uses.len())?;
            }
        }
        Ok(())
    }
}

#[test]
fn no_cycle_spans_more_than_one_folder() {
    let graph = Graph::build();
    let crossing: Vec<Vec<String>> = graph
        .cycles()
        .into_iter()
        .filter(|cycle| cycle.iter().map(|node| folder_of(node)).collect::<BTreeSet<_>>().len() > 1)
        .collect();
    assert!(crossing.is_empty(), "import cycles across folders: {crossing:?}\n{graph}");
}

#[test]
fn engines_import_nothing_above_them() {
    let graph = Graph::build();
    let mut violations = Vec::new();
    for (from, targets) in &graph.edges {
        if !is_engine(from) {
            continue;
        }
        for (to, uses) in targets {
            if ABOVE_ENGINES.contains(&to.as_str()) {
                violations.extend(uses.iter().cloned());
            }
        }
    }
    assert!(violations.is_empty(), "engine code imports the layers above it:\n  {}\n{graph}", violations.join("\n  "));
}

#[test]
fn the_graph_sees_the_known_imports() {
    // Guards the parser: if these went missing, the checks above would pass vacuously.
    let graph = Graph::build();
    let has = |from: &str, to: &str| graph.edges.get(from).is_some_and(|targets| targets.contains_key(to));
    for (from, to) in
        [("backend/cpu", "backend"), ("scheduler", "backend"), ("runtime", "scheduler"), ("backend", "error")]
    {
        assert!(has(from, to), "no edge {from} -> {to}\n{graph}");
    }
}
