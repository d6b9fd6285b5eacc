//! Cosign keys that a `signatures:` setting names in Kubernetes Secrets (`keys: [{secret:
//! {namespace, name, key}}]`, issue 22), read over the cluster connection before a
//! verification needs them: each Secret once per cycle (a rotated key is picked up by the next
//! cycle), shared by every policy and default that names it.
//!
//! Why here and not where the setting is read: policy files and `tagpilot.yaml` are read
//! without a cluster connection, and a Secret changes while the process runs.
//!
//! Never: let a key that cannot be read (no cluster connection, no such Secret or key, not a
//! public key) narrow the requirement to the other keys; the verification fails, which holds
//! the reference. Never put the Secret's value in an error or a log.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::RegistryError;
use super::signature_state::SignatureError;
use super::state::RegistryClient;
use crate::config::signatures::{PublicKey, Requirement, SecretKeyRef, check_key};
use crate::image::Repository;

impl RegistryClient {
    /// Reads `secret:` keys over `cluster` (the connection of `applications.fromCluster`);
    /// without one, a requirement naming a Secret cannot be verified.
    pub fn with_cluster(mut self, cluster: crate::kubernetes::Cluster) -> Self {
        self.signatures.cluster = Some(cluster);
        self
    }

    /// `required` with the keys its Secrets hold added to its keys. A key that cannot be read
    /// is an error for `repo` (counted as a verification that ended in `error`).
    pub(super) async fn with_secret_keys(
        &self,
        repo: &Repository,
        required: &Requirement,
    ) -> Result<Requirement, RegistryError> {
        if required.secret_keys.is_empty() {
            return Ok(required.clone());
        }
        let mut resolved = (**required).clone();
        for secret in std::mem::take(&mut resolved.secret_keys) {
            match self.secret_key(&secret, &required.origin).await {
                Ok(key) => resolved.keys.push(key),
                Err(e) => {
                    self.signatures.counts.error.fetch_add(1, Ordering::Relaxed);
                    return Err(RegistryError::SignaturesSetup {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        source: Arc::new(e),
                    });
                }
            }
        }
        Ok(Arc::new(resolved))
    }

    async fn secret_key(
        &self,
        at: &SecretKeyRef,
        origin: &str,
    ) -> Result<PublicKey, SignatureError> {
        let origin = origin.to_string();
        let Some(cluster) = &self.signatures.cluster else {
            return Err(SignatureError::KeyWithoutCluster {
                secret: at.to_string(),
                origin,
            });
        };
        let namespace = at
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace().to_string());
        let shown = SecretKeyRef {
            namespace: Some(namespace.clone()),
            ..at.clone()
        }
        .to_string();
        let read = self
            .signatures
            .secrets
            .get_or_init((namespace.clone(), at.name.clone()), || async {
                cluster
                    .secret(&namespace, &at.name)
                    .await
                    .map(Arc::new)
                    .map_err(Arc::new)
            })
            .await;
        let secret = read.map_err(|source| SignatureError::KeySecret {
            secret: shown.clone(),
            origin: origin.clone(),
            source,
        })?;
        let Some(pem) = crate::kubernetes::secret_value(&secret, &at.key) else {
            return Err(SignatureError::KeyNotInSecret {
                secret: shown,
                origin,
            });
        };
        check_key(pem.as_bytes(), "its value").map_err(|source| {
            SignatureError::KeyInSecretUnusable {
                secret: shown.clone(),
                origin,
                source,
            }
        })?;
        Ok(PublicKey {
            pem: pem.into_bytes(),
            source: shown,
        })
    }
}
