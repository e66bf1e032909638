//! Who a verified identity becomes: the rules of the contract, as a pure
//! function so each is tested on its own. Nothing here touches the database.

use super::{SsoError, SsoProvider};

/// What the provider said about the person, after the ID token (and, where
/// it lacked something, userinfo) was verified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: Option<bool>,
    /// The `groups_claim` claim; None when the provider sent none.
    pub groups: Option<Vec<String>>,
}

/// The matching user as the store has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownUser {
    pub id: String,
    pub is_active: bool,
    pub is_admin: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create a user with this e-mail (no password).
    Create { email: String, is_admin: bool },
    /// Sign the user in; `set_admin` is Some when `admin_group` decides `is_admin`.
    SignIn {
        user_id: String,
        set_admin: Option<bool>,
    },
}

/// The e-mail as users are stored: trimmed and lower-cased, so the match is
/// case-insensitive.
pub fn normalize_email(raw: &str) -> Option<String> {
    let e = raw.trim().to_lowercase();
    let valid = e.len() <= 254
        && !e.chars().any(|c| c.is_whitespace() || c.is_control())
        && matches!(e.split_once('@'), Some((l, d)) if !l.is_empty() && d.contains('.')
            && !d.starts_with('.') && !d.ends_with('.') && !d.contains('@'));
    valid.then_some(e)
}

/// The e-mail the user will be matched by, after the checks that need no user.
pub fn checked_email(p: &SsoProvider, id: &Identity) -> Result<String, SsoError> {
    let Some(raw) = id.email.as_deref() else {
        return Err(SsoError::Denied(format!(
            "The identity provider '{}' did not send an e-mail address (ask for the email scope).",
            p.display_name
        )));
    };
    let Some(email) = normalize_email(raw) else {
        return Err(SsoError::Denied(format!(
            "The identity provider '{}' sent '{}', which is not an e-mail address.",
            p.display_name,
            raw.chars().take(100).collect::<String>()
        )));
    };
    if id.email_verified != Some(true) {
        return Err(SsoError::Denied(format!(
            "The identity provider '{}' has not verified the e-mail address {email}.",
            p.display_name
        )));
    }
    if !p.allowed_domains.is_empty() {
        let domain = email.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
        if !p.allowed_domains.iter().any(|d| d == domain) {
            return Err(SsoError::Denied(format!(
                "E-mail addresses at {domain} may not sign in with '{}'.",
                p.display_name
            )));
        }
    }
    Ok(email)
}

/// Whether the groups make the user an admin; None when `admin_group` is unset.
pub fn admin_by_group(p: &SsoProvider, id: &Identity) -> Option<bool> {
    let group = p.admin_group.as_ref()?;
    Some(
        id.groups
            .as_ref()
            .is_some_and(|gs| gs.iter().any(|g| g == group)),
    )
}

/// The contract's decision for a verified identity and the user found by its
/// e-mail (if any).
pub fn decide(
    p: &SsoProvider,
    id: &Identity,
    existing: Option<&KnownUser>,
) -> Result<Decision, SsoError> {
    let email = checked_email(p, id)?;
    let admin = admin_by_group(p, id);
    match existing {
        Some(u) if !u.is_active => Err(SsoError::Denied(format!(
            "The account {email} is disabled."
        ))),
        Some(u) => Ok(Decision::SignIn {
            user_id: u.id.clone(),
            set_admin: admin.filter(|a| *a != u.is_admin),
        }),
        None if !p.create_users => Err(SsoError::Denied(format!(
            "There is no account for {email}, and '{}' does not create accounts: ask an admin to add you.",
            p.display_name
        ))),
        None => Ok(Decision::Create {
            email,
            is_admin: admin.unwrap_or(false),
        }),
    }
}

/// Reads a groups claim: a list of strings, or one string.
pub fn groups_from_claim(v: &serde_json::Value) -> Option<Vec<String>> {
    match v {
        serde_json::Value::Array(items) => Some(
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect(),
        ),
        serde_json::Value::String(s) => Some(vec![s.clone()]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sso::NewSsoProvider;

    fn provider(f: impl FnOnce(&mut NewSsoProvider)) -> SsoProvider {
        let mut n = NewSsoProvider {
            name: "corp".into(),
            issuer: "https://login.example.com".into(),
            client_id: "gh".into(),
            client_secret: "x".into(),
            display_name: Some("Corp SSO".into()),
            scopes: None,
            allowed_domains: None,
            admin_group: None,
            groups_claim: None,
            create_users: None,
            app_redirect_uris: None,
        };
        f(&mut n);
        n.validate(false).unwrap()
    }

    fn id(email: &str, verified: Option<bool>, groups: Option<&[&str]>) -> Identity {
        Identity {
            subject: "sub-1".into(),
            email: Some(email.into()),
            email_verified: verified,
            groups: groups.map(|g| g.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn user(active: bool, admin: bool) -> KnownUser {
        KnownUser {
            id: "u1".into(),
            is_active: active,
            is_admin: admin,
        }
    }

    fn denied(r: Result<Decision, SsoError>) -> String {
        match r {
            Err(SsoError::Denied(m)) => m,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn a_new_verified_email_creates_a_user_with_the_lower_cased_address() {
        let p = provider(|_| {});
        assert_eq!(
            decide(&p, &id(" Ann@Example.COM ", Some(true), None), None).unwrap(),
            Decision::Create {
                email: "ann@example.com".into(),
                is_admin: false
            }
        );
    }

    #[test]
    fn unverified_or_unknown_verification_is_denied_naming_the_address() {
        let p = provider(|_| {});
        for v in [Some(false), None] {
            let m = denied(decide(&p, &id("ann@example.com", v, None), None));
            assert!(
                m.contains("not verified") && m.contains("ann@example.com"),
                "{m}"
            );
        }
    }

    #[test]
    fn a_missing_email_is_denied() {
        let p = provider(|_| {});
        let mut i = id("x@y.org", Some(true), None);
        i.email = None;
        assert!(denied(decide(&p, &i, None)).contains("did not send an e-mail"));
        i.email = Some("not-an-address".into());
        assert!(denied(decide(&p, &i, None)).contains("not an e-mail address"));
    }

    #[test]
    fn domains_outside_allowed_domains_are_denied_even_for_existing_users() {
        let p = provider(|n| n.allowed_domains = Some(vec!["example.com".into()]));
        let m = denied(decide(
            &p,
            &id("eve@evil.org", Some(true), None),
            Some(&user(true, false)),
        ));
        assert!(m.contains("evil.org"), "{m}");
        // Sub-domains are other domains.
        denied(decide(&p, &id("eve@x.example.com", Some(true), None), None));
        assert!(decide(&p, &id("ann@EXAMPLE.com", Some(true), None), None).is_ok());
    }

    #[test]
    fn without_create_users_an_unknown_email_is_denied_and_a_known_one_signs_in() {
        let p = provider(|n| n.create_users = Some(false));
        let m = denied(decide(&p, &id("ann@example.com", Some(true), None), None));
        assert!(m.contains("does not create accounts"), "{m}");
        assert_eq!(
            decide(
                &p,
                &id("ann@example.com", Some(true), None),
                Some(&user(true, false))
            )
            .unwrap(),
            Decision::SignIn {
                user_id: "u1".into(),
                set_admin: None
            }
        );
    }

    #[test]
    fn a_disabled_user_is_denied() {
        let p = provider(|_| {});
        let m = denied(decide(
            &p,
            &id("ann@example.com", Some(true), None),
            Some(&user(false, false)),
        ));
        assert!(m.contains("disabled"), "{m}");
    }

    #[test]
    fn admin_follows_the_group_at_every_login_when_admin_group_is_set() {
        let p = provider(|n| n.admin_group = Some("gh-admins".into()));
        let i_in = id("ann@example.com", Some(true), Some(&["staff", "gh-admins"]));
        let i_out = id("ann@example.com", Some(true), Some(&["staff"]));
        let i_none = id("ann@example.com", Some(true), None);
        assert_eq!(
            decide(&p, &i_in, None).unwrap(),
            Decision::Create {
                email: "ann@example.com".into(),
                is_admin: true
            }
        );
        let grant = decide(&p, &i_in, Some(&user(true, false))).unwrap();
        assert_eq!(
            grant,
            Decision::SignIn {
                user_id: "u1".into(),
                set_admin: Some(true)
            }
        );
        for removed in [&i_out, &i_none] {
            assert_eq!(
                decide(&p, removed, Some(&user(true, true))).unwrap(),
                Decision::SignIn {
                    user_id: "u1".into(),
                    set_admin: Some(false)
                }
            );
        }
        // Already right: nothing to change.
        assert_eq!(
            decide(&p, &i_in, Some(&user(true, true))).unwrap(),
            Decision::SignIn {
                user_id: "u1".into(),
                set_admin: None
            }
        );
    }

    #[test]
    fn without_admin_group_admin_rights_are_left_alone() {
        let p = provider(|_| {});
        let i = id("ann@example.com", Some(true), Some(&["gh-admins"]));
        assert_eq!(
            decide(&p, &i, Some(&user(true, true))).unwrap(),
            Decision::SignIn {
                user_id: "u1".into(),
                set_admin: None
            }
        );
        assert_eq!(
            decide(&p, &i, None).unwrap(),
            Decision::Create {
                email: "ann@example.com".into(),
                is_admin: false
            }
        );
    }

    #[test]
    fn groups_claim_may_be_a_list_or_one_string() {
        assert_eq!(
            groups_from_claim(&serde_json::json!(["a", "b", 3])),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(
            groups_from_claim(&serde_json::json!("a")),
            Some(vec!["a".to_string()])
        );
        assert_eq!(groups_from_claim(&serde_json::json!({"a": 1})), None);
    }
}
