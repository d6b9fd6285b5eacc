//! Runs the built `tagpilot` binary to completion in a config directory, for the end-to-end
//! tests over configured repositories. Its cache, `HOME` and `DOCKER_CONFIG` live in that
//! directory and git reads no user or system config, so the developer's setup never leaks in.

use std::path::Path;
use std::process::Output;

/// Runs `tagpilot args… --cache-dir <dir>/cache` in `dir`, with `env` added.
pub fn run_tagpilot(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpilot"))
        .current_dir(dir)
        .args(args)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("HOME", dir)
        .env("DOCKER_CONFIG", dir.join("docker"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .envs(env.iter().copied())
        .output()
        .expect("run tagpilot")
}

/// Both streams of a run, for failure messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
