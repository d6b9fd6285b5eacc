//! A Helm source's `valueFiles` resolved as Argo CD's repo server resolves them
//! (`getResolvedValueFiles` and `ResolveValueFilePathOrUrl`): a `$ref/…` file from the root of
//! the repository of the source named so, an `http(s)://` URL as it is (helm fetches it), and
//! any other path from the source's directory (a leading `/`: from the repository's root),
//! where a chart from a chart repository is its own repository. A path that leaves its
//! repository, through `..` or a symbolic link, is refused, as Argo CD refuses it: rendering
//! must not read files of the machine tagpilot runs on.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::RenderError;

/// One value file, ready for `helm template --values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resolved {
    /// A file on disk, inside its repository.
    File(PathBuf),
    /// A URL of an allowed scheme, which helm fetches itself.
    Url(String),
}

/// Where a source's value files are read from.
pub(super) struct Roots<'a> {
    /// The source's directory (the chart), against which relative paths resolve.
    pub app_dir: &'a Path,
    /// The root of its repository (the unpacked chart, for a chart from a chart repository).
    pub repo_root: &'a Path,
    /// `$name` → the root of the changed repository, for the sources in it that say `ref: name`.
    pub refs: &'a BTreeMap<String, PathBuf>,
    /// `$name` → the repoURL, for `ref` sources in other repositories (not at hand here).
    pub elsewhere: &'a BTreeMap<String, String>,
}

/// The URL schemes Argo CD allows for value files by default (`--helm-values-file-schemes`).
const ALLOWED_SCHEMES: [&str; 2] = ["http", "https"];

/// Resolves `raw`; `None` for a missing file under `ignoreMissingValueFiles`.
pub(super) fn resolve(
    raw: &str,
    roots: &Roots<'_>,
    ignore_missing: bool,
) -> Result<Option<Resolved>, RenderError> {
    let outside = || RenderError::ValueFileOutside {
        file: raw.to_owned(),
    };
    let (base, root, rest) = match ref_name(raw) {
        Some((name, rest)) if roots.refs.contains_key(name) => {
            let root = &roots.refs[name];
            // Both `$values/a.yaml` and `$values//a.yaml` mean the repository's root.
            (root.as_path(), root.as_path(), rest.trim_start_matches('/'))
        }
        Some((name, _)) if roots.elsewhere.contains_key(name) => {
            return Err(RenderError::ValueFileElsewhere {
                file: raw.to_owned(),
                url: roots.elsewhere[name].clone(),
            });
        }
        // Argo CD reads a `$name` that no source is called as a plain path.
        _ => {
            if let Some((scheme, _)) = raw.split_once("://") {
                return if ALLOWED_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
                    Ok(Some(Resolved::Url(raw.to_owned())))
                } else {
                    Err(RenderError::ValueFileScheme {
                        file: raw.to_owned(),
                        scheme: scheme.to_owned(),
                    })
                };
            }
            match raw.strip_prefix('/') {
                Some(from_root) => (roots.repo_root, roots.repo_root, from_root),
                None => (roots.app_dir, roots.repo_root, raw),
            }
        }
    };
    let joined = lexical(&base.join(rest));
    let root = lexical(root);
    if !joined.starts_with(&root) || joined == root {
        return Err(outside());
    }
    match joined.canonicalize() {
        // A symbolic link may point anywhere: where it ends must be inside too.
        Ok(real) => {
            let real_root = root.canonicalize().unwrap_or(root);
            if !real.starts_with(&real_root) {
                return Err(outside());
            }
            Ok(Some(Resolved::File(real)))
        }
        Err(_) if ignore_missing => Ok(None),
        // helm names the missing file in its own failure, as Argo CD shows it.
        Err(_) => Ok(Some(Resolved::File(joined))),
    }
}

/// `$name/rest` → (`name`, `rest`).
fn ref_name(raw: &str) -> Option<(&str, &str)> {
    let rest = raw.strip_prefix('$')?;
    Some(rest.split_once('/').unwrap_or((rest, "")))
}

/// `path` with `.` and `..` worked out without touching the disk (a `..` at the top stays
/// at the top, so it cannot climb out of an absolute path's root).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new(files: &[&str]) -> Tree {
            let dir = tempfile::tempdir().unwrap();
            for f in files {
                let path = dir.path().join(f);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, "a: 1\n").unwrap();
            }
            Tree { dir }
        }

        fn root(&self) -> PathBuf {
            self.dir.path().canonicalize().unwrap()
        }

        fn resolve(&self, app: &str, raw: &str) -> Result<Option<Resolved>, RenderError> {
            let root = self.root();
            let refs = BTreeMap::from([("values".to_owned(), root.clone())]);
            let elsewhere = BTreeMap::from([(
                "other".to_owned(),
                "https://git.example/acme/other".to_owned(),
            )]);
            let roots = Roots {
                app_dir: &root.join(app),
                repo_root: &root,
                refs: &refs,
                elsewhere: &elsewhere,
            };
            resolve(raw, &roots, false)
        }
    }

    #[test]
    fn paths_resolve_from_the_source_a_leading_slash_and_a_ref_from_the_repository_root() {
        let t = Tree::new(&["charts/api/values-prod.yaml", "envs/prod.yaml"]);
        let file = |p: &str| Some(Resolved::File(t.root().join(p)));
        let resolved = |raw: &str| t.resolve("charts/api", raw).unwrap();
        assert_eq!(
            resolved("values-prod.yaml"),
            file("charts/api/values-prod.yaml")
        );
        assert_eq!(resolved("../../envs/prod.yaml"), file("envs/prod.yaml"));
        assert_eq!(resolved("/envs/prod.yaml"), file("envs/prod.yaml"));
        // A `ref` source's own `path` does not count: `$values` is its repository's root.
        assert_eq!(resolved("$values/envs/prod.yaml"), file("envs/prod.yaml"));
    }

    #[test]
    fn a_path_out_of_the_repository_is_refused_by_dots_or_by_a_link() {
        let t = Tree::new(&["charts/api/values.yaml"]);
        for raw in [
            "../../../etc/passwd",
            "/../etc/passwd",
            "$values/../etc/passwd",
        ] {
            let err = t.resolve("charts/api", raw).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("value file `{raw}` resolves to outside")),
                "{raw}: {err}"
            );
        }
        std::os::unix::fs::symlink("/etc/hostname", t.root().join("charts/api/linked.yaml"))
            .unwrap();
        assert!(matches!(
            t.resolve("charts/api", "linked.yaml"),
            Err(RenderError::ValueFileOutside { .. })
        ));
    }

    #[test]
    fn urls_of_allowed_schemes_pass_others_and_other_repositories_are_named() {
        let t = Tree::new(&[]);
        assert_eq!(
            t.resolve(".", "https://example.com/values.yaml").unwrap(),
            Some(Resolved::Url("https://example.com/values.yaml".into()))
        );
        let err = t.resolve(".", "file:///etc/passwd").unwrap_err();
        assert!(err.to_string().contains("scheme `file`"), "{err}");
        let err = t.resolve(".", "$other/envs/prod.yaml").unwrap_err();
        assert!(
            err.to_string()
                .contains("https://git.example/acme/other, which this change is not in"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_is_left_to_helm_or_skipped_when_missing_files_are_ignored() {
        let t = Tree::new(&[]);
        let root = t.root();
        let roots = Roots {
            app_dir: &root,
            repo_root: &root,
            refs: &BTreeMap::new(),
            elsewhere: &BTreeMap::new(),
        };
        assert_eq!(resolve("nope.yaml", &roots, true).unwrap(), None);
        assert_eq!(
            resolve("nope.yaml", &roots, false).unwrap(),
            Some(Resolved::File(root.join("nope.yaml")))
        );
    }
}
