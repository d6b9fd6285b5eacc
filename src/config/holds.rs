//! `holds:` in `tagpilot.yaml`: what `tagpilot run`'s HTTP port lets an operator do with the
//! held tags in its store.
//!
//! ```yaml
//! holds:
//!   releaseToken:
//!     secretFile: /var/run/secrets/tagpilot/holds-token   # or secretEnv: TAGPILOT_HOLDS_TOKEN
//!   freezeToken:
//!     secretEnv: TAGPILOT_FREEZE_TOKEN
//! ```
//!
//! Without `releaseToken`, `POST /holds/release` refuses every request: a release is never
//! taken unauthenticated; without `freezeToken`, `POST /freeze` and `/unfreeze` likewise. Structure only: the token is read when `tagpilot run` starts.

use serde::Deserialize;

use super::SecretSource;

/// `holds:`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HoldsConfig {
    /// The bearer token `POST /holds/release` must carry.
    #[serde(default)]
    pub release_token: Option<SecretSource>,
    /// The bearer token `POST /freeze` and `POST /unfreeze` (`tagpilot freeze`) must carry.
    #[serde(default)]
    pub freeze_token: Option<SecretSource>,
}
