//! SSO provider settings: what an admin sends (API or TOML), its checks, and
//! the public view (never the client secret).

use serde::{Deserialize, Deserializer, Serialize};

use super::SsoError;

pub const DEFAULT_SCOPES: [&str; 3] = ["openid", "email", "profile"];
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";
const MAX_LIST: usize = 100;

/// `POST /api/admin/sso` and `[[sso]]` in the TOML config.
#[derive(Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSsoProvider {
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
    #[serde(default)]
    pub admin_group: Option<String>,
    #[serde(default)]
    pub groups_claim: Option<String>,
    #[serde(default)]
    pub create_users: Option<bool>,
    #[serde(default)]
    pub app_redirect_uris: Option<Vec<String>>,
}

impl std::fmt::Debug for NewSsoProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSsoProvider")
            .field("name", &self.name)
            .field("issuer", &self.issuer)
            .field("client_secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// `PATCH /api/admin/sso/{name}`: every field optional; `admin_group: null` clears it.
#[derive(Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SsoProviderPatch {
    #[serde(default)]
    pub issuer: Option<String>,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
    #[serde(default, deserialize_with = "some_or_null")]
    #[schema(value_type = Option<String>)]
    pub admin_group: Option<Option<String>>,
    #[serde(default)]
    pub groups_claim: Option<String>,
    #[serde(default)]
    pub create_users: Option<bool>,
    #[serde(default)]
    pub app_redirect_uris: Option<Vec<String>>,
}

/// Tells "absent" (outer None, via `default`) from "null" (Some(None)).
fn some_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A checked provider, secret in the clear (in memory only).
#[derive(Clone, PartialEq, Eq)]
pub struct SsoProvider {
    pub name: String,
    pub display_name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    pub scopes: Vec<String>,
    pub allowed_domains: Vec<String>,
    pub admin_group: Option<String>,
    pub groups_claim: String,
    pub create_users: bool,
    pub app_redirect_uris: Vec<String>,
    /// Defined in the TOML config (re-applied at every start).
    pub from_config: bool,
}

impl std::fmt::Debug for SsoProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoProvider")
            .field("name", &self.name)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// What admins and the public list see: everything but the secret.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SsoProviderView {
    pub name: String,
    pub display_name: String,
    pub issuer: String,
    pub client_id: String,
    pub scopes: Vec<String>,
    pub allowed_domains: Vec<String>,
    pub admin_group: Option<String>,
    pub groups_claim: String,
    pub create_users: bool,
    pub app_redirect_uris: Vec<String>,
    /// The redirect URI to register at the provider.
    pub redirect_uri: String,
    pub source: &'static str,
}

impl SsoProvider {
    /// `public_url`: `GATEHOUSE_PUBLIC_URL` without a trailing slash.
    pub fn view(&self, public_url: &str) -> SsoProviderView {
        SsoProviderView {
            name: self.name.clone(),
            display_name: self.display_name.clone(),
            issuer: self.issuer.clone(),
            client_id: self.client_id.clone(),
            scopes: self.scopes.clone(),
            allowed_domains: self.allowed_domains.clone(),
            admin_group: self.admin_group.clone(),
            groups_claim: self.groups_claim.clone(),
            create_users: self.create_users,
            app_redirect_uris: self.app_redirect_uris.clone(),
            redirect_uri: callback_url(public_url, &self.name),
            source: if self.from_config { "config" } else { "api" },
        }
    }
}

/// The gateway's redirect URI for provider `name`.
pub fn callback_url(public_url: &str, name: &str) -> String {
    format!(
        "{}/api/auth/sso/{name}/callback",
        public_url.trim_end_matches('/')
    )
}

pub fn check_name(name: &str) -> Result<(), SsoError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
    if ok {
        Ok(())
    } else {
        Err(SsoError::invalid(
            "name",
            "'name' must be 1 to 64 of a-z, 0-9, _ and -.",
        ))
    }
}

fn is_loopback_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// The issuer as the provider will name it in `iss`: https (plain http only
/// on this machine, for development and tests), no query or fragment.
pub fn check_issuer(raw: &str) -> Result<String, SsoError> {
    let bad = |why: &str| SsoError::invalid("issuer", format!("'issuer' {why}"));
    let issuer = raw.trim();
    let url = url::Url::parse(issuer).map_err(|_| bad("must be an absolute URL."))?;
    let host = url.host().ok_or_else(|| bad("must name a host."))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback_host(&host) => {}
        "http" => {
            return Err(bad(
                "must use https (plain http is accepted only for a provider on this machine).",
            ))
        }
        _ => return Err(bad("must be an https URL.")),
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(bad(
            "must not have a query, a fragment or user information.",
        ));
    }
    if issuer.len() > 2048 {
        return Err(bad("must be at most 2048 characters."));
    }
    Ok(issuer.to_string())
}

fn check_text(param: &str, v: &str, max: usize) -> Result<String, SsoError> {
    let v = v.trim();
    if v.is_empty() || v.chars().count() > max || v.chars().any(char::is_control) {
        return Err(SsoError::invalid(
            param,
            format!("'{param}' must be 1 to {max} characters, without control characters."),
        ));
    }
    Ok(v.to_string())
}

/// A token without white space (scope names, claim names, client ids).
fn check_token(param: &str, v: &str, max: usize) -> Result<String, SsoError> {
    if v.is_empty() || v.len() > max || !v.bytes().all(|c| c.is_ascii_graphic()) {
        return Err(SsoError::invalid(
            param,
            format!("'{param}' must be 1 to {max} printable characters without spaces."),
        ));
    }
    Ok(v.to_string())
}

fn check_scopes(scopes: Option<&Vec<String>>) -> Result<Vec<String>, SsoError> {
    let Some(list) = scopes else {
        return Ok(DEFAULT_SCOPES.iter().map(|s| s.to_string()).collect());
    };
    if list.len() > 20 {
        return Err(SsoError::invalid("scopes", "'scopes' may list at most 20."));
    }
    let mut out: Vec<String> = Vec::new();
    for s in list {
        let s = check_token("scopes", s, 128)?;
        if s.contains('"') || s.contains('\\') {
            return Err(SsoError::invalid(
                "scopes",
                "A scope must not contain \" or \\.",
            ));
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    if !out.iter().any(|s| s == "openid") {
        return Err(SsoError::invalid(
            "scopes",
            "'scopes' must include openid (this is OpenID Connect).",
        ));
    }
    Ok(out)
}

fn check_domains(domains: Option<&Vec<String>>) -> Result<Vec<String>, SsoError> {
    let Some(list) = domains else {
        return Ok(Vec::new());
    };
    if list.len() > MAX_LIST {
        return Err(SsoError::invalid(
            "allowed_domains",
            format!("'allowed_domains' may list at most {MAX_LIST}."),
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for d in list {
        let d = d.trim().trim_start_matches('@').to_ascii_lowercase();
        let ok = !d.is_empty()
            && d.len() <= 253
            && d.contains('.')
            && d.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-')
            });
        if !ok {
            return Err(SsoError::invalid(
                "allowed_domains",
                format!("'{d}' in 'allowed_domains' is not a domain name like example.com."),
            ));
        }
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

fn check_app_redirect_uris(uris: Option<&Vec<String>>) -> Result<Vec<String>, SsoError> {
    let Some(list) = uris else {
        return Ok(Vec::new());
    };
    if list.len() > 20 {
        return Err(SsoError::invalid(
            "app_redirect_uris",
            "'app_redirect_uris' may list at most 20.",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for u in list {
        super::redirect::check_registrable(u)?;
        if !out.contains(u) {
            out.push(u.clone());
        }
    }
    Ok(out)
}

impl NewSsoProvider {
    pub fn validate(&self, from_config: bool) -> Result<SsoProvider, SsoError> {
        check_name(&self.name)?;
        let display_name = match &self.display_name {
            Some(d) => check_text("display_name", d, 100)?,
            None => self.name.clone(),
        };
        let client_secret = self.client_secret.trim();
        if client_secret.is_empty() || client_secret.len() > 4096 {
            return Err(SsoError::invalid(
                "client_secret",
                "'client_secret' must be 1 to 4096 characters.",
            ));
        }
        Ok(SsoProvider {
            name: self.name.clone(),
            display_name,
            issuer: check_issuer(&self.issuer)?,
            client_id: check_token("client_id", self.client_id.trim(), 255)?,
            client_secret: client_secret.to_string(),
            scopes: check_scopes(self.scopes.as_ref())?,
            allowed_domains: check_domains(self.allowed_domains.as_ref())?,
            admin_group: match &self.admin_group {
                Some(g) => Some(check_text("admin_group", g, 256)?),
                None => None,
            },
            groups_claim: match &self.groups_claim {
                Some(c) => check_token("groups_claim", c, 128)?,
                None => DEFAULT_GROUPS_CLAIM.to_string(),
            },
            create_users: self.create_users.unwrap_or(true),
            app_redirect_uris: check_app_redirect_uris(self.app_redirect_uris.as_ref())?,
            from_config,
        })
    }
}

impl SsoProviderPatch {
    /// The provider with the patch applied and checked. A changed issuer
    /// needs discovery again; the caller sees that in [`Self::changes_issuer`].
    pub fn apply(&self, old: &SsoProvider) -> Result<SsoProvider, SsoError> {
        let merged = NewSsoProvider {
            name: old.name.clone(),
            issuer: self.issuer.clone().unwrap_or_else(|| old.issuer.clone()),
            client_id: self
                .client_id
                .clone()
                .unwrap_or_else(|| old.client_id.clone()),
            client_secret: self
                .client_secret
                .clone()
                .unwrap_or_else(|| old.client_secret.clone()),
            display_name: Some(
                self.display_name
                    .clone()
                    .unwrap_or_else(|| old.display_name.clone()),
            ),
            scopes: Some(self.scopes.clone().unwrap_or_else(|| old.scopes.clone())),
            allowed_domains: Some(
                self.allowed_domains
                    .clone()
                    .unwrap_or_else(|| old.allowed_domains.clone()),
            ),
            admin_group: match &self.admin_group {
                Some(v) => v.clone(),
                None => old.admin_group.clone(),
            },
            groups_claim: Some(
                self.groups_claim
                    .clone()
                    .unwrap_or_else(|| old.groups_claim.clone()),
            ),
            create_users: Some(self.create_users.unwrap_or(old.create_users)),
            app_redirect_uris: Some(
                self.app_redirect_uris
                    .clone()
                    .unwrap_or_else(|| old.app_redirect_uris.clone()),
            ),
        };
        merged.validate(old.from_config)
    }

    pub fn changes_issuer(&self, old: &SsoProvider) -> bool {
        self.issuer
            .as_deref()
            .is_some_and(|i| i.trim() != old.issuer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(name: &str) -> NewSsoProvider {
        NewSsoProvider {
            name: name.to_string(),
            issuer: "https://login.example.com/realms/staff".to_string(),
            client_id: "gatehouse".to_string(),
            client_secret: "s3cret".to_string(),
            display_name: None,
            scopes: None,
            allowed_domains: None,
            admin_group: None,
            groups_claim: None,
            create_users: None,
            app_redirect_uris: None,
        }
    }

    fn param(e: SsoError) -> String {
        match e {
            SsoError::Invalid { param, .. } => param,
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_fill_in_scopes_groups_claim_display_name_and_create_users() {
        let p = new("keycloak").validate(false).unwrap();
        assert_eq!(p.scopes, vec!["openid", "email", "profile"]);
        assert_eq!(p.groups_claim, "groups");
        assert_eq!(p.display_name, "keycloak");
        assert!(p.create_users);
        assert!(p.allowed_domains.is_empty() && p.app_redirect_uris.is_empty());
        assert_eq!(p.admin_group, None);
    }

    #[test]
    fn names_outside_a_z_0_9_underscore_dash_or_over_64_are_refused() {
        for bad in ["", "Okta", "my sso", "a.b", "é", &"a".repeat(65)] {
            assert_eq!(
                param(new(bad).validate(false).unwrap_err()),
                "name",
                "{bad:?}"
            );
        }
        for good in ["okta", "entra-id", "google_ws", "a", &"a".repeat(64)] {
            assert!(new(good).validate(false).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn issuer_must_be_https_except_on_this_machine() {
        let mut p = new("x");
        p.issuer = "http://login.example.com".into();
        assert_eq!(param(p.clone().validate(false).unwrap_err()), "issuer");
        for ok in [
            "http://127.0.0.1:8080/realms/x",
            "http://localhost:9000",
            "http://[::1]:9000",
        ] {
            p.issuer = ok.into();
            assert!(p.clone().validate(false).is_ok(), "{ok}");
        }
        for bad in [
            "login.example.com",
            "ftp://x.org",
            "https://x.org/?a=b",
            "https://u:p@x.org",
        ] {
            p.issuer = bad.into();
            assert_eq!(
                param(p.clone().validate(false).unwrap_err()),
                "issuer",
                "{bad}"
            );
        }
    }

    #[test]
    fn scopes_must_include_openid_and_are_deduplicated() {
        let mut p = new("x");
        p.scopes = Some(vec!["email".into(), "profile".into()]);
        assert_eq!(param(p.clone().validate(false).unwrap_err()), "scopes");
        p.scopes = Some(vec!["openid".into(), "email".into(), "openid".into()]);
        assert_eq!(
            p.clone().validate(false).unwrap().scopes,
            vec!["openid", "email"]
        );
        p.scopes = Some(vec!["openid".into(), "two words".into()]);
        assert_eq!(param(p.validate(false).unwrap_err()), "scopes");
    }

    #[test]
    fn allowed_domains_are_lower_cased_and_must_be_domain_names() {
        let mut p = new("x");
        p.allowed_domains = Some(vec!["Example.COM".into(), "@corp.example.org".into()]);
        assert_eq!(
            p.clone().validate(false).unwrap().allowed_domains,
            vec!["example.com", "corp.example.org"]
        );
        for bad in ["localhost", "ex ample.com", "-x.com", "x..com", ""] {
            p.allowed_domains = Some(vec![bad.into()]);
            assert_eq!(
                param(p.clone().validate(false).unwrap_err()),
                "allowed_domains",
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_client_secret_or_client_id_is_refused() {
        let mut p = new("x");
        p.client_secret = "  ".into();
        assert_eq!(param(p.validate(false).unwrap_err()), "client_secret");
        let mut p = new("x");
        p.client_id = "".into();
        assert_eq!(param(p.validate(false).unwrap_err()), "client_id");
    }

    #[test]
    fn debug_output_never_shows_the_client_secret() {
        let p = new("x").validate(false).unwrap();
        assert!(!format!("{p:?}").contains("s3cret"));
        assert!(!format!("{:?}", new("x")).contains("s3cret"));
    }

    #[test]
    fn view_leaves_out_the_secret_and_names_the_callback() {
        let p = new("okta").validate(false).unwrap();
        let v = serde_json::to_value(p.view("https://gw.example.com/")).unwrap();
        assert!(v.get("client_secret").is_none());
        assert!(!v.to_string().contains("s3cret"));
        assert_eq!(
            v["redirect_uri"],
            "https://gw.example.com/api/auth/sso/okta/callback"
        );
    }

    #[test]
    fn patch_null_admin_group_clears_it_and_absent_fields_stay() {
        let mut n = new("x");
        n.admin_group = Some("gatehouse-admins".into());
        n.create_users = Some(false);
        let old = n.validate(false).unwrap();
        let patch: SsoProviderPatch = serde_json::from_str(r#"{"admin_group":null}"#).unwrap();
        let p = patch.apply(&old).unwrap();
        assert_eq!(p.admin_group, None);
        assert!(!p.create_users);
        assert_eq!(p.client_secret, "s3cret");
        let patch: SsoProviderPatch = serde_json::from_str(r#"{}"#).unwrap();
        assert_eq!(patch.apply(&old).unwrap(), old);
        assert!(!patch.changes_issuer(&old));
        let patch: SsoProviderPatch =
            serde_json::from_str(r#"{"issuer":"https://other.example.com"}"#).unwrap();
        assert!(patch.changes_issuer(&old));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<SsoProviderPatch, _> = serde_json::from_str(r#"{"issuer_url":"x"}"#);
        assert!(r.is_err());
    }
}
