//! Reading Applications and what configures them: Image Updater's annotations
//! ([`annotations`]) and `ImageUpdater` resources ([`image_updater`]) into one typed settings
//! model ([`settings`]), the Applications themselves from git ([`load`]) or from the cluster
//! ([`cluster`]), and Argo CD's Secrets as credentials ([`credentials`]).
//!
//! Reads only: it never plans and never writes (`tests/it/layers.rs`).

pub mod annotations;
pub mod cluster;
pub mod credentials;
pub mod image_updater;
pub mod load;
pub mod settings;
