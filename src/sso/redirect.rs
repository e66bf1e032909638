//! Where an agent app may receive its `gtc_` code (RFC 8252): a loopback
//! address on any port, or exactly one of the provider's registered
//! `app_redirect_uris`. Anything else is refused before any redirect, so the
//! gateway can never be used as an open redirector.

use super::SsoError;

/// Schemes an admin may never register: they run code or read local files.
const FORBIDDEN_SCHEMES: [&str; 4] = ["javascript", "data", "vbscript", "file"];

/// Checks one of an admin's `app_redirect_uris`: an absolute URI without a
/// fragment; https, http on loopback, or an app's private-use scheme
/// (`com.example.app:/callback`, RFC 8252 section 7.1).
pub fn check_registrable(raw: &str) -> Result<(), SsoError> {
    let bad = |why: &str| {
        SsoError::invalid(
            "app_redirect_uris",
            format!("'{raw}' in 'app_redirect_uris' {why}"),
        )
    };
    if raw.len() > 2048 || raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("must be at most 2048 characters without spaces."));
    }
    let url = url::Url::parse(raw).map_err(|_| bad("must be an absolute URI."))?;
    if url.fragment().is_some() {
        return Err(bad("must not have a fragment."));
    }
    let scheme = url.scheme();
    if FORBIDDEN_SCHEMES.contains(&scheme) {
        return Err(bad("uses a scheme that is never a redirect target."));
    }
    if scheme == "http" && !url.host().is_some_and(|h| is_loopback(&h)) {
        return Err(bad("must use https (or http on a loopback address)."));
    }
    if (scheme == "http" || scheme == "https") && url.host().is_none() {
        return Err(bad("must name a host."));
    }
    Ok(())
}

fn is_loopback(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => *ip == std::net::Ipv4Addr::LOCALHOST,
        url::Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// Checks the `redirect_uri` an app sent to `authorize` and returns it
/// unchanged (the code exchange compares the exact string).
pub fn check_app_redirect(raw: &str, registered: &[String]) -> Result<String, SsoError> {
    if registered.iter().any(|r| r == raw) {
        return Ok(raw.to_string());
    }
    let refuse = || {
        SsoError::InvalidRedirectUri(format!(
            "The redirect_uri '{}' is neither a loopback address (http://127.0.0.1:PORT/..., \
             http://[::1]:PORT/..., http://localhost:PORT/...) nor one of this provider's \
             app_redirect_uris.",
            raw.chars().take(300).collect::<String>()
        ))
    };
    if raw.len() > 2048 || raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse());
    }
    let url = url::Url::parse(raw).map_err(|_| refuse())?;
    let loopback = url.scheme() == "http"
        && url.host().is_some_and(|h| is_loopback(&h))
        && url.username().is_empty()
        && url.password().is_none()
        && url.fragment().is_none();
    if loopback {
        Ok(raw.to_string())
    } else {
        Err(refuse())
    }
}

/// `R?code=...&state=...`, keeping a query `R` already has.
pub fn with_code(redirect_uri: &str, code: &str, state: Option<&str>) -> Result<String, SsoError> {
    let mut url = url::Url::parse(redirect_uri)
        .map_err(|_| SsoError::Internal("stored redirect URI does not parse".into()))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("code", code);
        if let Some(s) = state {
            q.append_pair("state", s);
        }
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(uri: &str, registered: &[&str]) -> bool {
        let reg: Vec<String> = registered.iter().map(|s| s.to_string()).collect();
        check_app_redirect(uri, &reg).is_ok()
    }

    #[test]
    fn loopback_addresses_on_any_port_are_accepted() {
        assert!(ok("http://127.0.0.1:49152/callback", &[]));
        assert!(ok("http://127.0.0.1:1/", &[]));
        assert!(ok("http://[::1]:8765/cb", &[]));
        assert!(ok("http://localhost:3000/oauth/done?x=1", &[]));
        assert!(ok("http://127.0.0.1/cb", &[]));
    }

    #[test]
    fn other_hosts_and_schemes_are_refused_unless_registered_exactly() {
        for bad in [
            "http://evil.example.com/cb",
            "https://evil.example.com/cb",
            "https://127.0.0.1:443/cb",
            "http://127.0.0.2:80/cb",
            "http://localhost.evil.com:80/cb",
            "http://user@127.0.0.1:80/cb",
            "http://127.0.0.1:80/cb#frag",
            "javascript:alert(1)",
            "com.example.app:/cb",
            "//127.0.0.1:80/cb",
            "",
        ] {
            assert!(!ok(bad, &[]), "{bad}");
        }
        assert!(ok("com.example.app:/cb", &["com.example.app:/cb"]));
        assert!(ok(
            "https://app.example.com/cb",
            &["https://app.example.com/cb"]
        ));
        // Exact: not a prefix, not another path.
        assert!(!ok(
            "https://app.example.com/cb/x",
            &["https://app.example.com/cb"]
        ));
        assert!(!ok(
            "https://app.example.com/cb?x=1",
            &["https://app.example.com/cb"]
        ));
    }

    #[test]
    fn refusal_is_invalid_redirect_uri() {
        let e = check_app_redirect("https://evil.example.com", &[]).unwrap_err();
        assert_eq!(e.code(), "invalid_redirect_uri");
    }

    #[test]
    fn registrable_uris_exclude_scripts_plain_http_and_fragments() {
        assert!(check_registrable("https://app.example.com/cb").is_ok());
        assert!(check_registrable("com.example.app:/oauth2redirect").is_ok());
        assert!(check_registrable("http://127.0.0.1:7000/cb").is_ok());
        for bad in [
            "javascript:alert(1)",
            "data:text/html,x",
            "http://app.example.com/cb",
            "https://app.example.com/cb#x",
            "not a uri",
        ] {
            assert!(check_registrable(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn code_and_state_are_appended_to_an_existing_query() {
        assert_eq!(
            with_code("http://127.0.0.1:5000/cb?app=1", "gtc_x", Some("s t")).unwrap(),
            "http://127.0.0.1:5000/cb?app=1&code=gtc_x&state=s+t"
        );
        assert_eq!(
            with_code("com.example.app:/cb", "gtc_x", None).unwrap(),
            "com.example.app:/cb?code=gtc_x"
        );
    }
}
