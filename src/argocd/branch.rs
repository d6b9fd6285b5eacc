//! `git-branch` target templates, as Argo CD Image Updater renders them: Go-template syntax
//! over the list of changes, so that a different set of updates is pushed to a different
//! branch and the same set always to the same one.
//!
//! Image Updater documents `{{.SHA256}}` (the SHA-256 of the change list) and
//! `{{range .Images}}…{{end}}` with `.Name`, `.Alias`, `.OldTag` and `.NewTag`; tagpilot also
//! renders `{{.AppName}}` and `{{.AppNamespace}}` (fields of the same template data in later
//! Image Updater versions). Only these forms are understood: anything else is refused with the
//! reason, never rendered as something approximate, because a wrong branch name would push
//! where the user did not ask.
//!
//! Pure: no I/O. A small dedicated renderer rather than a translation to minijinja, because
//! the accepted language is a handful of fixed forms and its errors must name them.

use sha2::Digest as _;

/// Git refuses longer names on most hosts; Image Updater truncates to the same length.
const MAX_BRANCH_LEN: usize = 255;

/// One image change, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchChange {
    /// The image name as written in `image-list`, without tag.
    pub name: String,
    pub alias: String,
    pub old_tag: String,
    pub new_tag: String,
}

/// A parsed `git-branch` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    AppName,
    AppNamespace,
    Sha256,
    /// `{{range .Images}}…{{end}}`.
    Images(Vec<ImagePart>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ImagePart {
    Text(String),
    Name,
    Alias,
    OldTag,
    NewTag,
}

/// A `{{…}}` action, with its trim markers.
struct Action<'t> {
    body: &'t str,
    trim_before: bool,
    trim_after: bool,
}

enum Token<'t> {
    Text(&'t str),
    Action(Action<'t>),
}

/// The part of a `git-branch` template tagpilot does not understand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("a {{{{range}}}} inside {{{{range .Images}}}}")]
    NestedRange,
    #[error("{{{{end}}}} without {{{{range .Images}}}}")]
    EndWithoutRange,
    #[error("{{{{range .Images}}}} without {{{{end}}}}")]
    RangeWithoutEnd,
    #[error("unknown field {0} in {{{{range .Images}}}}; known: .Name, .Alias, .OldTag, .NewTag")]
    UnknownImageField(String),
    #[error("unknown field {0}; known: .SHA256, .AppName, .AppNamespace, {{{{range .Images}}}}")]
    UnknownField(String),
    /// The action's body, trimmed.
    #[error("unsupported action {{{{{0}}}}}")]
    Unsupported(String),
    #[error("unclosed {{{{ in {0:?}")]
    Unclosed(String),
    #[error("}}}} without {{{{ in {0:?}")]
    Unopened(String),
}

impl BranchTemplate {
    /// Parses `template`; the error says which part is not understood.
    pub fn parse(template: &str) -> Result<BranchTemplate, TemplateError> {
        let tokens = tokenize(template)?;
        let mut parts = Vec::new();
        let mut range: Option<Vec<ImagePart>> = None;
        for token in trimmed(tokens) {
            match token {
                Token::Text(t) => match &mut range {
                    Some(r) => r.push(ImagePart::Text(t.to_string())),
                    None => parts.push(Part::Text(t.to_string())),
                },
                Token::Action(a) => {
                    let words: Vec<&str> = a.body.split_whitespace().collect();
                    match (&mut range, words.as_slice()) {
                        (None, ["range", ".Images"]) => range = Some(Vec::new()),
                        (Some(_), ["range", ..]) => {
                            return Err(TemplateError::NestedRange);
                        }
                        (Some(_), ["end"]) => {
                            parts.push(Part::Images(range.take().expect("inside a range")));
                        }
                        (None, ["end"]) => return Err(TemplateError::EndWithoutRange),
                        (None, [".AppName"]) => parts.push(Part::AppName),
                        (None, [".AppNamespace"]) => parts.push(Part::AppNamespace),
                        (None, [".SHA256"]) => parts.push(Part::Sha256),
                        (Some(r), [field]) => r.push(match *field {
                            ".Name" => ImagePart::Name,
                            ".Alias" => ImagePart::Alias,
                            ".OldTag" => ImagePart::OldTag,
                            ".NewTag" => ImagePart::NewTag,
                            other => {
                                return Err(TemplateError::UnknownImageField(other.to_string()));
                            }
                        }),
                        (None, [other]) if other.starts_with('.') => {
                            return Err(TemplateError::UnknownField(other.to_string()));
                        }
                        _ => return Err(TemplateError::Unsupported(a.body.trim().to_string())),
                    }
                }
            }
        }
        if range.is_some() {
            return Err(TemplateError::RangeWithoutEnd);
        }
        Ok(BranchTemplate { parts })
    }

    /// Whether the name depends on the changes (and so is known only after planning).
    pub fn depends_on_changes(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Sha256 | Part::Images(_)))
    }

    /// The branch name for an app (`None` when several apps share the branch: their names
    /// are already part of the template) and the changes it carries, in plan order.
    pub fn render(&self, app: Option<(&str, &str)>, changes: &[BranchChange]) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::AppName => out.push_str(app.map_or("", |a| a.0)),
                Part::AppNamespace => out.push_str(app.map_or("", |a| a.1)),
                Part::Sha256 => out.push_str(&sha256(changes)),
                Part::Images(inner) => {
                    for c in changes {
                        for p in inner {
                            out.push_str(match p {
                                ImagePart::Text(t) => t,
                                ImagePart::Name => &c.name,
                                ImagePart::Alias => &c.alias,
                                ImagePart::OldTag => &c.old_tag,
                                ImagePart::NewTag => &c.new_tag,
                            });
                        }
                    }
                }
            }
        }
        if out.len() > MAX_BRANCH_LEN {
            let mut end = MAX_BRANCH_LEN;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
        }
        out
    }

    /// The template with only the app's fields filled in: what identifies its branch before
    /// the changes are known.
    pub fn render_app(&self, name: &str, namespace: &str) -> BranchTemplate {
        let mut parts: Vec<Part> = Vec::new();
        for p in &self.parts {
            let text = match p {
                Part::AppName => name.to_string(),
                Part::AppNamespace => namespace.to_string(),
                Part::Text(t) => t.clone(),
                other => {
                    parts.push(other.clone());
                    continue;
                }
            };
            match parts.last_mut() {
                Some(Part::Text(t)) => t.push_str(&text),
                _ => parts.push(Part::Text(text)),
            }
        }
        BranchTemplate { parts }
    }

    /// The template in Go-template syntax (normalised), for names and reports.
    pub fn source(&self) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::AppName => out.push_str("{{.AppName}}"),
                Part::AppNamespace => out.push_str("{{.AppNamespace}}"),
                Part::Sha256 => out.push_str("{{.SHA256}}"),
                Part::Images(inner) => {
                    out.push_str("{{range .Images}}");
                    for i in inner {
                        out.push_str(match i {
                            ImagePart::Text(t) => t,
                            ImagePart::Name => "{{.Name}}",
                            ImagePart::Alias => "{{.Alias}}",
                            ImagePart::OldTag => "{{.OldTag}}",
                            ImagePart::NewTag => "{{.NewTag}}",
                        });
                    }
                    out.push_str("{{end}}");
                }
            }
        }
        out
    }
}

/// Image Updater's hash of a change list: SHA-256 over `<name>-<old>-<new>,` per change, in
/// hex.
pub fn sha256(changes: &[BranchChange]) -> String {
    let mut hasher = sha2::Sha256::new();
    for c in changes {
        hasher.update(format!("{}-{}-{},", c.name, c.old_tag, c.new_tag).as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn tokenize(template: &str) -> Result<Vec<Token<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            out.push(Token::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| TemplateError::Unclosed(template.to_string()))?;
        let mut body = &after[..end];
        // `{{- x -}}` trims the whitespace around the action, as in Go.
        let trim_before = body.starts_with("- ") || body == "-";
        if trim_before {
            body = &body[1..];
        }
        let trim_after = body.ends_with(" -");
        if trim_after {
            body = &body[..body.len() - 1];
        }
        out.push(Token::Action(Action {
            body,
            trim_before,
            trim_after,
        }));
        rest = &after[end + 2..];
    }
    if rest.contains("}}") {
        return Err(TemplateError::Unopened(template.to_string()));
    }
    if !rest.is_empty() {
        out.push(Token::Text(rest));
    }
    Ok(out)
}

/// Applies the trim markers to the neighbouring text and drops text left empty.
fn trimmed(tokens: Vec<Token<'_>>) -> Vec<Token<'_>> {
    let n = tokens.len();
    let trims: Vec<(bool, bool)> = tokens
        .iter()
        .map(|t| match t {
            Token::Action(a) => (a.trim_before, a.trim_after),
            Token::Text(_) => (false, false),
        })
        .collect();
    tokens
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| match t {
            Token::Text(mut s) => {
                if i > 0 && trims[i - 1].1 {
                    s = s.trim_start();
                }
                if i + 1 < n && trims[i + 1].0 {
                    s = s.trim_end();
                }
                (!s.is_empty()).then_some(Token::Text(s))
            }
            action => Some(action),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(name: &str, alias: &str, old: &str, new: &str) -> BranchChange {
        BranchChange {
            name: name.into(),
            alias: alias.into(),
            old_tag: old.into(),
            new_tag: new.into(),
        }
    }

    #[test]
    fn sha256_hashes_the_change_list_as_image_updater_does() {
        let t = BranchTemplate::parse("image-updater-{{.SHA256}}").unwrap();
        assert!(t.depends_on_changes());
        let one = [change("r.example/api", "api", "1.0.0", "1.1.0")];
        let expected: String = sha2::Sha256::digest(b"r.example/api-1.0.0-1.1.0,")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(t.render(None, &one), format!("image-updater-{expected}"));
        // Another set of updates, another branch; the same set, the same branch.
        let two = [change("r.example/api", "api", "1.0.0", "1.2.0")];
        assert_ne!(t.render(None, &one), t.render(None, &two));
        assert_eq!(t.render(None, &one), t.render(None, &one.clone()));
    }

    #[test]
    fn range_over_images_renders_each_change() {
        let t = BranchTemplate::parse(
            "up{{range .Images}}-{{ .Alias }}-{{.Name}}-{{.OldTag}}-{{.NewTag}}{{end}}",
        )
        .unwrap();
        let changes = [
            change("r.example/api", "api", "1.0", "1.1"),
            change("r.example/web", "web", "2.0", "2.1"),
        ];
        assert_eq!(
            t.render(None, &changes),
            "up-api-r.example/api-1.0-1.1-web-r.example/web-2.0-2.1"
        );
        assert_eq!(
            t.source(),
            "up{{range .Images}}-{{.Alias}}-{{.Name}}-{{.OldTag}}-{{.NewTag}}{{end}}"
        );
    }

    #[test]
    fn app_fields_render_before_the_changes_are_known() {
        let t = BranchTemplate::parse("{{.AppNamespace}}/{{ .AppName -}} / {{- .SHA256}}").unwrap();
        let app = t.render_app("web", "argocd");
        assert_eq!(app.source(), "argocd/web/{{.SHA256}}");
        let fixed = BranchTemplate::parse("updates-{{.AppName}}").unwrap();
        assert!(!fixed.depends_on_changes());
        assert_eq!(fixed.render(Some(("web", "argocd")), &[]), "updates-web");
    }

    #[test]
    fn unknown_fields_and_actions_are_refused_with_the_reason() {
        let err = |t: &str| BranchTemplate::parse(t).unwrap_err().to_string();
        assert!(err("x-{{.Commit}}").contains("unknown field .Commit"));
        assert!(err("{{range .Images}}{{.Digest}}{{end}}").contains(".Digest"));
        assert!(err("{{range .Images}}x").contains("without {{end}}"));
        assert!(err("x{{end}}").contains("without {{range"));
        assert!(err("{{ printf \"%s\" .SHA256 }}").contains("unsupported action"));
        assert!(err("a-{{.SHA256").contains("unclosed"));
    }

    #[test]
    fn long_names_are_truncated_like_image_updater() {
        let t = BranchTemplate::parse("{{range .Images}}{{.Name}}{{end}}").unwrap();
        let changes: Vec<BranchChange> = (0..40)
            .map(|i| change(&format!("r.example/image-{i}"), "a", "1", "2"))
            .collect();
        assert_eq!(t.render(None, &changes).len(), MAX_BRANCH_LEN);
    }
}
