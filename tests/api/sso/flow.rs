//! The SSO use cases (`gatehouse::sso::Sso`) against a real OpenID Connect
//! provider (oidc-provider, tests/oidc) and a real database, without the HTTP
//! routes: the browser stops at the gateway's callback address and the test
//! hands the provider's answer to `Sso::callback` as the route will.

use crate::common;

use std::time::Duration;

use common::oidc::{pkce_pair, query_param, Browser, OidcProvider, CLIENT_ID, CLIENT_SECRET};
use gatehouse::config::Settings;
use gatehouse::secrets::Keyring;
use gatehouse::sso::{AppRequest, CallbackParams, NewSsoProvider, SignedIn, Sso, SsoError};
use gatehouse::store::Store;

const CALLBACK: &str = "http://127.0.0.1:1/api/auth/sso/corp/callback";

struct Env {
    store: Store,
    sso: Sso,
    idp: OidcProvider,
    _dir: Option<tempfile::TempDir>,
}

async fn env() -> Env {
    let (db, dir) = common::fresh_database().await;
    let store = Store::connect(&Settings::for_database(&db).db_options())
        .await
        .expect("database");
    store.migrate().await.expect("migrations");
    let idp = OidcProvider::start();
    idp.register(CLIENT_ID, CLIENT_SECRET, &[CALLBACK]).await;
    let sso = Sso::new(
        Keyring::new("test-gateway-secret-of-at-least-32-characters"),
        Duration::from_secs(10),
    )
    .expect("sso");
    Env {
        store,
        sso,
        idp,
        _dir: dir,
    }
}

fn provider(issuer: &str, f: impl FnOnce(&mut NewSsoProvider)) -> NewSsoProvider {
    let mut p = NewSsoProvider {
        name: "corp".into(),
        issuer: issuer.into(),
        client_id: CLIENT_ID.into(),
        client_secret: CLIENT_SECRET.into(),
        display_name: Some("Corp".into()),
        scopes: Some(vec!["openid".into(), "email".into(), "groups".into()]),
        allowed_domains: None,
        admin_group: None,
        groups_claim: None,
        create_users: None,
        app_redirect_uris: None,
    };
    f(&mut p);
    p
}

impl Env {
    async fn add(&self, f: impl FnOnce(&mut NewSsoProvider)) {
        self.sso
            .add(&self.store, &provider(&self.idp.issuer, f))
            .await
            .expect("provider added");
    }

    /// One sign-in through the provider as `email`; the provider's answer at the callback.
    async fn sign_in(&self, app: Option<&AppRequest>) -> Result<SignedIn, SsoError> {
        let url = self.sso.start(&self.store, "corp", CALLBACK, app).await?;
        let stop = Browser::new().walk(&url, Some(CALLBACK)).await;
        assert!(stop.url.starts_with(CALLBACK), "ended at {stop:?}");
        let params = CallbackParams {
            state: query_param(&stop.url, "state"),
            code: query_param(&stop.url, "code"),
            error: query_param(&stop.url, "error"),
            error_description: query_param(&stop.url, "error_description"),
        };
        self.sso
            .callback(&self.store, "corp", CALLBACK, &params)
            .await
    }
}

fn denial(r: Result<SignedIn, SsoError>) -> String {
    match r {
        Err(SsoError::Denied(m)) => m,
        other => panic!("expected sso_denied, got {other:?}"),
    }
}

#[tokio::test]
async fn first_sign_in_creates_a_password_less_user_from_userinfo_and_the_next_finds_it() {
    let e = env().await;
    e.add(|_| {}).await;
    e.idp.next_user("s1", "Ann@Example.com", true, &[]).await;
    let first = e.sign_in(None).await.expect("signed in");
    assert!(first.created);
    assert_eq!(first.user.email, "ann@example.com");
    assert_eq!(first.user.password_hash, "");
    assert!(first.app_redirect.is_none());
    // oidc-provider keeps e-mail out of the ID token: it came from userinfo.
    assert_eq!(e.idp.stats().await["userinfo_calls"], 1);

    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    let again = e.sign_in(None).await.expect("signed in again");
    assert!(!again.created);
    assert_eq!(again.user.id, first.user.id);
}

#[tokio::test]
async fn claims_in_the_id_token_need_no_userinfo_call() {
    let e = env().await;
    e.idp.claims_in_id_token(true).await;
    e.add(|p| p.admin_group = Some("gh-admins".into())).await;
    e.idp
        .next_user("s1", "ann@example.com", true, &["gh-admins"])
        .await;
    let s = e.sign_in(None).await.expect("signed in");
    assert!(s.user.admin());
    assert_eq!(e.idp.stats().await["userinfo_calls"], 0);
}

#[tokio::test]
async fn app_sign_in_yields_a_code_that_works_once_with_its_verifier_and_redirect_uri() {
    let e = env().await;
    e.add(|_| {}).await;
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    let (verifier, challenge) = pkce_pair();
    let app = AppRequest {
        redirect_uri: "http://127.0.0.1:43210/done".into(),
        state: Some("app-state-1".into()),
        code_challenge: Some(challenge),
        code_challenge_method: Some("S256".into()),
    };
    let s = e.sign_in(Some(&app)).await.expect("signed in");
    let back = s.app_redirect.expect("redirect to the app");
    assert!(
        back.starts_with("http://127.0.0.1:43210/done?code=gtc_"),
        "{back}"
    );
    assert_eq!(query_param(&back, "state").as_deref(), Some("app-state-1"));
    let code = query_param(&back, "code").expect("code");

    let user = e
        .sso
        .exchange(&e.store, &code, &verifier, "http://127.0.0.1:43210/done")
        .await
        .expect("exchanged");
    assert_eq!(user.id, s.user.id);
    let again = e
        .sso
        .exchange(&e.store, &code, &verifier, "http://127.0.0.1:43210/done")
        .await;
    assert!(matches!(again, Err(SsoError::InvalidGrant(_))), "{again:?}");
}

#[tokio::test]
async fn wrong_verifier_or_redirect_uri_is_invalid_grant_and_uses_the_code_up() {
    let e = env().await;
    e.add(|_| {}).await;
    for wrong in ["verifier", "redirect"] {
        e.idp.next_user("s1", "ann@example.com", true, &[]).await;
        let (verifier, challenge) = pkce_pair();
        let app = AppRequest {
            redirect_uri: "http://[::1]:5000/cb".into(),
            state: None,
            code_challenge: Some(challenge),
            code_challenge_method: Some("S256".into()),
        };
        let back = e.sign_in(Some(&app)).await.unwrap().app_redirect.unwrap();
        let code = query_param(&back, "code").unwrap();
        let (other_verifier, _) = pkce_pair();
        let (v, r) = match wrong {
            "verifier" => (other_verifier.as_str(), "http://[::1]:5000/cb"),
            _ => (verifier.as_str(), "http://[::1]:5001/cb"),
        };
        let err = e.sso.exchange(&e.store, &code, v, r).await.unwrap_err();
        assert_eq!(err.code(), "invalid_grant", "{wrong}: {err}");
        let after = e
            .sso
            .exchange(&e.store, &code, &verifier, "http://[::1]:5000/cb")
            .await
            .unwrap_err();
        assert_eq!(after.code(), "invalid_grant");
    }
}

#[tokio::test]
async fn an_unacceptable_app_redirect_uri_is_refused_before_anything_is_stored() {
    let e = env().await;
    e.add(|_| {}).await;
    let (_, challenge) = pkce_pair();
    let app = AppRequest {
        redirect_uri: "https://evil.example.com/steal".into(),
        state: None,
        code_challenge: Some(challenge),
        code_challenge_method: Some("S256".into()),
    };
    let err = e
        .sso
        .start(&e.store, "corp", CALLBACK, Some(&app))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_redirect_uri");
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sso_states")
        .fetch_one(&e.store.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_forged_or_replayed_state_is_denied() {
    let e = env().await;
    e.add(|_| {}).await;
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    let url = e.sso.start(&e.store, "corp", CALLBACK, None).await.unwrap();
    let stop = Browser::new().walk(&url, Some(CALLBACK)).await;
    let code = query_param(&stop.url, "code");
    let forged = CallbackParams {
        state: Some("forged-state".into()),
        code: code.clone(),
        ..Default::default()
    };
    let m = denial(e.sso.callback(&e.store, "corp", CALLBACK, &forged).await);
    assert!(m.contains("unknown"), "{m}");
    let real = CallbackParams {
        state: query_param(&stop.url, "state"),
        code,
        ..Default::default()
    };
    e.sso
        .callback(&e.store, "corp", CALLBACK, &real)
        .await
        .expect("the real state works");
    denial(e.sso.callback(&e.store, "corp", CALLBACK, &real).await);
}

#[tokio::test]
async fn tampered_id_tokens_are_denied_with_the_reason() {
    let e = env().await;
    e.add(|_| {}).await;
    for (mode, expected) in [
        ("wrong_key", "signature"),
        ("wrong_audience", "another client"),
        ("expired", "expired"),
        ("wrong_nonce", "nonce"),
        ("hs256", "signature"),
    ] {
        e.idp.next_user("s1", "ann@example.com", true, &[]).await;
        e.idp.misbehave(mode).await;
        let m = denial(e.sign_in(None).await);
        assert!(m.contains(expected), "{mode}: {m}");
    }
    let users = e.store.list_users().await.unwrap();
    assert!(users.is_empty(), "nothing is created: {users:?}");
}

#[tokio::test]
async fn an_error_from_the_provider_is_denied_with_its_description() {
    let e = env().await;
    e.add(|_| {}).await;
    e.idp
        .deny_next("access_denied", "The user pressed cancel")
        .await;
    let m = denial(e.sign_in(None).await);
    assert!(
        m.contains("access_denied") && m.contains("pressed cancel"),
        "{m}"
    );
}

#[tokio::test]
async fn rotated_provider_keys_are_fetched_again_on_the_unknown_kid() {
    let e = env().await;
    e.add(|_| {}).await;
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    e.sign_in(None).await.expect("first sign-in");
    let fetches = e.idp.stats().await["jwks_fetches"].as_i64().unwrap();
    e.idp.rotate_keys().await;
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    e.sign_in(None).await.expect("sign-in after rotation");
    let after = e.idp.stats().await["jwks_fetches"].as_i64().unwrap();
    assert_eq!(after, fetches + 1, "one fetch of the new keys");
    // Known now: no further fetch.
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    e.sign_in(None).await.expect("third sign-in");
    assert_eq!(e.idp.stats().await["jwks_fetches"].as_i64().unwrap(), after);
}

#[tokio::test]
async fn the_decision_rules_apply_to_real_provider_answers() {
    let e = env().await;
    e.add(|p| {
        p.allowed_domains = Some(vec!["example.com".into()]);
        p.admin_group = Some("gh-admins".into());
    })
    .await;
    e.idp.next_user("s1", "ann@example.com", false, &[]).await;
    assert!(denial(e.sign_in(None).await).contains("not verified"));
    e.idp.next_user("s2", "eve@evil.org", true, &[]).await;
    assert!(denial(e.sign_in(None).await).contains("evil.org"));

    e.idp
        .next_user("s1", "ann@example.com", true, &["gh-admins"])
        .await;
    let s = e.sign_in(None).await.unwrap();
    assert!(s.user.admin(), "granted by the group");
    e.idp
        .next_user("s1", "ann@example.com", true, &["staff"])
        .await;
    let s = e.sign_in(None).await.unwrap();
    assert!(!s.user.admin(), "removed with the group");

    e.store
        .update_user(&s.user.id, Some(false), None, None)
        .await
        .unwrap();
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    assert!(denial(e.sign_in(None).await).contains("disabled"));
}

#[tokio::test]
async fn without_create_users_only_existing_users_sign_in() {
    let e = env().await;
    e.add(|p| p.create_users = Some(false)).await;
    e.idp.next_user("s1", "ann@example.com", true, &[]).await;
    assert!(denial(e.sign_in(None).await).contains("does not create accounts"));
    assert!(e.store.list_users().await.unwrap().is_empty());
    e.store
        .create_user("ann@example.com", "x", false)
        .await
        .unwrap();
    e.idp.next_user("s1", "ANN@example.com", true, &[]).await;
    assert!(!e.sign_in(None).await.unwrap().created);
}

#[tokio::test]
async fn adding_a_provider_reads_discovery_and_refuses_unreachable_or_foreign_issuers() {
    let e = env().await;
    let port = common::procs::free_port();
    let err = e
        .sso
        .add(
            &e.store,
            &provider(&format!("http://127.0.0.1:{port}"), |_| {}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "sso_discovery_failed", "{err}");
    // The document names another issuer than the one given.
    let err = e
        .sso
        .add(
            &e.store,
            &provider(&e.idp.issuer.replace("127.0.0.1", "localhost"), |_| {}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "sso_discovery_failed", "{err}");
    assert!(e.sso.list(&e.store).await.unwrap().is_empty());

    e.add(|_| {}).await;
    let dup = e
        .sso
        .add(&e.store, &provider(&e.idp.issuer, |_| {}))
        .await
        .unwrap_err();
    assert_eq!(dup.code(), "sso_provider_exists");
}

#[tokio::test]
async fn the_client_secret_is_stored_sealed() {
    let e = env().await;
    e.add(|_| {}).await;
    let sealed: String =
        sqlx::query_scalar("SELECT client_secret_sealed FROM sso_providers WHERE name = 'corp'")
            .fetch_one(&e.store.pool)
            .await
            .unwrap();
    assert!(!sealed.contains(CLIENT_SECRET));
    let p = e.sso.get(&e.store, "corp").await.unwrap();
    assert_eq!(p.client_secret, CLIENT_SECRET);
    let other = Sso::new(
        Keyring::new("another-gateway-secret-of-32-characters!"),
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(other.get(&e.store, "corp").await.is_err());
}
