//! `tagpilot tags`: an image's tags in a policy's order, the one it would choose marked. Which
//! policy is decided here from the flags and the configuration; the tags are ranked through
//! the [`Session`], like every command that asks a registry.

use std::process::ExitCode;

use crate::image::ImageRef;
use crate::plan::tags::{self, Announcement, PolicyChoice};
use crate::session::{self, Session};
use crate::{policy, report};

use super::CliError;
use super::args::TagsArgs;
use super::spinner::Spinner;

pub async fn tags(args: TagsArgs) -> Result<ExitCode, CliError> {
    let config = session::optional_config(args.config.config.as_deref(), args.policy.is_some())?;
    let reference = ImageRef::parse(&args.image)?;
    // Strategy flags describe a policy of their own; otherwise a configured one may apply.
    let loaded = match &config {
        Some(c) if args.policy.is_some() || !args.strategy.adhoc().given() => {
            Some(policy::load_all(c))
        }
        _ => None,
    };
    let configured = match &loaded {
        Some(l) => {
            tags::configured_policy(&l.policies, &reference.repository, args.policy.as_deref())
                .inspect_err(|_| {
                    // The policy asked for may be in a file that did not load: say which did not.
                    for broken in &l.errors {
                        eprintln!("warning: {broken}");
                    }
                })?
        }
        None => PolicyChoice::None,
    };
    match configured.announcement(&reference.repository) {
        Announcement::Policy(line) => println!("{line}"),
        Announcement::Note(note) => eprintln!("{note}"),
        Announcement::Nothing => {}
    }
    let adhoc;
    let policy = match configured.policy() {
        Some(p) => p,
        None => {
            adhoc = args.strategy.adhoc().policy(&reference.name)?;
            &adhoc
        }
    };
    // The registries of tagpilot.yaml, not the cluster's: one image's tags need no Application.
    let session = Session::open(config.unwrap_or_default(), Default::default()).await?;
    let progress = Spinner::new();
    let ranked = session
        .rank_tags(policy, reference.tag.as_deref(), &progress)
        .await?;
    drop(progress);
    print!("{}", report::tags(&policy.image_name, &ranked));
    Ok(ExitCode::SUCCESS)
}
