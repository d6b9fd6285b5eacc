//! Docker credential helpers: `docker-credential-<name> get`, the server URL on stdin,
//! `{"Username", "Secret"}` on stdout, as the Docker CLI runs them.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::Credential;

/// How long a `docker-credential-*` helper may take before tagpilot gives up on it.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// A credential helper that could not answer. Its stdout is never quoted whole: only the first
/// line of what a failing helper said, which is its error message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HelperError {
    #[error("credential helper {program} is not on PATH")]
    NotFound { program: String },

    #[error("cannot run {program}")]
    Run {
        program: String,
        #[source]
        source: Arc<std::io::Error>,
    },

    #[error("cannot talk to {program}")]
    Talk {
        program: String,
        #[source]
        source: Arc<std::io::Error>,
    },

    #[error("{program} get did not answer within {} s", timeout.as_secs())]
    Timeout { program: String, timeout: Duration },

    #[error("{program} get failed ({status}): {said}")]
    Failed {
        program: String,
        status: ExitStatus,
        said: String,
    },

    /// Only the position: serde_json would quote the secret it choked on.
    #[error(
        "{program} get printed something other than {{Username, Secret}} JSON \
         (line {line}, column {column})"
    )]
    Answer {
        program: String,
        line: usize,
        column: usize,
    },

    #[error(
        "{program} returned an identity token, which tagpilot does not support; \
         store a password or access token instead"
    )]
    IdentityToken { program: String },
}

/// Runs `docker-credential-<name> get` with the server URL on stdin. `Ok(None)` when the helper
/// has no entry for it (the caller falls back to `auths`). `search_path` replaces `PATH`.
pub(super) async fn run_helper(
    search_path: Option<&OsStr>,
    name: &str,
    server_url: &str,
) -> Result<Option<Credential>, HelperError> {
    let program = format!("docker-credential-{name}");
    let Some(path) = find_program(search_path, &program) else {
        return Err(HelperError::NotFound { program });
    };
    let run_failed = |e: std::io::Error| HelperError::Run {
        program: program.clone(),
        source: Arc::new(e),
    };
    let mut child = tokio::process::Command::new(&path)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(run_failed)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(server_url.as_bytes())
            .await
            .map_err(|e| HelperError::Talk {
                program: program.clone(),
                source: Arc::new(e),
            })?;
    }
    let output = tokio::time::timeout(HELPER_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| HelperError::Timeout {
            program: program.clone(),
            timeout: HELPER_TIMEOUT,
        })?
        .map_err(run_failed)?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(if output.stdout.is_empty() {
            &output.stderr
        } else {
            &output.stdout
        });
        // The helper protocol's way of saying "no entry": fall back to `auths`.
        if said.contains("credentials not found") {
            return Ok(None);
        }
        let first_line = said.lines().next().unwrap_or("").trim().to_string();
        return Err(HelperError::Failed {
            program,
            status: output.status,
            said: first_line,
        });
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct HelperAnswer {
        username: String,
        secret: String,
    }
    let answer: HelperAnswer =
        serde_json::from_slice(&output.stdout).map_err(|e| HelperError::Answer {
            program: program.clone(),
            line: e.line(),
            column: e.column(),
        })?;
    if answer.username == "<token>" {
        return Err(HelperError::IdentityToken { program });
    }
    Ok(Some(Credential::new(
        answer.username,
        answer.secret,
        program,
    )))
}

fn find_program(search_path: Option<&OsStr>, program: &str) -> Option<PathBuf> {
    let search = search_path
        .map(OsStr::to_os_string)
        .or_else(|| std::env::var_os("PATH"))?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use base64::Engine;

    use crate::image::DOCKER_HUB;
    use crate::registry::auth::{CredentialResolver, DockerConfigSource};

    fn resolver(dir: &Path, helper_path: &Path) -> CredentialResolver {
        CredentialResolver::new(
            &[],
            dir,
            DockerConfigSource::File(dir.join("config.json")),
            Some(helper_path.as_os_str().to_owned()),
        )
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// Writes an executable `docker-credential-<name>` that answers like a real helper: it checks
    /// the server URL it reads on stdin and prints `{Username, Secret}`, or "not found".
    fn fake_helper(dir: &Path, name: &str, server_url: &str, user: &str, secret: &str) {
        let path = dir.join(format!("docker-credential-{name}"));
        write_executable(
            &path,
            &format!(
                "#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread -r url\n\
                 if [ \"$url\" = '{server_url}' ]; then\n  printf '%s' '{{\"ServerURL\":\"{server_url}\",\"Username\":\"{user}\",\"Secret\":\"{secret}\"}}'\n\
                 else\n  echo 'credentials not found in native keychain'; exit 1\nfi\n"
            ),
        );
    }

    /// Writes a script through a child process. Written from this process, the script could
    /// fail to start with "Text file busy" (ETXTBSY): a test on another thread forking at that
    /// moment holds our write descriptor until its child execs.
    fn write_executable(path: &Path, text: &str) {
        let status = std::process::Command::new("sh")
            .args([
                "-c",
                "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
                "sh",
                text,
            ])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "writing {}", path.display());
    }

    #[tokio::test]
    async fn cred_helpers_run_the_named_program_with_the_server_url_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        fake_helper(
            &bin,
            "fake",
            "127.0.0.1:5000",
            "helper-user",
            "helper-secret",
        );
        write(
            &dir.path().join("config.json"),
            r#"{"credHelpers": {"127.0.0.1:5000": "fake"}}"#,
        );
        let r = resolver(dir.path(), &bin);
        let cred = r
            .resolve("127.0.0.1:5000", "127.0.0.1:5000")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (cred.username.as_str(), cred.password()),
            ("helper-user", "helper-secret")
        );
        assert_eq!(cred.source, "docker-credential-fake");
        // Not configured for this host: the helper is not consulted.
        assert_eq!(
            r.resolve("127.0.0.1:6000", "127.0.0.1:6000").await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn creds_store_falls_back_to_auths_when_the_helper_has_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        fake_helper(
            &bin,
            "store",
            crate::image::DOCKER_HUB_AUTH_KEY,
            "hub-user",
            "hub-secret",
        );
        write(
            &dir.path().join("config.json"),
            &format!(
                r#"{{"credsStore": "store", "auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
                b64("gh:pw")
            ),
        );
        let r = resolver(dir.path(), &bin);
        let hub = r
            .resolve(DOCKER_HUB, crate::image::DOCKER_HUB_AUTH_KEY)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(hub.username, "hub-user");
        let gh = r.resolve("ghcr.io", "ghcr.io").await.unwrap().unwrap();
        assert_eq!(gh.username, "gh");
    }

    #[tokio::test]
    async fn a_missing_helper_program_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            r#"{"credsStore": "nowhere"}"#,
        );
        let err = resolver(dir.path(), dir.path())
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("docker-credential-nowhere"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_helper_answer_that_is_not_json_is_reported_without_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        write_executable(
            &bin.join("docker-credential-odd"),
            "#!/bin/sh\nprintf '%s' '{\"Username\": \"u\", \"Secret\": 424242}'\n",
        );
        write(&dir.path().join("config.json"), r#"{"credsStore": "odd"}"#);
        let err = resolver(dir.path(), &bin)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("docker-credential-odd") && !msg.contains("424242"),
            "{msg}"
        );
    }
}
