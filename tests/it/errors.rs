//! Every error says its own part once (ARCHITECTURE.md, `src/error_chain.rs`): an `#[error]`
//! message never interpolates the field its variant returns from `source()` (one marked
//! `#[source]` or `#[from]`, or named `source`), because whoever shows the error shows the
//! chain, and the cause would be read twice. This test reads every `#[error(...)]` in `src/`
//! (test modules left out) with the variant or struct under it, and names each that does.

use std::path::Path;

use crate::support;

/// The index just past the bracket that closes the one at `open`, skipping string and char
/// literals (format strings hold `{{` and `(`).
fn close(text: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while i < text.len() {
        match text[i] {
            b'"' => {
                i += 1;
                while text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced brackets");
}

/// `text` split at commas outside brackets and literals.
fn split_top(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let (mut parts, mut start, mut depth, mut i) = (Vec::new(), 0, 0i32, 0);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' | b'[' | b'{' | b'<' => depth += 1,
            b')' | b']' | b'}' | b'>' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(text[start..i].to_owned());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(text[start..].to_owned());
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// A field's name (its index for a tuple field) and whether thiserror returns it from
/// `source()`.
fn sources(fields: &str, tuple: bool) -> Vec<String> {
    let mut out = Vec::new();
    for (index, field) in split_top(fields).iter().enumerate() {
        let code: String = field
            .lines()
            .map(|l| l.trim())
            .filter(|l| !l.starts_with("//"))
            .collect::<Vec<_>>()
            .join(" ");
        let marked = code.contains("#[source]") || code.contains("#[from]");
        let name = if tuple {
            index.to_string()
        } else {
            let decl = code.rsplit(']').next().unwrap_or(&code);
            let decl = decl.trim().trim_start_matches("pub ").trim();
            decl.split(':').next().unwrap().trim().to_owned()
        };
        if marked || (!tuple && name == "source") {
            out.push(name);
        }
    }
    out
}

/// Why the `#[error]` attribute `attr` (its inside) shows one of `sources`, if it does.
fn shows_source(attr: &str, sources: &[String]) -> Option<String> {
    let parts = split_top(attr);
    let format = parts[0].trim();
    let args = parts[1..].join(",");
    let placeholder = regex::Regex::new(r"\{([A-Za-z_0-9]+)(?::[^}]*)?\}").unwrap();
    // `{{` is a literal brace.
    let unescaped = format.replace("{{", "").replace("}}", "");
    for c in placeholder.captures_iter(&unescaped) {
        if sources.iter().any(|s| *s == c[1]) {
            return Some(format!("interpolates {{{}}}", &c[1]));
        }
    }
    for s in sources {
        let used = if s.chars().all(|c| c.is_ascii_digit()) {
            regex::Regex::new(&format!(r"\.{s}\b")).unwrap()
        } else {
            regex::Regex::new(&format!(r"\b{s}\b")).unwrap()
        };
        if used.is_match(&args) {
            return Some(format!("formats `{s}` in its arguments"));
        }
    }
    None
}

#[test]
fn no_error_message_shows_its_own_source() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    support::rust_files(&src, &mut files);
    files.sort();
    let mut seen = 0;
    let mut doubled = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        // An inline test module only: `mod tests;` at the top declares a file of its own.
        let text = match text.find("#[cfg(test)]\nmod tests {") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        let b = text.as_bytes();
        for (at, _) in text.match_indices("#[error(") {
            let attr_end = close(b, at + "#[error".len());
            let attr = &text[at + "#[error(".len()..attr_end - 1];
            seen += 1;
            if attr.trim() == "transparent" {
                continue;
            }
            // The variant or struct under the attribute: skip docs and other attributes.
            let mut i = attr_end + 1;
            loop {
                let rest = text[i..].trim_start();
                i = text.len() - rest.len();
                if rest.starts_with("//") {
                    i += rest.find('\n').unwrap();
                } else if rest.starts_with("#[") {
                    i = close(b, i + 1);
                } else {
                    break;
                }
            }
            let head_end = text[i..].find(['(', '{', ',', '}', ';']).unwrap() + i;
            let name = text[i..head_end].trim().to_owned();
            let fields = match b[head_end] {
                b'(' | b'{' => {
                    let end = close(b, head_end);
                    Some((&text[head_end + 1..end - 1], b[head_end] == b'('))
                }
                _ => None,
            };
            let Some((fields, tuple)) = fields else {
                continue;
            };
            if let Some(why) = shows_source(attr, &sources(fields, tuple)) {
                let line = text[..at].lines().count() + 1;
                doubled.push(format!(
                    "{}:{line}: {name}: its message {why}, which `source()` returns too; say only \
                     this error's own part",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        seen > 200,
        "only {seen} #[error] attributes found; the reader is broken"
    );
    assert!(doubled.is_empty(), "{}", doubled.join("\n"));
}

/// The type arguments of each `Result<…>` written in `text`: the text between its brackets
/// (a `->` inside, as in a `Fn` type, closes nothing).
fn result_arguments(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (at, _) in text.match_indices("Result<") {
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let open = at + "Result".len();
        let (mut depth, mut i) = (0usize, open);
        while i < b.len() {
            match b[i] {
                b'<' => depth += 1,
                b'>' if b[i - 1] != b'-' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        out.push((at, text[open + 1..i.min(b.len())].to_owned()));
    }
    out
}

/// An error is a typed reason, never a sentence built where it happened: no `Result<_, String>`
/// in `src/` (test code left out), so each failure has a variant in the user's words, its cause
/// reachable through `source()`, and its message rendered where it is shown (issue 29).
#[test]
fn no_result_carries_a_string_as_its_error() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    support::rust_files(&src, &mut files);
    files.sort();
    let (mut seen, mut stringly) = (0, Vec::new());
    for file in &files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let text = match text.find("#[cfg(test)]\nmod tests {") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        for (at, arguments) in result_arguments(text) {
            seen += 1;
            if matches!(
                error_type(&arguments).as_str(),
                "String" | "std::string::String"
            ) {
                let line = text[..at].lines().count();
                stringly.push(format!(
                    "{}:{line}: Result<{arguments}>: give the error a type of its own",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        seen > 500,
        "only {seen} Result types found; the reader is broken"
    );
    assert!(stringly.is_empty(), "{}", stringly.join("\n"));
}

/// The last type argument of a `Result`: its error type.
fn error_type(arguments: &str) -> String {
    let arguments = arguments.replace("->", "→");
    split_top(&arguments)
        .pop()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn the_result_reader_finds_the_error_type() {
    let found =
        result_arguments("fn f() -> Result<Option<BTreeMap<String, String>>, KubeError> {}");
    assert_eq!(found[0].1, "Option<BTreeMap<String, String>>, KubeError");
    assert_eq!(error_type(&found[0].1), "KubeError");
    let found = result_arguments("x: &dyn Fn(&str) -> Result<(), String>, y: MyResult<u8, u8>");
    assert_eq!(found.len(), 1);
    assert_eq!(error_type(&found[0].1), "String");
    let found = result_arguments("Result<&'a dyn Fn(&str) -> u8, E>");
    assert_eq!(error_type(&found[0].1), "E");
}

/// Nested errors read as they always have: each part once, joined with `: `, the cause last.
#[test]
fn the_chain_says_each_part_once_in_order() {
    use std::sync::Arc;
    use tagpilot::error_chain::chain;
    use tagpilot::git::{ConfigError, GitError};
    use tagpilot::registry::RegistryError;
    use tagpilot::registry::auth::CredentialError;

    let git = GitError::Config {
        repository: "manifests".into(),
        source: ConfigError::EnvNotSet {
            field: "auth.tokenEnv",
            name: "GIT_TOKEN".into(),
        },
    };
    assert_eq!(git.to_string(), "repository `manifests`");
    assert_eq!(
        chain(&git),
        "repository `manifests`: `auth.tokenEnv` names the environment variable GIT_TOKEN, \
         which is not set"
    );

    let registry = RegistryError::Credentials {
        registry: "ghcr.io".into(),
        repository: "acme/api".into(),
        source: CredentialError::PasswordFile {
            path: "/run/secrets/ghcr".into(),
            source: Arc::new(std::io::Error::other("permission denied")),
        },
    };
    assert_eq!(
        chain(&registry),
        "cannot get credentials for registry ghcr.io (repository acme/api): cannot read \
         /run/secrets/ghcr (credentials.passwordFile in tagpilot.yaml): permission denied"
    );

    let constraint = tagpilot::version::Constraint::parse(">= 1.2.3.4").unwrap_err();
    assert_eq!(
        chain(&constraint),
        "invalid version constraint \">= 1.2.3.4\": \"1.2.3.4\" is not a version: more than \
         three parts"
    );
}
