//! `git-branch` target templates, as Argo CD Image Updater renders them: Go-template syntax
//! over the list of changes, so that a different set of updates is pushed to a different
//! branch and the same set always to the same one.
//!
//! Image Updater documents `{{.SHA256}}` (the SHA-256 of the change list) and
//! `{{range .Images}}…{{end}}` with `.Name`, `.Alias`, `.OldTag` and `.NewTag`; its template
//! data also has `.AppName`, `.AppNamespace` and `.TargetKey`. Every variable renders exactly as
//! Image Updater renders it for a `git-branch` template (`TemplateBranchName` in its
//! `pkg/argocd/git.go`), so that a branch Image Updater made is found and updated, never
//! duplicated:
//! - `.Name` is the image's name without its registry host (`shop/api` for
//!   `registry.example:5000/shop/api`; Docker Hub's implicit `library/` dropped), and the
//!   SHA-256 hashes that name;
//! - `.OldTag` and `.NewTag` are the digest when there is one, else the tag;
//! - `.AppName`, `.AppNamespace` and `.TargetKey` are empty: Image Updater passes them only to
//!   its pull-request branch template, never to `git-branch`.
//!
//! Only these forms are understood: anything else is refused with the reason, never rendered as
//! something approximate, because a wrong branch name would push where the user did not ask.
//! A rendered name git would refuse (a `:` from a digest, say) is a [`BranchNameError`] before
//! anything is pushed.
//!
//! Pure: no I/O. A small dedicated renderer rather than a translation to minijinja, because
//! the accepted language is a handful of fixed forms and its errors must name them.

use sha2::Digest as _;

/// Git refuses longer names on most hosts; Image Updater truncates to the same length.
const MAX_BRANCH_LEN: usize = 255;

/// One image change, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchChange {
    /// The image name as Image Updater names it: no registry host, no tag
    /// ([`image_updater_name`]).
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
    TargetKey,
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
    #[error(
        "unknown field {0}; known: .SHA256, .AppName, .AppNamespace, .TargetKey, {{{{range .Images}}}}"
    )]
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
                        (None, [".TargetKey"]) => parts.push(Part::TargetKey),
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
                Part::TargetKey => {}
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

    /// The template with the app's fields filled in as Image Updater fills them for a
    /// `git-branch` template: empty (its `TemplateBranchName(ctx, wbc.GitWriteBranch, "", "",
    /// "", changeList)`). What is left identifies the branch before the changes are known.
    pub fn render_app(&self) -> BranchTemplate {
        let mut parts: Vec<Part> = Vec::new();
        for p in &self.parts {
            let text = match p {
                Part::AppName | Part::AppNamespace | Part::TargetKey => String::new(),
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
                Part::TargetKey => out.push_str("{{.TargetKey}}"),
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

/// An image's name as Image Updater's templates see it (`ContainerImage.ImageName`, from
/// `NewFromIdentifier` in its registry-scanner): the path without the registry host, which is
/// the first component when it has a `.` or a `:` or is `localhost`; Docker Hub's implicit
/// `library/` is dropped unless the name was written with it. A tag or digest is cut off.
pub fn image_updater_name(image: &str) -> String {
    let image = image.split_once('@').map_or(image, |(n, _)| n);
    // A tag follows the last `:` after the last `/`.
    let image = match image.rsplit_once(':') {
        Some((n, tag)) if !tag.contains('/') => n,
        _ => image,
    };
    let (domain, path) = match image.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first), rest)
        }
        _ => (None, image),
    };
    match domain {
        None | Some("docker.io" | "index.docker.io") if !image.starts_with("library/") => {
            path.strip_prefix("library/").unwrap_or(path).to_string()
        }
        _ => path.to_string(),
    }
}

/// A tag as Image Updater's templates see it (`ImageTag.String()`): the digest when there is
/// one, else the tag. `version` is tagpilot's `tag[@digest]` text.
pub fn image_updater_tag(version: &str) -> String {
    match version.split_once('@') {
        Some((_, digest)) => digest.to_string(),
        None => version.to_string(),
    }
}

/// A rendered branch name git refuses (`git check-ref-format --branch`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("git-branch: the branch name {name:?} is not valid in git: {reason}")]
pub struct BranchNameError {
    pub name: String,
    pub reason: &'static str,
}

/// Checks `name` as git checks a branch name (`git check-ref-format` on `refs/heads/<name>`),
/// so a name it would refuse is reported before anything is pushed.
pub fn check_branch_name(name: &str) -> Result<(), BranchNameError> {
    let fail = |reason| {
        Err(BranchNameError {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.starts_with('-') {
        return fail("it starts with `-`");
    }
    if name == "@" {
        return fail("it is `@`");
    }
    if name.contains("..") {
        return fail("it contains `..`");
    }
    if name.contains("@{") {
        return fail("it contains `@{`");
    }
    if let Some(c) = name.chars().find(|c| {
        c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
    }) {
        return fail(match c {
            ':' => "it contains `:`",
            ' ' => "it contains a space",
            '~' | '^' | '?' | '*' | '[' | '\\' => "it contains one of `~ ^ ? * [ \\`",
            _ => "it contains a control character",
        });
    }
    if name.ends_with('.') {
        return fail("it ends with `.`");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return fail("it has an empty component (`//`, or a leading or trailing `/`)");
        }
        if component.starts_with('.') {
            return fail("a component starts with `.`");
        }
        if component.ends_with(".lock") {
            return fail("a component ends with `.lock`");
        }
    }
    Ok(())
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

    /// Image Updater renders `git-branch` templates with empty app fields
    /// (`TemplateBranchName(ctx, wbc.GitWriteBranch, "", "", "", changeList)` in its
    /// `pkg/argocd/git.go`; its test "AppNamespace and AppName empty when not provided" expects
    /// `image-updater--`).
    #[test]
    fn app_fields_render_empty_as_image_updater_renders_git_branch() {
        let t = BranchTemplate::parse("{{.AppNamespace}}/{{ .AppName -}} / {{- .SHA256}}").unwrap();
        assert_eq!(t.render_app().source(), "//{{.SHA256}}");
        let fixed = BranchTemplate::parse("image-updater-{{.AppNamespace}}-{{.AppName}}").unwrap();
        assert!(!fixed.depends_on_changes());
        assert_eq!(fixed.render_app().render(None, &[]), "image-updater--");
        let key = BranchTemplate::parse("image-updater-{{.TargetKey}}-{{.SHA256}}").unwrap();
        assert_eq!(key.render_app().source(), "image-updater--{{.SHA256}}");
    }

    /// Image Updater's `ImageName` (registry-scanner `NewFromIdentifier`): its test
    /// "Template branch name with image name" renders `foo/bar` for `foo/bar`, and the host of
    /// a registry is never part of it.
    #[test]
    fn image_names_drop_the_registry_host_as_image_updater_does() {
        let n = image_updater_name;
        assert_eq!(n("foo/bar"), "foo/bar");
        assert_eq!(n("registry.example:5000/shop/api"), "shop/api");
        assert_eq!(n("127.0.0.1:5000/shop/api:1.0"), "shop/api");
        assert_eq!(n("0001.dkr.ecr.us-east-1.amazonaws.com/bar"), "bar");
        assert_eq!(n("localhost/app@sha256:abc"), "app");
        assert_eq!(n("nginx"), "nginx");
        assert_eq!(n("docker.io/library/nginx"), "nginx");
        assert_eq!(n("library/nginx"), "library/nginx");
        assert_eq!(n("ghcr.io/library/x"), "library/x");
        assert_eq!(image_updater_tag("1.2.0"), "1.2.0");
        assert_eq!(image_updater_tag("1.2.0@sha256:abc"), "sha256:abc");
    }

    #[test]
    fn branch_names_git_refuses_are_named_with_the_reason() {
        for ok in ["image-updater-shop/api-1.2.0", "main", "a/b.c", "feature@x"] {
            assert_eq!(check_branch_name(ok), Ok(()), "{ok}");
            assert!(git2::Reference::is_valid_name(&format!("refs/heads/{ok}")));
        }
        for (bad, why) in [
            ("up-registry.example:5000/shop/api", "`:`"),
            ("up-sha256:abc", "`:`"),
            ("a..b", "`..`"),
            ("a/.b", "starts with `.`"),
            ("a.lock", "`.lock`"),
            ("a//b", "empty component"),
            ("a/", "empty component"),
            ("a b", "space"),
            ("-a", "starts with `-`"),
            ("a@{1}", "`@{`"),
            ("", "empty"),
        ] {
            let e = check_branch_name(bad).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
            // `git check-ref-format --branch` refuses a leading `-`; as a full ref name it
            // would pass.
            assert!(
                !git2::Reference::is_valid_name(&format!("refs/heads/{bad}"))
                    || bad.is_empty()
                    || bad.starts_with('-'),
                "git accepts {bad}"
            );
        }
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
