//! The one-time `gtc_` codes an agent app exchanges for a login token. Here
//! the gateway is the authorization server, so the app's PKCE (S256) is
//! checked here; the S256 transform itself is the `openidconnect` library's.

use openidconnect::{PkceCodeChallenge, PkceCodeVerifier};

use super::SsoError;

/// A new code and the hash stored for it (the code itself is never stored).
pub fn new_code() -> (String, String) {
    let code = crate::auth::new_secret("gtc_");
    let hash = crate::auth::sha256_hex(&code);
    (code, hash)
}

pub fn hash(code: &str) -> String {
    crate::auth::sha256_hex(code)
}

/// RFC 7636: 43 to 128 of A-Z a-z 0-9 - . _ ~ (verifiers), and an S256
/// challenge is the 43-character base64url of a SHA-256.
fn unreserved(s: &str) -> bool {
    s.bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~'))
}

/// Checks an app's `code_challenge` and `code_challenge_method` at `authorize`.
pub fn check_challenge(challenge: Option<&str>, method: Option<&str>) -> Result<String, SsoError> {
    let Some(c) = challenge.filter(|c| !c.is_empty()) else {
        return Err(SsoError::bad_request(
            "code_challenge",
            "'code_challenge' is required with a redirect_uri (PKCE, S256).",
        ));
    };
    if method != Some("S256") {
        return Err(SsoError::bad_request(
            "code_challenge_method",
            "'code_challenge_method' must be S256.",
        ));
    }
    if c.len() != 43
        || !c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(SsoError::bad_request(
            "code_challenge",
            "'code_challenge' must be the base64url (no padding) SHA-256 of the code verifier: 43 characters.",
        ));
    }
    Ok(c.to_string())
}

/// Whether `verifier` is the one `challenge` was made from.
pub fn verifier_matches(verifier: &str, challenge: &str) -> bool {
    if verifier.len() < 43 || verifier.len() > 128 || !unreserved(verifier) {
        return false;
    }
    let computed =
        PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.to_string()));
    crate::auth::ct_eq(computed.as_str(), challenge)
}

/// A code as stored, taken (and so used up) by the exchange.
#[derive(Clone, Debug)]
pub struct IssuedCode {
    pub user_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub expires_at: i64,
}

/// The checks of `POST /api/auth/sso/token` once the code was taken.
pub fn check_exchange(
    taken: Option<IssuedCode>,
    verifier: &str,
    redirect_uri: &str,
    now_ms: i64,
) -> Result<String, SsoError> {
    let Some(code) = taken else {
        return Err(SsoError::InvalidGrant(
            "The code is unknown or was used already.".into(),
        ));
    };
    if now_ms >= code.expires_at {
        return Err(SsoError::InvalidGrant(
            "The code expired (codes last 60 seconds): sign in again.".into(),
        ));
    }
    if code.redirect_uri != redirect_uri {
        return Err(SsoError::InvalidGrant(
            "The redirect_uri is not the one the code was issued for.".into(),
        ));
    }
    if !verifier_matches(verifier, &code.code_challenge) {
        return Err(SsoError::InvalidGrant(
            "The code_verifier does not match the code_challenge.".into(),
        ));
    }
    Ok(code.user_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed independently: base64url(sha256(VERIFIER)) with Python's hashlib.
    const VERIFIER: &str = "dBjftJeZ4CVP-mJ92K9k0BhJHK3cFIwTLUdjfzxO-ko";
    const CHALLENGE: &str = "957n8CWd2KtbvkMJ3rX0j2TNnrOR2Ny376sU_eh_Ebg";

    fn issued(expires_at: i64) -> IssuedCode {
        IssuedCode {
            user_id: "u1".into(),
            redirect_uri: "http://127.0.0.1:5000/cb".into(),
            code_challenge: CHALLENGE.into(),
            expires_at,
        }
    }

    fn grant_error(r: Result<String, SsoError>) -> String {
        match r {
            Err(SsoError::InvalidGrant(m)) => m,
            other => panic!("expected invalid_grant, got {other:?}"),
        }
    }

    #[test]
    fn codes_are_prefixed_random_and_stored_only_as_hashes() {
        let (a, ha) = new_code();
        let (b, _) = new_code();
        assert!(a.starts_with("gtc_") && a.len() > 40);
        assert_ne!(a, b);
        assert_eq!(hash(&a), ha);
        assert!(!ha.contains(&a[4..]));
    }

    #[test]
    fn a_verifier_matches_only_its_own_s256_challenge() {
        assert!(verifier_matches(VERIFIER, CHALLENGE));
        assert!(!verifier_matches(&VERIFIER.replace('d', "e"), CHALLENGE));
        assert!(!verifier_matches("short", CHALLENGE));
        // Outside RFC 7636's alphabet or length: refused, never a panic in the library.
        assert!(!verifier_matches(&"a".repeat(129), CHALLENGE));
        assert!(!verifier_matches(&format!("{VERIFIER} "), CHALLENGE));
    }

    #[test]
    fn exchange_succeeds_with_matching_verifier_and_redirect_before_expiry() {
        let r = check_exchange(
            Some(issued(2000)),
            VERIFIER,
            "http://127.0.0.1:5000/cb",
            1000,
        );
        assert_eq!(r.unwrap(), "u1");
    }

    #[test]
    fn exchange_fails_as_invalid_grant_for_each_wrong_part() {
        assert!(grant_error(check_exchange(
            None,
            VERIFIER,
            "http://127.0.0.1:5000/cb",
            0
        ))
        .contains("used already"));
        assert!(grant_error(check_exchange(
            Some(issued(1000)),
            VERIFIER,
            "http://127.0.0.1:5000/cb",
            1000
        ))
        .contains("expired"));
        assert!(grant_error(check_exchange(
            Some(issued(2000)),
            VERIFIER,
            "http://127.0.0.1:5001/cb",
            1000
        ))
        .contains("redirect_uri"));
        assert!(grant_error(check_exchange(
            Some(issued(2000)),
            &"a".repeat(43),
            "http://127.0.0.1:5000/cb",
            1000
        ))
        .contains("code_verifier"));
    }

    #[test]
    fn challenge_must_be_s256_and_well_formed() {
        assert_eq!(
            check_challenge(Some(CHALLENGE), Some("S256")).unwrap(),
            CHALLENGE
        );
        assert!(check_challenge(None, Some("S256")).is_err());
        assert!(check_challenge(Some(CHALLENGE), Some("plain")).is_err());
        assert!(check_challenge(Some(CHALLENGE), None).is_err());
        assert!(check_challenge(Some("abc"), Some("S256")).is_err());
        assert!(check_challenge(Some(&CHALLENGE.replace('_', "+")), Some("S256")).is_err());
    }
}
