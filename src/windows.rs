//! Change windows (leaf): when tagpilot may write, per repository, policy and environment.
//!
//! `windows:` in `tagpilot.yaml` lists windows, each `allow` or `deny`, each opening on a
//! schedule (a cron expression or an RFC 5545 recurrence rule, in a time zone) and staying open
//! for a `duration`. A write is closed while a `deny` window that covers it is open, or while
//! `allow` windows cover it and none of them is open. What a closed window keeps from being
//! written is planned all the same, and waits, named, for the time it opens
//! ([`Windows::closed`]).
//!
//! Pure: the time is handed in (from the cycle's clock), nothing is read. Schedules are read by
//! `croner` (cron) and `rrule` (RFC 5545), both on `chrono` with `chrono-tz`'s compiled-in time
//! zone database, so a window reads the same in a `scratch` image without `/usr/share/zoneinfo`.
//!
//! What this module must never do: guess. A schedule or time zone that cannot be read is an
//! error when the configuration is read ([`Windows::compile`]), never a window taken as open.

use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use jiff::Timestamp;
use serde::{Deserialize, Deserializer};

/// How far ahead an opening is looked for: a window that opens later than this is said to open
/// "not within a year", and the write waits all the same.
const HORIZON_DAYS: i64 = 366;
/// How many windows' edges are stepped over looking for an opening (overlapping deny windows).
const MAX_STEPS: usize = 64;

/// `windows[]` of `tagpilot.yaml`, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WindowConfig {
    /// Named in `plan` and the logs: "waiting for the window `business-hours` that opens at …".
    pub name: String,
    /// `allow`: writes only while it is open; `deny`: no writes while it is open.
    pub kind: WindowKind,
    /// When it opens: a cron expression (five fields, or six with seconds).
    #[serde(default)]
    pub cron: Option<String>,
    /// When it opens: an RFC 5545 `RRULE` (`FREQ=WEEKLY;BYDAY=MO,TU;BYHOUR=9`), from `start`.
    #[serde(default)]
    pub rrule: Option<String>,
    /// With `rrule`: the first opening, a civil time in `timeZone` (`2026-01-05T09:00:00`);
    /// default midnight of 2000-01-01.
    #[serde(default)]
    pub start: Option<String>,
    /// How long it stays open each time (`8h`, `14d`).
    #[serde(deserialize_with = "duration")]
    #[schemars(with = "String")]
    pub duration: Duration,
    /// The IANA time zone the schedule is read in (`Europe/Berlin`); default `UTC`.
    #[serde(default)]
    pub time_zone: Option<String>,
    /// The repositories (`repositories[].name`) it covers; empty: every one.
    #[serde(default)]
    pub repositories: Vec<String>,
    /// The policies it covers, by name or a prefix ending in `*`; empty: every one.
    #[serde(default)]
    pub policies: Vec<String>,
    /// The environments it covers: Argo CD Applications the change deploys, by `name`,
    /// `namespace/name` or destination namespace; empty: every one.
    #[serde(default)]
    pub environments: Vec<String>,
    /// Whether it also holds promotions (`promote:`); default true.
    #[serde(default = "yes")]
    pub promotions: bool,
}

fn yes() -> bool {
    true
}

/// Whether a window lets writes through or keeps them out while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WindowKind {
    Allow,
    Deny,
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a duration: {e}")))
}

/// Why a window cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    #[error("window {name:?} needs exactly one of `cron` and `rrule`")]
    Schedule { name: String },
    #[error("window {name:?}: {zone:?} is not an IANA time zone")]
    TimeZone { name: String, zone: String },
    #[error("window {name:?}: cannot read the cron expression {cron:?}")]
    Cron {
        name: String,
        cron: String,
        #[source]
        source: Box<croner::errors::CronError>,
    },
    #[error("window {name:?}: cannot read the recurrence rule")]
    Rrule {
        name: String,
        #[source]
        source: Box<rrule::RRuleError>,
    },
    #[error("window {name:?}: `start` {start:?} is not a civil time (2026-01-05T09:00:00)")]
    Start { name: String, start: String },
    #[error("window {name:?}: the duration must be longer than zero")]
    Duration { name: String },
}

/// A window's schedule, read.
#[derive(Debug, Clone)]
enum Schedule {
    Cron(Box<croner::Cron>, chrono_tz::Tz),
    Rrule(Box<rrule::RRuleSet>),
}

/// One window, read.
#[derive(Debug, Clone)]
struct Window {
    config: WindowConfig,
    schedule: Schedule,
}

/// What a write is about, for matching windows.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub repository: &'a str,
    pub policy: &'a str,
    /// The Argo CD Applications it deploys: `namespace/name` (or `name`), and where to.
    pub environments: &'a [String],
    /// A promotion (`promote:`), which a window holds only with `promotions: true`.
    pub promotion: bool,
}

/// Why a write waits: the window, and when it opens again (`None`: not within a year).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub window: String,
    pub opens: Option<Timestamp>,
}

/// Every window of `tagpilot.yaml`, read.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    windows: Vec<Window>,
}

impl Windows {
    /// Reads every window; the first that cannot be read is the error.
    pub fn compile(configs: &[WindowConfig]) -> Result<Windows, WindowError> {
        let windows = configs
            .iter()
            .map(|c| {
                Ok(Window {
                    schedule: Schedule::read(c)?,
                    config: c.clone(),
                })
            })
            .collect::<Result<_, WindowError>>()?;
        Ok(Windows { windows })
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Whether `subject` may be written at `now`: `None` if so, else the window that keeps it
    /// and when writes open again (past every deny window that covers it then, and into an
    /// allow window when allow windows cover it).
    pub fn closed(&self, subject: &Subject<'_>, now: Timestamp) -> Option<Closed> {
        let covering: Vec<&Window> = self.windows.iter().filter(|w| w.covers(subject)).collect();
        let allows: Vec<&Window> = covering
            .iter()
            .copied()
            .filter(|w| w.config.kind == WindowKind::Allow)
            .collect();
        let denies: Vec<&Window> = covering
            .iter()
            .copied()
            .filter(|w| w.config.kind == WindowKind::Deny)
            .collect();
        let mut at = to_chrono(now)?;
        let horizon = at + chrono::Duration::days(HORIZON_DAYS);
        let mut keeping: Option<&Window> = None;
        for _ in 0..MAX_STEPS {
            if at > horizon {
                break;
            }
            if let Some((w, ends)) = denies
                .iter()
                .find_map(|w| w.open_at(at).map(|ends| (*w, ends)))
            {
                keeping.get_or_insert(w);
                at = ends;
                continue;
            }
            if !allows.is_empty() && allows.iter().all(|w| w.open_at(at).is_none()) {
                let next = allows
                    .iter()
                    .filter_map(|w| w.next_opening(at).map(|t| (*w, t)))
                    .min_by_key(|(_, t)| *t);
                let Some((w, opens)) = next else {
                    keeping.get_or_insert(allows[0]);
                    break;
                };
                keeping.get_or_insert(w);
                at = opens;
                continue;
            }
            // Open at `at`.
            return keeping.map(|w| Closed {
                window: w.config.name.clone(),
                opens: Some(from_chrono(at)),
            });
        }
        keeping.map(|w| Closed {
            window: w.config.name.clone(),
            opens: None,
        })
    }
}

impl Window {
    fn covers(&self, s: &Subject<'_>) -> bool {
        let c = &self.config;
        (!s.promotion || c.promotions)
            && (c.repositories.is_empty() || c.repositories.iter().any(|r| r == s.repository))
            && (c.policies.is_empty() || c.policies.iter().any(|p| name_matches(p, s.policy)))
            && (c.environments.is_empty()
                || c.environments.iter().any(|e| {
                    s.environments
                        .iter()
                        .any(|have| environment_matches(e, have))
                }))
    }

    fn length(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.config.duration).unwrap_or(chrono::Duration::MAX)
    }

    /// When the opening that covers `at` ends, if one does.
    fn open_at(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // The latest opening at or before `at` is the first after `at - duration`, if not later.
        let since = at.checked_sub_signed(self.length())?;
        let opened = self.first_from(since)?;
        (opened <= at)
            .then(|| opened + self.length())
            .filter(|end| *end > at)
    }

    /// The first opening strictly after `at`.
    fn next_opening(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.first_from(at + chrono::Duration::nanoseconds(1))
    }

    /// The first opening at or after `from`.
    fn first_from(&self, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.schedule {
            Schedule::Cron(cron, tz) => cron
                .find_next_occurrence(&from.with_timezone(tz), true)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            Schedule::Rrule(set) => {
                let from = from.with_timezone(&rrule::Tz::UTC) - chrono::Duration::nanoseconds(1);
                let until = from + chrono::Duration::days(HORIZON_DAYS);
                let found = (**set).clone().after(from).before(until).all(1);
                found.dates.first().map(|t| t.with_timezone(&Utc))
            }
        }
    }
}

impl Schedule {
    fn read(c: &WindowConfig) -> Result<Schedule, WindowError> {
        let name = c.name.clone();
        if c.duration.is_zero() {
            return Err(WindowError::Duration { name });
        }
        let zone = c.time_zone.as_deref().unwrap_or("UTC");
        let tz: chrono_tz::Tz = zone.parse().map_err(|_| WindowError::TimeZone {
            name: name.clone(),
            zone: zone.to_string(),
        })?;
        match (&c.cron, &c.rrule) {
            (Some(cron), None) => {
                let parsed = croner::parser::CronParser::builder()
                    .seconds(croner::parser::Seconds::Optional)
                    .build()
                    .parse(cron)
                    .map_err(|source| WindowError::Cron {
                        name,
                        cron: cron.clone(),
                        source: Box::new(source),
                    })?;
                Ok(Schedule::Cron(Box::new(parsed), tz))
            }
            (None, Some(rule)) => {
                let start = c.start.as_deref().unwrap_or("2000-01-01T00:00:00");
                let civil = chrono::NaiveDateTime::parse_from_str(start, "%Y-%m-%dT%H:%M:%S")
                    .map_err(|_| WindowError::Start {
                        name: name.clone(),
                        start: start.to_string(),
                    })?;
                let text = format!(
                    "DTSTART;TZID={}:{}\nRRULE:{}",
                    tz.name(),
                    civil.format("%Y%m%dT%H%M%S"),
                    rule.trim().trim_start_matches("RRULE:")
                );
                let set: rrule::RRuleSet = text.parse().map_err(|source| WindowError::Rrule {
                    name,
                    source: Box::new(source),
                })?;
                Ok(Schedule::Rrule(Box::new(set)))
            }
            _ => Err(WindowError::Schedule { name }),
        }
    }
}

/// An emergency freeze: every write held at once, until unfrozen. Reverts are not writes it
/// holds (they undo what failed).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Freeze {
    /// Who froze: the name the command was given (or the token's owner).
    pub by: String,
    pub reason: String,
    pub since: Timestamp,
}

/// The freeze the service keeps, read by each target as it is planned, so that a freeze holds
/// the targets not yet written in the cycle running when it came.
#[derive(Debug, Default)]
pub struct FreezeSwitch(std::sync::RwLock<Option<Freeze>>);

impl FreezeSwitch {
    pub fn current(&self) -> Option<Freeze> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Freezes (or says anew who froze and why); the freeze before, if any.
    pub fn freeze(&self, freeze: Freeze) -> Option<Freeze> {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(freeze)
    }

    /// Unfreezes; the freeze that was, if any.
    pub fn unfreeze(&self) -> Option<Freeze> {
        self.0.write().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// `api`, or a prefix `api-*`.
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// An environment as written against `namespace/name` (or `name`) or `=>namespace` (where
/// it deploys to, as [`Subject::environments`] lists it).
fn environment_matches(pattern: &str, have: &str) -> bool {
    let name = have.rsplit('/').next().unwrap_or(have);
    name_matches(pattern, have)
        || name_matches(pattern, name)
        || have
            .strip_prefix("=>")
            .is_some_and(|ns| name_matches(pattern, ns))
}

fn to_chrono(t: Timestamp) -> Option<DateTime<Utc>> {
    Utc.timestamp_opt(t.as_second(), t.subsec_nanosecond().try_into().ok()?)
        .single()
}

fn from_chrono(t: DateTime<Utc>) -> Timestamp {
    Timestamp::new(
        t.timestamp(),
        t.timestamp_subsec_nanos().try_into().unwrap_or(0),
    )
    .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(yaml: &str) -> WindowConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn subject<'a>(repository: &'a str, policy: &'a str) -> Subject<'a> {
        Subject {
            repository,
            policy,
            environments: &[],
            promotion: false,
        }
    }

    #[test]
    fn an_allow_window_opens_and_closes_on_its_cron_schedule_in_its_time_zone() {
        // Weekdays 09:00 to 17:00 in Berlin (UTC+1 in January).
        let w = Windows::compile(&[window(
            "name: office\nkind: allow\ncron: '0 9 * * 1-5'\nduration: 8h\ntimeZone: Europe/Berlin\n",
        )])
        .unwrap();
        let s = subject("manifests", "api");
        // Monday 2026-01-05, 07:59 UTC = 08:59 in Berlin: closed until 08:00 UTC.
        let closed = w.closed(&s, at("2026-01-05T07:59:00Z")).unwrap();
        assert_eq!(closed.window, "office");
        assert_eq!(closed.opens, Some(at("2026-01-05T08:00:00Z")));
        assert_eq!(w.closed(&s, at("2026-01-05T08:00:00Z")), None);
        assert_eq!(w.closed(&s, at("2026-01-05T15:59:59Z")), None);
        // Friday evening: closed until Monday morning.
        let closed = w.closed(&s, at("2026-01-09T16:00:00Z")).unwrap();
        assert_eq!(closed.opens, Some(at("2026-01-12T08:00:00Z")));
    }

    #[test]
    fn a_deny_window_from_a_recurrence_rule_holds_its_repository_only_and_says_when_it_ends() {
        let w = Windows::compile(&[window(
            "name: year-end\nkind: deny\nrrule: FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=20\nduration: 15d\n\
             repositories: [shop]\n",
        )])
        .unwrap();
        let shop = subject("shop", "api");
        let closed = w.closed(&shop, at("2026-12-24T12:00:00Z")).unwrap();
        assert_eq!(closed.window, "year-end");
        assert_eq!(closed.opens, Some(at("2027-01-04T00:00:00Z")));
        assert_eq!(w.closed(&shop, at("2027-01-04T00:00:00Z")), None);
        assert_eq!(w.closed(&shop, at("2026-12-19T23:59:59Z")), None);
        assert_eq!(
            w.closed(&subject("payroll", "api"), at("2026-12-24T12:00:00Z")),
            None
        );
    }

    #[test]
    fn policies_environments_and_promotions_are_matched_as_configured() {
        let w = Windows::compile(&[window(
            "name: prod\nkind: deny\ncron: '0 0 * * *'\nduration: 24h\npolicies: ['checkout-*']\n\
             environments: [prod]\npromotions: false\n",
        )])
        .unwrap();
        let now = at("2026-03-01T12:00:00Z");
        let prod = ["argocd/checkout-prod".to_string(), "=>prod".to_string()];
        let mut s = Subject {
            repository: "manifests",
            policy: "checkout-api",
            environments: &prod,
            promotion: false,
        };
        assert!(w.closed(&s, now).is_some());
        s.promotion = true;
        assert_eq!(w.closed(&s, now), None, "promotions are not held by it");
        s.promotion = false;
        s.policy = "search";
        assert_eq!(w.closed(&s, now), None);
        s.policy = "checkout-web";
        s.environments = &[];
        assert_eq!(
            w.closed(&s, now),
            None,
            "deploys to no environment it names"
        );
    }

    #[test]
    fn a_schedule_or_zone_that_cannot_be_read_is_refused() {
        for yaml in [
            "name: x\nkind: deny\ncron: 'every monday'\nduration: 1h\n",
            "name: x\nkind: deny\ncron: '0 9 * * *'\nduration: 1h\ntimeZone: Mars/Olympus\n",
            "name: x\nkind: deny\nrrule: FREQ=SOMETIMES\nduration: 1h\n",
            "name: x\nkind: deny\nduration: 1h\n",
            "name: x\nkind: deny\ncron: '0 9 * * *'\nduration: 0s\n",
        ] {
            assert!(Windows::compile(&[window(yaml)]).is_err(), "{yaml}");
        }
    }
}
