//! What is secret in a configuration and how it is shown: `--print-config`, logs and error
//! messages never carry a password, a key or a token. Used by the schema's serializers and by
//! the bridges' error messages.

use std::collections::BTreeMap;

/// Prefix of the environment twins of `cluster.kafka_properties`.
pub const ENV_PREFIX: &str = "HERALD_KAFKA_PROPERTIES_";

/// What `--print-config` shows instead of a secret value.
pub const REDACTED: &str = "<redacted>";

/// Whether the value of property `key` is a secret (never printed or logged).
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "jaas",
        "key.pem",
        "oauthbearer.config",
        "token",
    ]
    .iter()
    .any(|s| key.contains(s))
}

/// Serializes the properties with secret values replaced by [`REDACTED`].
pub fn serialize_redacted<S: serde::Serializer>(
    properties: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap as _;
    let mut map = serializer.serialize_map(Some(properties.len()))?;
    for (key, value) in properties {
        let value = if is_secret(key) { REDACTED } else { value };
        map.serialize_entry(key, value)?;
    }
    map.end()
}

/// The properties set by `HERALD_KAFKA_PROPERTIES_*` variables among `vars`:
/// `HERALD_KAFKA_PROPERTIES_SASL_PASSWORD` → `sasl.password` (`_` → `.`, `__` → `_`).
pub fn from_env(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.filter_map(|(name, value)| {
        let key = name.strip_prefix(ENV_PREFIX)?;
        if key.is_empty() {
            return None;
        }
        let key = key
            .to_ascii_lowercase()
            .split("__")
            .map(|part| part.replace('_', "."))
            .collect::<Vec<_>>()
            .join("_");
        Some((key, value))
    })
    .collect()
}

/// `url` with the password replaced by `***` (every seed of a list), for `--print-config`
/// and error messages.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|part| {
            let Some(scheme_end) = part.find("://") else {
                return part.to_string();
            };
            let rest = &part[scheme_end + 3..];
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let Some(at) = rest[..authority_end].rfind('@') else {
                return part.to_string();
            };
            let userinfo = &rest[..at];
            let user = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_string(),
            };
            format!("{}{user}{}", &part[..scheme_end + 3], &rest[at..])
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Serializes `cluster.redis_url` with its password redacted (`--print-config`).
pub fn serialize_redacted_url<S: serde::Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_some(&redact_url(url)),
        None => serializer.serialize_none(),
    }
}
