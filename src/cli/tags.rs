//! `tagpilot tags`: an image's tags in a policy's order, the one it would choose marked. Which
//! policy is decided here from the flags and the configuration (policy files, and the
//! Applications `applications:` configures when `--policy` names one of their images); the
//! tags are ranked through the [`Session`], like every command that asks a registry.

use std::process::ExitCode;

use crate::config::{Config, RegistryConfig};
use crate::image::ImageRef;
use crate::plan::tags::{self, Announcement};
use crate::policy::ImagePolicy;
use crate::session::{self, Options, Session};
use crate::{policy, report};

use super::CliError;
use super::args::TagsArgs;
use super::spinner::Spinner;

pub async fn tags(args: TagsArgs) -> Result<ExitCode, CliError> {
    let config = session::optional_config(args.config.config.as_deref(), args.policy.is_some())?;
    let reference = ImageRef::parse(&args.image)?;
    // Strategy flags describe a policy of their own; otherwise a configured one may apply.
    let (mut policies, broken) = match &config {
        Some(c) if args.policy.is_some() || !args.strategy.adhoc().given() => {
            let l = policy::load_all(c);
            (l.policies, l.errors)
        }
        _ => (Vec::new(), Vec::new()),
    };
    // An Application's image (`namespace/app/alias`) is looked for only when no policy file
    // defines the name asked for: reading Applications may fetch repositories and the cluster.
    let applications = match (&args.policy, &config) {
        (Some(name), Some(c)) => {
            c.applications.is_some() && tags::named(&policies, name).is_empty()
        }
        _ => false,
    };
    let mut config = config.unwrap_or_default();
    if args.insecure {
        plain_http(&mut config, &reference.repository.registry);
    }
    let read_cluster = applications
        && config
            .applications
            .as_ref()
            .is_some_and(|a| a.from_cluster.is_some());
    // The registries of tagpilot.yaml, not the cluster's unless an Application is asked for.
    let options = Options {
        read_cluster,
        ..Options::default()
    };
    let session = Session::open(config, options).await?;
    if applications {
        policies.extend(session.application_policies().await?);
    }
    let configured =
        tags::configured_policy(&policies, &reference.repository, args.policy.as_deref())
            .inspect_err(|_| {
                // The policy asked for may be in a file that did not load: say which did not.
                for b in &broken {
                    eprintln!("warning: {b}");
                }
            })?;
    match configured.announcement(&reference.repository) {
        Announcement::Policy(line) => println!("{line}"),
        Announcement::Note(note) => eprintln!("{note}"),
        Announcement::Nothing => {}
    }
    let adhoc: ImagePolicy;
    let policy = match configured.policy() {
        Some(p) => p,
        None => {
            adhoc = args.strategy.adhoc().policy(&reference.name)?;
            &adhoc
        }
    };
    println!("order: {}", policy.strategy.order_text());
    let progress = Spinner::new();
    let ranked = session
        .rank_tags(policy, reference.tag.as_deref(), &progress)
        .await?;
    drop(progress);
    print!("{}", report::tags(&policy.image_name, &ranked));
    Ok(ExitCode::SUCCESS)
}

/// `--insecure`: the image's registry over plain HTTP, configured or not.
fn plain_http(config: &mut Config, host: &str) {
    match config
        .registries
        .iter_mut()
        .find(|r| r.host.eq_ignore_ascii_case(host))
    {
        Some(r) => r.insecure = true,
        None => config.registries.push(RegistryConfig {
            host: host.to_string(),
            insecure: true,
            ..RegistryConfig::default()
        }),
    }
}
