//! Image references as people write them in manifests, and the repository identity tagpilot
//! matches policies on.
//!
//! Two spellings of one repository (`nginx`, `docker.io/library/nginx`,
//! `index.docker.io/library/nginx`) must be the same [`Repository`], or a policy would silently
//! miss half the files that use it. The spelling a user wrote is kept in [`ImageRef::name`], so a
//! rewrite changes only the tag or digest and never the name as written.
//!
//! Pure: no I/O.

use std::fmt;

/// The registry host Docker Hub images are pulled from.
pub const DOCKER_HUB: &str = "registry-1.docker.io";
/// The key Docker's `config.json` stores Docker Hub credentials under.
pub const DOCKER_HUB_AUTH_KEY: &str = "https://index.docker.io/v1/";

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ImageError {
    #[error("image reference {reference:?} is empty")]
    Empty { reference: String },
    #[error("image reference {reference:?} has an invalid repository name component {component:?}")]
    InvalidName {
        reference: String,
        component: String,
    },
    #[error("image reference {reference:?} has an invalid tag {tag:?}")]
    InvalidTag { reference: String, tag: String },
    #[error("image reference {reference:?} has an invalid digest {digest:?}")]
    InvalidDigest { reference: String, digest: String },
    #[error("{reference:?} names an image repository and must not carry a tag or digest")]
    UnexpectedTag { reference: String },
    #[error("platform {platform:?} is not of the form os/arch[/variant]")]
    InvalidPlatform { platform: String },
}

/// A repository in a registry, normalised so that every spelling of it compares equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Repository {
    /// Lower-cased `host[:port]`; Docker Hub aliases are folded into [`DOCKER_HUB`].
    pub registry: String,
    /// The path inside the registry, e.g. `library/nginx` or `shop/checkout-api`.
    pub path: String,
}

impl Repository {
    /// Parses a repository name without tag or digest (`nginx`, `127.0.0.1:5000/shop/app`).
    pub fn parse(s: &str) -> Result<Self, ImageError> {
        let r = ImageRef::parse(s)?;
        if r.tag.is_some() || r.digest.is_some() {
            return Err(ImageError::UnexpectedTag {
                reference: s.to_string(),
            });
        }
        Ok(r.repository)
    }

    pub fn is_docker_hub(&self) -> bool {
        self.registry == DOCKER_HUB
    }

    /// The key under which Docker's `config.json` keeps this registry's credentials.
    pub fn auth_key(&self) -> &str {
        if self.is_docker_hub() {
            DOCKER_HUB_AUTH_KEY
        } else {
            &self.registry
        }
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)
    }
}

/// A full image reference: repository plus optional tag and digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef {
    pub repository: Repository,
    /// The name exactly as written, without tag and digest (`nginx`, `docker.io/library/nginx`).
    pub name: String,
    pub tag: Option<String>,
    /// `algorithm:hex`, e.g. `sha256:…`.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `[registry/]path[:tag][@digest]` by the Docker reference grammar.
    pub fn parse(s: &str) -> Result<Self, ImageError> {
        let reference = s.trim();
        if reference.is_empty() {
            return Err(ImageError::Empty {
                reference: s.to_string(),
            });
        }
        let err_name = |component: &str| ImageError::InvalidName {
            reference: s.to_string(),
            component: component.to_string(),
        };
        let (rest, digest) = match reference.split_once('@') {
            Some((rest, digest)) => {
                if !is_valid_digest(digest) {
                    return Err(ImageError::InvalidDigest {
                        reference: s.to_string(),
                        digest: digest.to_string(),
                    });
                }
                (rest, Some(digest.to_string()))
            }
            None => (reference, None),
        };
        // The tag separator is the last ':' after the last '/', so a registry port is not a tag.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let tag = &rest[last_slash + i + 1..];
                if !is_valid_tag(tag) {
                    return Err(ImageError::InvalidTag {
                        reference: s.to_string(),
                        tag: tag.to_string(),
                    });
                }
                (&rest[..last_slash + i], Some(tag.to_string()))
            }
            None => (rest, None),
        };
        if name.is_empty() {
            return Err(ImageError::Empty {
                reference: s.to_string(),
            });
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_ascii_lowercase(), path.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        if registry.is_empty()
            || !registry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        {
            return Err(err_name(&registry));
        }
        for component in path.split('/') {
            if !is_valid_path_component(component) {
                return Err(err_name(component));
            }
        }
        let registry = match registry.as_str() {
            "docker.io" | "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
            _ => registry,
        };
        let path = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        Ok(ImageRef {
            repository: Repository { registry, path },
            name: name.to_string(),
            tag,
            digest,
        })
    }

    /// Renders this reference's name as written with a new tag and digest.
    pub fn render(name: &str, tag: Option<&str>, digest: Option<&str>) -> String {
        let mut out = name.to_string();
        if let Some(t) = tag {
            out.push(':');
            out.push_str(t);
        }
        if let Some(d) = digest {
            out.push('@');
            out.push_str(d);
        }
        out
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&ImageRef::render(
            &self.name,
            self.tag.as_deref(),
            self.digest.as_deref(),
        ))
    }
}

/// An OS/architecture pair (`linux/amd64`, `linux/arm64/v8`) used to pick entries of a multi-arch
/// image index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl std::str::FromStr for Platform {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: None,
            }),
            [os, arch, variant] if ok(os) && ok(arch) && ok(variant) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: Some(variant.to_string()),
            }),
            _ => Err(ImageError::InvalidPlatform {
                platform: s.to_string(),
            }),
        }
    }
}

impl Platform {
    /// Whether an image built for `offered` (an index entry's or a config's platform) is one for
    /// this wanted platform. Both are compared in containerd's normal form (see
    /// [`Platform::normalized`]), so `linux/arm64/v8` wants an entry that says only `linux/arm64`,
    /// and `linux/arm` wants `linux/arm/v7`: the spellings Docker and containerd treat as one.
    pub fn matches(&self, offered: &Platform) -> bool {
        self.normalized() == offered.normalized()
    }

    /// The platform in the normal form containerd's `platforms.Normalize` gives it: lower case,
    /// `macos` is `darwin`; `x86_64`/`x86-64` are `amd64` and `aarch64` is `arm64`; a default
    /// variant is no variant (`amd64/v1`, `arm64/v8`) while 32-bit `arm` without one is `arm/v7`
    /// (`armhf` is `arm/v7`, `armel` `arm/v6`); bare variant numbers get their `v` (`arm/6`,
    /// `arm64/9.0` is `arm64/v9`); `i386` is `386`.
    pub fn normalized(&self) -> Platform {
        let os = match self.os.to_ascii_lowercase().as_str() {
            "macos" => "darwin".to_string(),
            other => other.to_string(),
        };
        let variant = self.variant.as_deref().map(str::to_ascii_lowercase);
        let (architecture, variant) = match self.architecture.to_ascii_lowercase().as_str() {
            "i386" => ("386".to_string(), None),
            "x86_64" | "x86-64" | "amd64" => (
                "amd64".to_string(),
                variant.filter(|v| v != "v1" && v != "1"),
            ),
            "aarch64" | "arm64" => {
                let variant = match variant.as_deref() {
                    None | Some("8" | "v8" | "8.0" | "v8.0") => None,
                    Some("9" | "9.0" | "v9.0") => Some("v9".to_string()),
                    Some(v) if v.starts_with('v') => Some(v.to_string()),
                    Some(v) => Some(format!("v{v}")),
                };
                ("arm64".to_string(), variant)
            }
            "armhf" => ("arm".to_string(), Some("v7".to_string())),
            "armel" => ("arm".to_string(), Some("v6".to_string())),
            "arm" => {
                let variant = match variant.as_deref() {
                    None | Some("7") => "v7".to_string(),
                    Some(v) if v.starts_with('v') => v.to_string(),
                    Some(v) => format!("v{v}"),
                };
                ("arm".to_string(), Some(variant))
            }
            other => (other.to_string(), variant),
        };
        Platform {
            os,
            architecture,
            variant,
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// Tags are `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
pub fn is_valid_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && tag.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// Digests are `algorithm:encoded`; sha256 and sha512 must have the right hex length.
pub fn is_valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let hex_ok = |len: usize| hex.len() == len && hex.chars().all(|c| c.is_ascii_hexdigit());
    match algorithm {
        "sha256" => hex_ok(64),
        "sha512" => hex_ok(128),
        _ => {
            !algorithm.is_empty()
                && algorithm
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+._-".contains(c))
                && hex.len() >= 32
                && hex
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "=_-".contains(c))
        }
    }
}

/// Path components are lower-case alphanumerics separated by `.`, `_`, `__` or runs of `-`.
fn is_valid_path_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    if bytes.is_empty()
        || !bytes[0].is_ascii_alphanumeric()
        || !bytes[bytes.len() - 1].is_ascii_alphanumeric()
    {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_lowercase() || b.is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !(bytes[i].is_ascii_lowercase() || bytes[i].is_ascii_digit()) {
            i += 1;
        }
        let sep = &c[start..i];
        let dashes = sep.bytes().all(|b| b == b'-');
        if !(sep == "." || sep == "_" || sep == "__" || dashes) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    #[test]
    fn docker_hub_spellings_are_one_repository() {
        let want = Repository {
            registry: DOCKER_HUB.into(),
            path: "library/nginx".into(),
        };
        for s in [
            "nginx",
            "docker.io/nginx",
            "docker.io/library/nginx",
            "index.docker.io/library/nginx:1.2",
        ] {
            assert_eq!(parse(s).repository, want, "{s}");
        }
        assert_eq!(want.auth_key(), DOCKER_HUB_AUTH_KEY);
        assert_eq!(parse("bitnami/redis").repository.path, "bitnami/redis");
    }

    #[test]
    fn ports_are_not_tags() {
        let r = parse("127.0.0.1:5000/shop/checkout-api");
        assert_eq!(r.repository.registry, "127.0.0.1:5000");
        assert_eq!(r.repository.path, "shop/checkout-api");
        assert_eq!(r.tag, None);
        let r = parse("localhost:5000/app:1.2.3");
        assert_eq!(r.repository.registry, "localhost:5000");
        assert_eq!(r.tag.as_deref(), Some("1.2.3"));
        assert_eq!(r.repository.auth_key(), "localhost:5000");
    }

    #[test]
    fn tag_and_digest_together() {
        let d = format!("sha256:{}", "a".repeat(64));
        let r = parse(&format!("ghcr.io/org/app:v1.0.0@{d}"));
        assert_eq!(r.name, "ghcr.io/org/app");
        assert_eq!(r.tag.as_deref(), Some("v1.0.0"));
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert_eq!(r.to_string(), format!("ghcr.io/org/app:v1.0.0@{d}"));
        let r = parse(&format!("ghcr.io/org/app@{d}"));
        assert_eq!(r.tag, None);
    }

    #[test]
    fn invalid_references_are_rejected() {
        assert!(ImageRef::parse("").is_err());
        assert!(ImageRef::parse("Nginx").is_err());
        assert!(ImageRef::parse("nginx:").is_err());
        assert!(ImageRef::parse("nginx@sha256:abc").is_err());
        assert!(ImageRef::parse("{{ .Values.image }}").is_err());
        assert!(ImageRef::parse("app:-bad").is_err());
        assert!(Repository::parse("nginx:1.2").is_err());
    }

    fn platform(s: &str) -> Platform {
        s.parse().unwrap()
    }

    #[test]
    fn platforms_parse_and_match() {
        let p = platform("linux/arm64/v8");
        assert!(p.matches(&platform("linux/arm64/v8")));
        assert!(!p.matches(&platform("linux/arm64/v9")));
        assert!(!p.matches(&platform("linux/amd64")));
        assert_eq!(platform("linux/arm64").to_string(), "linux/arm64");
        assert!("linux".parse::<Platform>().is_err());
    }

    #[test]
    fn platforms_match_as_containerd_normalises_them() {
        // arm64 without a variant is arm64/v8, whichever side says it.
        assert!(platform("linux/arm64/v8").matches(&platform("linux/arm64")));
        assert!(platform("linux/arm64").matches(&platform("linux/arm64/v8")));
        assert!(platform("linux/aarch64").matches(&platform("linux/arm64")));
        // 32-bit arm without a variant is arm/v7.
        assert!(platform("linux/arm").matches(&platform("linux/arm/v7")));
        assert!(platform("linux/arm/7").matches(&platform("linux/arm")));
        assert!(!platform("linux/arm").matches(&platform("linux/arm/v6")));
        assert!(platform("linux/armhf").matches(&platform("linux/arm/v7")));
        // amd64/v1 is amd64; later levels are other platforms.
        assert!(platform("linux/amd64").matches(&platform("linux/amd64/v1")));
        assert!(platform("linux/x86_64").matches(&platform("linux/amd64")));
        assert!(!platform("linux/amd64").matches(&platform("linux/amd64/v3")));
        assert!(platform("Linux/AMD64").matches(&platform("linux/amd64")));
        assert!(platform("linux/386").matches(&platform("linux/i386")));
        assert!(platform("macos/arm64").matches(&platform("darwin/arm64")));
    }

    #[test]
    fn render_keeps_the_name_as_written() {
        let r = parse("docker.io/nginx:1.25");
        assert_eq!(
            ImageRef::render(&r.name, Some("1.26"), None),
            "docker.io/nginx:1.26"
        );
    }
}
