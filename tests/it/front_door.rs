//! What a new user meets first: the Rust version the README and `Cargo.toml` promise, and the
//! set-up scripts (`scripts/`). The scripts' apt installs cannot run here; their logic is run
//! in isolation (a policy-rc.d at a temporary path, a fake `~/.cargo/bin`) and the scripts are
//! checked to use it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn checkout() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(checkout().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `1.91` as `(1, 91)`.
fn version(text: &str) -> (u32, u32) {
    let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap_or(0))
}

/// `rust-version` of `Cargo.toml`.
fn rust_version() -> (u32, u32) {
    let toml = read("Cargo.toml");
    let line = toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("Cargo.toml has no rust-version");
    version(line.trim_matches('"'))
}

#[test]
fn rust_version_is_what_the_locked_dependencies_and_the_code_need() {
    let (major, minor) = rust_version();
    // Edition 2024 needs 1.85; `if let … && …` chains, used throughout, 1.88.
    assert!((major, minor) >= (1, 88), "{major}.{minor}");

    // Every locked dependency built for this platform (build scripts and tests included)
    // accepts it.
    let host = String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(checkout())
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let needed = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] != "tagpilot")
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].to_string())))
        .max()
        .unwrap();
    assert!(
        (major, minor) >= needed.0,
        "rust-version {major}.{minor}, but {} needs {}.{}",
        needed.1,
        needed.0.0,
        needed.0.1
    );

    // The README says the same.
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("Rust {major}.{minor} or newer")),
        "README.md does not name Rust {major}.{minor}"
    );
    for how in [
        "cargo install --locked --path .",
        "docker build -f Dockerfile",
    ] {
        assert!(readme.contains(how), "README.md does not say `{how}`");
    }
}

/// Runs `script` in bash with `scripts/lib/LIB` sourced, `env` set; returns stdout.
fn bash_with(lib: &str, script: &str, env: &[(&str, &Path)]) -> String {
    let out = Command::new("bash")
        .current_dir(checkout())
        .arg("-c")
        .arg(format!(
            "set -euo pipefail\nsource scripts/lib/{lib}\n{script}"
        ))
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Installing the test servers must not leave system services running on a developer's
/// machine: while apt runs, a policy-rc.d forbids every start (101), and afterwards the
/// policy that was there is back.
#[test]
fn packages_install_with_service_starts_forbidden_and_the_policy_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy-rc.d");
    let env = [("POLICY_RC_D", policy.as_path())];
    // What invoke-rc.d does before it starts a service: run the policy, read its exit code.
    let ask = r#"without_service_starts sh -c '"$POLICY_RC_D" ssh start; echo "policy says $?"'"#;

    assert_eq!(bash_with("apt.sh", ask, &env), "policy says 101\n");
    assert!(!policy.exists(), "no policy before, none after");

    std::fs::write(&policy, "#!/bin/sh\nexit 0\n").unwrap();
    assert_eq!(bash_with("apt.sh", ask, &env), "policy says 101\n");
    assert_eq!(
        std::fs::read_to_string(&policy).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );

    // A failing install still puts the policy back, and fails.
    let failed = bash_with(
        "apt.sh",
        "without_service_starts false && echo passed || echo \"failed $?\"",
        &env,
    );
    assert_eq!(failed, "failed 1\n");
    assert_eq!(
        std::fs::read_to_string(&policy).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );

    // And the one place that runs apt-get install does it that way.
    let apt = read("scripts/lib/apt.sh");
    let installs: Vec<&str> = apt
        .lines()
        .filter(|l| l.contains("apt-get install") && !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(installs.len(), 1, "{installs:?}");
    let install_at = apt.find(installs[0]).unwrap();
    assert!(
        apt[..install_at].trim_end().ends_with(
            "without_service_starts \"${as_root[@]}\" env DEBIAN_FRONTEND=noninteractive \\"
        ),
        "apt-get install runs outside without_service_starts"
    );
    for script in ["scripts/test.sh", "scripts/quickstart.sh"] {
        let text = read(script);
        assert!(
            !text.contains("apt-get install") && text.contains("ensure_packages"),
            "{script} installs packages another way"
        );
    }
    assert!(read("CONTRIBUTING.md").contains("policy-rc.d"));
}

/// rustup's cargo is in `~/.cargo/bin`, which a non-login shell may lack: both scripts that
/// build put it on PATH, and the quickstart says where its binary is.
#[test]
fn the_scripts_find_rustups_cargo_and_the_quickstart_says_where_its_binary_is() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    crate::support::git::write_executable(&bin.join("cargo"), "#!/bin/sh\n");
    let found = bash_with(
        "cargo.sh",
        "PATH=/usr/bin:/bin\ncargo_on_path\ncommand -v cargo",
        &[("HOME", home.path())],
    );
    assert_eq!(PathBuf::from(found.trim()), bin.join("cargo"));

    for script in ["scripts/test.sh", "scripts/quickstart.sh"] {
        let text = read(script);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let on_path = lines.iter().position(|l| *l == "cargo_on_path");
        let first_cargo = lines.iter().position(|l| {
            !l.starts_with('#')
                && ["cargo build", "cargo fmt", "cargo clippy", "cargo test"]
                    .iter()
                    .any(|c| l.contains(c))
        });
        assert!(
            matches!((on_path, first_cargo), (Some(a), Some(b)) if a < b),
            "{script} runs cargo before cargo_on_path"
        );
    }
    let quickstart = read("scripts/quickstart.sh");
    assert!(
        quickstart.contains("The tagpilot binary is $TAGPILOT"),
        "the quickstart does not say where its binary is"
    );
    assert!(read("README.md").contains("--keep-registry"));
}

/// `examples/promotion/run.sh`, the worked dev → staging → prod walkthrough, runs as its README
/// shows: against a lab registry (the real `docker-registry`) and a bare repository whose
/// back-dated history puts dev on 1.1.0 for three hours and staging for thirty minutes.
#[test]
fn the_promotion_walkthrough_runs_as_its_readme_shows() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(checkout().join("examples/promotion/run.sh"))
        .env("TAGPILOT", env!("CARGO_BIN_EXE_tagpilot"))
        .env("TAGPILOT_PROMOTION_DIR", work.path().join("promotion"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let steps: Vec<&str> = stdout.split("\n==> ").collect();
    let step = |title: &str| {
        *steps
            .iter()
            .find(|s| s.starts_with(title))
            .unwrap_or_else(|| panic!("no step {title:?}:\n{stdout}"))
    };
    let first = step("What would change");
    assert!(
        first.contains("  8     1.1.0  1.2.0")
            && first.contains(
                "shop-staging (environments:envs/staging/kustomization.yaml:8) runs 1.1.0 since"
            )
            && first.contains("waits: 1.1.0 soaks in policy shop-staging: 1h "),
        "{first}"
    );
    assert!(step("Applying").contains("): pushed"), "{stdout}");
    let again = step("Planning again");
    assert!(
        again.contains("No changes.")
            && again.contains("waits: 1.2.0 soaks in policy shop-dev: ")
            && again.contains("waits: 1.1.0 soaks in policy shop-staging: 1h "),
        "{again}"
    );
    let readme = read("examples/promotion/README.md");
    assert!(readme.contains("examples/promotion/run.sh"), "{readme}");
}
