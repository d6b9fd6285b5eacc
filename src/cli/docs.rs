//! What is generated from the command line's own definition, so that it cannot drift from the
//! flags: shell completions (`tagpilot completions`), the man page (`tagpilot man`, installed in
//! the container image), and the book's command-line reference page, which a test compares
//! with `docs/src/reference/cli.md`.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;

/// The shells `tagpilot completions` writes a script for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The documents `tagpilot schema` prints a JSON Schema of.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaOf {
    /// `tagpilot.yaml`.
    Config,
    /// An `ImagePolicy` document.
    Policy,
}

/// The JSON Schema of `of`, pretty-printed with a final newline, as the book publishes it
/// (`docs/schemas/`).
pub fn schema(of: SchemaOf) -> String {
    let schema = match of {
        SchemaOf::Config => crate::config::schema(),
        SchemaOf::Policy => crate::policy::schema(),
    };
    // A schema is JSON values only: serialising it cannot fail.
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// The completion script for `shell`, as clap_complete writes it for tagpilot's flags.
pub fn completions(shell: Shell, out: &mut dyn Write) {
    let mut command = Cli::command();
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(generator, &mut command, "tagpilot", out);
}

/// The man page `tagpilot(1)`, with a section per subcommand, in roff.
pub fn man_page(out: &mut dyn Write) -> std::io::Result<()> {
    clap_mangen::Man::new(Cli::command()).render(out)
}

/// The book's command-line reference, one section per command with its full help, as a
/// person at a terminal reads it. The environment's values are hidden and the width fixed, so
/// the page is the same wherever it is made.
pub fn reference_markdown() -> String {
    let command = Cli::command().term_width(100);
    let mut page = String::from(
        "# Command line\n\n\
         <!-- Generated from the code by `TAGPILOT_BLESS=1 cargo test --test it docs::`; \
         a test fails when this page and the flags disagree. -->\n\n\
         Every command, with each flag, its environment variable and its default. \
         `tagpilot completions bash|zsh|fish` prints a completion script, and `tagpilot man` \
         the man page. Exit codes are listed in [Exit codes and findings](exit-codes.md).\n",
    );
    section(&mut page, command, &[]);
    page
}

fn section(page: &mut String, command: clap::Command, parents: &[&str]) {
    let mut command = command.mut_args(|arg| arg.hide_env_values(true));
    if command.is_hide_set() {
        return;
    }
    let mut path: Vec<&str> = parents.to_vec();
    let name = command.get_name().to_owned();
    path.push(&name);
    let title = path.join(" ");
    let help = command.render_long_help().to_string();
    page.push_str(&format!(
        "\n## `{title}`\n\n```text\n{}\n```\n",
        help.trim_end()
    ));
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
        .cloned()
        .collect();
    for sub in subcommands {
        section(page, sub, &path);
    }
}
