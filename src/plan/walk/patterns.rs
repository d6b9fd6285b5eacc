//! Pattern policies made into one policy per image they follow (issue 31), between the scan
//! and the registry: the scan found which references each pattern owns, and each distinct
//! (pattern, image) becomes an instance ([`ImagePolicy::instance`]) planned exactly as a
//! policy of its own: its own tag listing (one per repository, shared with any other policy of
//! that image), its own holds, records, commits and groups. No registry catalog is read: the
//! images are those the files hold.

use std::borrow::Cow;
use std::collections::HashMap;

use super::ScannedFile;
use crate::image::Repository;
use crate::policy::ImagePolicy;

/// The policies of a walk with the pattern instances appended after the policies as given,
/// and for each instance the pattern policy it comes from.
pub(super) struct Expanded<'p> {
    pub(super) policies: Cow<'p, [ImagePolicy]>,
    /// `origin[k]`: the pattern policy of instance `policies.len() - origin.len() + k`.
    origin: Vec<usize>,
}

impl Expanded<'_> {
    /// The policy as given that `i` is or comes from.
    pub(super) fn given(&self, i: usize) -> usize {
        let base = self.policies.len() - self.origin.len();
        if i < base { i } else { self.origin[i - base] }
    }
}

/// Makes an instance per (pattern policy, image) the scanned `files` own, and points their
/// fields at it. Without any pattern-owned field, the policies are borrowed as given.
pub(super) fn expand<'p>(policies: &'p [ImagePolicy], files: &mut [ScannedFile]) -> Expanded<'p> {
    let mut instances: Vec<ImagePolicy> = Vec::new();
    let mut origin = Vec::new();
    let mut made: HashMap<(usize, Repository), usize> = HashMap::new();
    for field in files.iter_mut().flat_map(|f| f.fields.iter_mut()) {
        let Some(image) = field.image.take() else {
            continue;
        };
        let pattern = field.policy;
        let key = (pattern, *image);
        field.policy = match made.get(&key) {
            Some(&i) => i,
            None => {
                let i = policies.len() + instances.len();
                instances.push(policies[pattern].instance(&key.1));
                origin.push(pattern);
                made.insert(key, i);
                i
            }
        };
    }
    if instances.is_empty() {
        return Expanded {
            policies: Cow::Borrowed(policies),
            origin,
        };
    }
    let mut all = Vec::with_capacity(policies.len() + instances.len());
    all.extend_from_slice(policies);
    all.extend(instances);
    Expanded {
        policies: Cow::Owned(all),
        origin,
    }
}
