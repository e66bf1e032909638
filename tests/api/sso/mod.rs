//! Single sign-on end to end: a real gateway, a real OpenID Connect provider
//! (oidc-provider, tests/oidc) on 127.0.0.1, and a cookie-keeping client
//! walking the browser's redirects. Covers the admin API, the agent-app flow
//! (RFC 8252) ending in an agent sign-in, the browser flow, every refusal the
//! contract names, and provider key rotation.

mod flow;

use crate::common;

use common::oidc::{pkce_pair, query_param, Browser, OidcProvider, Stop, CLIENT_ID, CLIENT_SECRET};
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const APP_REDIRECT: &str = "http://127.0.0.1:53682/callback";
const AGENT: &str = "desk@corp";

struct Env {
    app: TestApp,
    idp: OidcProvider,
    admin: String,
}

fn callback_of(app: &TestApp, name: &str) -> String {
    format!("{}/api/auth/sso/{name}/callback", app.url)
}

/// A gateway, a provider with our callback registered, and provider `corp`
/// added through the admin API with `extra` settings.
async fn env(extra: Value) -> Env {
    let app = spawn_app().await;
    let idp = OidcProvider::start();
    idp.register(CLIENT_ID, CLIENT_SECRET, &[&callback_of(&app, "corp")])
        .await;
    let admin = app.admin_token().await;
    let mut body = json!({
        "name": "corp", "display_name": "Corp SSO", "issuer": idp.issuer,
        "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
        "scopes": ["openid", "email", "profile", "groups"],
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    let r = app.post("/api/admin/sso", &admin, &body).await;
    assert_eq!(r.status(), StatusCode::CREATED, "provider added");
    Env { app, idp, admin }
}

impl Env {
    /// An app's sign-in: authorize with a loopback redirect URI, through the
    /// provider, back to the app. Returns (where the browser was sent, verifier).
    async fn app_sign_in(&self, email: &str, groups: &[&str]) -> (Stop, String) {
        self.idp.next_user(email, email, true, groups).await;
        let (verifier, challenge) = pkce_pair();
        let url = format!(
            "{}?redirect_uri={}&state=app-state&code_challenge={challenge}&code_challenge_method=S256",
            self.app.u("/api/auth/sso/corp/authorize"),
            urlencode(APP_REDIRECT)
        );
        (
            Browser::new().walk(&url, Some(APP_REDIRECT)).await,
            verifier,
        )
    }

    /// The browser flow (no redirect_uri), ending on the gateway's page.
    async fn browser_sign_in(&self) -> Stop {
        Browser::new()
            .walk(&self.app.u("/api/auth/sso/corp/authorize"), None)
            .await
    }

    async fn exchange(&self, code: &str, verifier: &str, redirect_uri: &str) -> reqwest::Response {
        self.app
            .client
            .post(self.app.u("/api/auth/sso/token"))
            .json(&json!({"code": code, "code_verifier": verifier, "redirect_uri": redirect_uri}))
            .send()
            .await
            .expect("token request")
    }

    /// A whole app sign-in ending in the login token.
    async fn login_token(&self, email: &str, groups: &[&str]) -> String {
        let (stop, verifier) = self.app_sign_in(email, groups).await;
        let code = query_param(&stop.url, "code").unwrap_or_else(|| panic!("no code: {stop:?}"));
        let r = self.exchange(&code, &verifier, APP_REDIRECT).await;
        assert_eq!(r.status(), StatusCode::OK);
        let v: Value = r.json().await.expect("json");
        v["access_token"].as_str().expect("token").to_string()
    }

    async fn me(&self, token: &str) -> Value {
        let r = self.app.get("/api/users/me", token).await;
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.expect("json")
    }
}

fn urlencode(s: &str) -> String {
    url_encode_component(s)
}

fn url_encode_component(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The denial a browser sees: a 403 HTML page naming the reason.
fn assert_denied_page(stop: &Stop, reason: &str) {
    assert_eq!(stop.status, StatusCode::FORBIDDEN, "{stop:?}");
    assert!(stop.content_type.starts_with("text/html"), "{stop:?}");
    assert!(stop.body.contains("sso_denied"), "{}", stop.body);
    assert!(
        stop.body.to_lowercase().contains(&reason.to_lowercase()),
        "expected {reason:?} in {}",
        stop.body
    );
}

#[tokio::test]
async fn the_app_flow_ends_in_an_agent_sign_in() {
    let e = env(json!({})).await;
    e.app
        .add_model("openai", "http://127.0.0.1:9/v1", "chat-1", "chat", "up")
        .await;
    let r = e
        .app
        .post(
            "/api/admin/agents",
            &e.admin,
            &json!({"address": AGENT, "name": "Desk", "model": "chat-1"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);

    // Apps find the provider in the public list.
    let list: Value = e
        .app
        .client
        .get(e.app.u("/api/auth/sso"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list, json!([{"name": "corp", "display_name": "Corp SSO"}]));

    let (stop, verifier) = e.app_sign_in("ann@corp.example", &[]).await;
    assert!(
        stop.url.starts_with(&format!("{APP_REDIRECT}?code=gtc_")),
        "{stop:?}"
    );
    assert_eq!(
        query_param(&stop.url, "state").as_deref(),
        Some("app-state")
    );
    let code = query_param(&stop.url, "code").unwrap();

    // Form-encoded, as OAuth libraries send it.
    let r = e
        .app
        .client
        .post(e.app.u("/api/auth/sso/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("code_verifier", verifier.as_str()),
            ("redirect_uri", APP_REDIRECT),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let login: Value = r.json().await.unwrap();
    assert_eq!(login["token_type"], "bearer");
    assert!(login["expires_in"].as_i64().unwrap() > 0);
    let token = login["access_token"].as_str().unwrap();
    assert_eq!(e.me(token).await["email"], "ann@corp.example");

    let r = e
        .app
        .post(
            "/api/agent-tokens",
            token,
            &json!({"agent": AGENT, "device_label": "Ann's laptop"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let signed: Value = r.json().await.unwrap();
    assert!(signed["refresh_token"]
        .as_str()
        .unwrap()
        .starts_with("gtr_"));
    let r = e
        .app
        .get(
            &format!("/v1/agents/{AGENT}/profile"),
            signed["access_token"].as_str().unwrap(),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let profile: Value = r.json().await.unwrap();
    assert_eq!(profile["user"]["email"], "ann@corp.example");

    // The code worked once.
    let (status, code_name) = api_code(e.exchange(&code, &verifier, APP_REDIRECT).await).await;
    assert_eq!(
        (status, code_name.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_grant")
    );
}

#[tokio::test]
async fn a_wrong_verifier_or_redirect_uri_is_invalid_grant() {
    let e = env(json!({})).await;
    let (stop, verifier) = e.app_sign_in("ann@corp.example", &[]).await;
    let code = query_param(&stop.url, "code").unwrap();
    let (other, _) = pkce_pair();
    let (status, c) = api_code(e.exchange(&code, &other, APP_REDIRECT).await).await;
    assert_eq!(
        (status, c.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_grant")
    );

    let (stop, verifier2) = e.app_sign_in("ann@corp.example", &[]).await;
    let code2 = query_param(&stop.url, "code").unwrap();
    let (status, c) = api_code(
        e.exchange(&code2, &verifier2, "http://127.0.0.1:53683/callback")
            .await,
    )
    .await;
    assert_eq!(
        (status, c.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_grant")
    );
    // A refused attempt used the code up: the right parts no longer work either.
    let (_, c) = api_code(e.exchange(&code2, &verifier2, APP_REDIRECT).await).await;
    assert_eq!(c, "invalid_grant");
    let _ = verifier;

    let r = e
        .app
        .client
        .post(e.app.u("/api/auth/sso/token"))
        .json(&json!({"code": "gtc_x", "redirect_uri": APP_REDIRECT}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
}

#[tokio::test]
async fn an_unacceptable_redirect_uri_gets_400_and_no_redirect() {
    let e = env(json!({"app_redirect_uris": ["com.corp.desk:/oauth"]})).await;
    let (_, challenge) = pkce_pair();
    let authorize = |r: &str, extra: &str| {
        format!(
            "{}?redirect_uri={}&code_challenge={challenge}{extra}",
            e.app.u("/api/auth/sso/corp/authorize"),
            url_encode_component(r)
        )
    };
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for bad in [
        "https://evil.example.com/cb",
        "http://evil.example.com:8080/cb",
        "com.corp.desk:/other",
    ] {
        let r = plain
            .get(authorize(bad, "&code_challenge_method=S256"))
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("location").is_none(), "{bad}");
        assert_eq!(
            api_code(r).await,
            (StatusCode::BAD_REQUEST, "invalid_redirect_uri".into()),
            "{bad}"
        );
    }
    // A browser gets the same refusal as a page, still without a redirect.
    let r = plain
        .get(authorize(
            "https://evil.example.com/cb",
            "&code_challenge_method=S256",
        ))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.headers().get("location").is_none());
    assert!(r.text().await.unwrap().contains("invalid_redirect_uri"));

    // The registered app URI and loopback addresses are accepted.
    for good in [
        "com.corp.desk:/oauth",
        "http://[::1]:4000/cb",
        "http://localhost:4000/cb",
    ] {
        let r = plain
            .get(authorize(good, "&code_challenge_method=S256"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FOUND, "{good}");
        let loc = r.headers()["location"].to_str().unwrap().to_string();
        assert!(loc.starts_with(&e.idp.issuer), "{loc}");
        assert_eq!(
            query_param(&loc, "code_challenge_method").as_deref(),
            Some("S256")
        );
        assert!(query_param(&loc, "nonce").is_some() && query_param(&loc, "state").is_some());
    }
    // PKCE is required for apps.
    let r = plain
        .get(format!(
            "{}?redirect_uri={}",
            e.app.u("/api/auth/sso/corp/authorize"),
            url_encode_component(APP_REDIRECT)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let r = plain
        .get(authorize(APP_REDIRECT, "&code_challenge_method=plain"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    // Unknown provider.
    let r = plain
        .get(e.app.u("/api/auth/sso/nope/authorize"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::NOT_FOUND, "sso_provider_not_found".into())
    );
}

#[tokio::test]
async fn a_forged_state_is_denied_as_a_page_to_browsers_and_as_json_otherwise() {
    let e = env(json!({})).await;
    e.idp
        .next_user("ann@corp.example", "ann@corp.example", true, &[])
        .await;
    // A real provider answer, delivered with a state the gateway never issued.
    let first = Browser::new()
        .walk(
            &e.app.u("/api/auth/sso/corp/authorize"),
            Some(&callback_of(&e.app, "corp")),
        )
        .await;
    let code = query_param(&first.url, "code").unwrap();
    let forged = format!(
        "{}?state=forged-state&code={}",
        callback_of(&e.app, "corp"),
        url_encode_component(&code)
    );
    let page = Browser::new().walk(&forged, None).await;
    assert_denied_page(&page, "unknown");
    let r = e.app.client.get(&forged).send().await.unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::FORBIDDEN, "sso_denied".into())
    );
    // Nobody was created.
    let users: Value = e
        .app
        .get("/api/admin/users", &e.admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        users.as_array().unwrap().len(),
        1,
        "only the admin: {users}"
    );
}

#[tokio::test]
async fn the_browser_flow_ends_signed_in_to_the_console() {
    let e = env(json!({})).await;
    // The console's sign-in page offers the provider.
    let page = Browser::new().walk(&e.app.u("/console/login"), None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("/api/auth/sso/corp/authorize"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Corp SSO"), "{}", page.body);

    e.idp
        .next_user("bob@corp.example", "Bob@Corp.example", true, &[])
        .await;
    let browser = Browser::new();
    let stop = browser
        .walk(&e.app.u("/api/auth/sso/corp/authorize"), None)
        .await;
    assert_eq!(stop.status, StatusCode::OK, "{stop:?}");
    assert!(
        stop.url.contains("/console/") && !stop.url.contains("/console/login"),
        "{stop:?}"
    );
    assert!(stop.content_type.starts_with("text/html"));
    assert!(stop.body.contains("bob@corp.example"), "{}", stop.body);
    // The session is this browser's: its own pages open without a password.
    let keys = browser.walk(&e.app.u("/console/keys"), None).await;
    assert_eq!(keys.status, StatusCode::OK, "{keys:?}");
    assert!(keys.url.ends_with("/console/keys"), "{keys:?}");
}

#[tokio::test]
async fn a_browser_callback_from_another_browser_signs_no_one_in() {
    let e = env(json!({})).await;
    e.idp
        .next_user("eve@corp.example", "eve@corp.example", true, &[])
        .await;
    // The attacker starts a sign-in and stops at the callback ...
    let callback = callback_of(&e.app, "corp");
    let attacker = Browser::new();
    let stop = attacker
        .walk(&e.app.u("/api/auth/sso/corp/authorize"), Some(&callback))
        .await;
    assert!(stop.url.starts_with(&callback), "{stop:?}");
    // ... and sends the link to a victim, whose browser did not start it.
    let victim = Browser::new();
    let landed = victim.walk(&stop.url, None).await;
    assert_denied_page(&landed, "not started in this browser");
    let console = victim.walk(&e.app.u("/console/keys"), None).await;
    assert!(
        console.url.contains("/console/login"),
        "the victim has no session: {console:?}"
    );
}

#[tokio::test]
async fn tampered_id_tokens_are_denied_and_create_nobody() {
    let e = env(json!({})).await;
    for (mode, reason) in [
        ("wrong_key", "signature"),
        ("hs256", "signature"),
        ("wrong_audience", "another client"),
        ("wrong_issuer", "another issuer"),
        ("expired", "expired"),
        ("wrong_nonce", "nonce"),
    ] {
        e.idp
            .next_user("ann@corp.example", "ann@corp.example", true, &[])
            .await;
        e.idp.misbehave(mode).await;
        let stop = e.browser_sign_in().await;
        assert_denied_page(&stop, reason);
    }
    let users: Value = e
        .app
        .get("/api/admin/users", &e.admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        users.as_array().unwrap().len(),
        1,
        "only the admin: {users}"
    );
}

#[tokio::test]
async fn an_error_from_the_provider_is_denied_with_its_reason() {
    let e = env(json!({})).await;
    e.idp.deny_next("access_denied", "The user said no").await;
    let stop = e.browser_sign_in().await;
    assert_denied_page(&stop, "The user said no");
}

#[tokio::test]
async fn unverified_and_disallowed_emails_and_create_users_off_are_denied() {
    let e = env(json!({"allowed_domains": ["corp.example"], "create_users": false})).await;
    e.idp.next_user("s1", "ann@corp.example", false, &[]).await;
    assert_denied_page(&e.browser_sign_in().await, "has not verified");
    e.idp.next_user("s2", "eve@evil.example", true, &[]).await;
    assert_denied_page(&e.browser_sign_in().await, "evil.example");
    e.idp.next_user("s3", "new@corp.example", true, &[]).await;
    assert_denied_page(&e.browser_sign_in().await, "does not create accounts");

    // An account the admin made signs in (e-mail matched case-insensitively).
    e.app.user("known@corp.example").await;
    e.idp.next_user("s4", "Known@CORP.example", true, &[]).await;
    assert_eq!(e.browser_sign_in().await.status, StatusCode::OK);
}

#[tokio::test]
async fn admin_follows_the_group_and_a_disabled_user_is_denied() {
    let e = env(json!({"admin_group": "gatehouse-admins"})).await;
    let token = e
        .login_token("ops@corp.example", &["staff", "gatehouse-admins"])
        .await;
    assert_eq!(e.me(&token).await["is_admin"], true);
    let r = e.app.get("/api/admin/users", &token).await;
    assert_eq!(r.status(), StatusCode::OK, "granted: admin routes open");

    let token = e.login_token("ops@corp.example", &["staff"]).await;
    assert_eq!(e.me(&token).await["is_admin"], false);
    let r = e.app.get("/api/admin/users", &token).await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );

    // An SSO user has no password.
    let (status, c) = api_code(e.app.login("ops@corp.example", "").await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{c}");
    let (status, c) = api_code(e.app.login("ops@corp.example", "anything-at-all").await).await;
    assert_eq!(
        (status, c.as_str()),
        (StatusCode::BAD_REQUEST, "login_bad_credentials")
    );

    let id = e.me(&token).await["id"].as_str().unwrap().to_string();
    let r = e
        .app
        .patch(
            &format!("/api/admin/users/{id}"),
            &e.admin,
            &json!({"is_active": false}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (stop, _) = e
        .app_sign_in("ops@corp.example", &["gatehouse-admins"])
        .await;
    assert_denied_page(&stop, "disabled");
}

#[tokio::test]
async fn provider_keys_rotated_between_two_logins_are_fetched_again() {
    let e = env(json!({})).await;
    e.login_token("ann@corp.example", &[]).await;
    let before = e.idp.stats().await["jwks_fetches"].as_i64().unwrap();
    e.idp.rotate_keys().await;
    let token = e.login_token("ann@corp.example", &[]).await;
    assert_eq!(e.me(&token).await["email"], "ann@corp.example");
    assert_eq!(
        e.idp.stats().await["jwks_fetches"].as_i64().unwrap(),
        before + 1
    );
}

#[tokio::test]
async fn admin_api_manages_providers_and_never_shows_the_secret() {
    let e = env(json!({})).await;
    let r = e.app.get("/api/admin/sso/corp", &e.admin).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert!(v.get("client_secret").is_none());
    assert!(!v.to_string().contains(CLIENT_SECRET));
    assert_eq!(v["redirect_uri"], callback_of(&e.app, "corp"));
    assert_eq!(v["scopes"], json!(["openid", "email", "profile", "groups"]));
    assert_eq!(v["create_users"], true);

    // Taken name; unreachable issuer; bad name; not an admin.
    let body = |name: &str, issuer: &str| json!({"name": name, "issuer": issuer, "client_id": "x", "client_secret": "y"});
    let r = e
        .app
        .post("/api/admin/sso", &e.admin, &body("corp", &e.idp.issuer))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::CONFLICT, "sso_provider_exists".into())
    );
    let dead = format!("http://127.0.0.1:{}", procs::free_port());
    let r = e
        .app
        .post("/api/admin/sso", &e.admin, &body("other", &dead))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "sso_discovery_failed".into())
    );
    let r = e
        .app
        .post("/api/admin/sso", &e.admin, &body("Bad Name", &e.idp.issuer))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let (_, user_token) = e.app.user("plain@corp.example").await;
    let r = e.app.get("/api/admin/sso", &user_token).await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );

    // PATCH keeps the secret unless given, checks a new issuer.
    let r = e
        .app
        .patch(
            "/api/admin/sso/corp",
            &e.admin,
            &json!({"display_name": "Corp", "admin_group": "x"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["display_name"].as_str(), v["admin_group"].as_str()),
        (Some("Corp"), Some("x"))
    );
    let r = e
        .app
        .patch("/api/admin/sso/corp", &e.admin, &json!({"issuer": dead}))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "sso_discovery_failed".into())
    );
    e.login_token("ann@corp.example", &[]).await;

    let list: Value = e
        .app
        .get("/api/admin/sso", &e.admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let r = e.app.delete("/api/admin/sso/corp", &e.admin).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = e.app.get("/api/admin/sso/corp", &e.admin).await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::NOT_FOUND, "sso_provider_not_found".into())
    );
    let r = e.app.delete("/api/admin/sso/corp", &e.admin).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn config_file_providers_and_the_public_url_are_used() {
    let idp = OidcProvider::start();
    let dir = tempfile::tempdir().unwrap();
    let port = procs::free_port();
    // A public URL with another host name than the listener, as behind a proxy.
    let public = format!("http://localhost:{port}");
    idp.register(
        CLIENT_ID,
        CLIENT_SECRET,
        &[&format!("{public}/api/auth/sso/staff/callback")],
    )
    .await;
    let file = dir.path().join("gatehouse.toml");
    std::fs::write(
        &file,
        format!(
            "[[sso]]\nname = \"staff\"\ndisplay_name = \"Staff\"\nissuer = \"{}\"\nclient_id = \"{CLIENT_ID}\"\nclient_secret = \"{CLIENT_SECRET}\"\n",
            idp.issuer
        ),
    )
    .unwrap();
    let app = spawn_app_with(|s| {
        s.listen = format!("127.0.0.1:{port}").parse().unwrap();
        s.public_url = Some(public.clone());
        s.config_file = Some(file.clone());
    })
    .await;
    let list: Value = app
        .client
        .get(app.u("/api/auth/sso"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list, json!([{"name": "staff", "display_name": "Staff"}]));
    let admin = app.admin_token().await;
    let v: Value = app
        .get("/api/admin/sso/staff", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["source"], "config");
    assert_eq!(
        v["redirect_uri"],
        format!("{public}/api/auth/sso/staff/callback")
    );

    idp.next_user("s1", "ann@corp.example", true, &[]).await;
    let stop = Browser::new()
        .walk(&format!("{public}/api/auth/sso/staff/authorize"), None)
        .await;
    assert_eq!(stop.status, StatusCode::OK, "{stop:?}");
    assert!(
        stop.url.starts_with(&format!("{public}/console/")),
        "{stop:?}"
    );
}

#[tokio::test]
async fn a_sign_in_started_on_one_server_finishes_on_another() {
    let e = env(json!({})).await;
    // A second server on the same database, reached at the same public URL (as behind a
    // load balancer): pending sign-ins and codes live in the database.
    let db = e.app.settings.database_url.clone();
    let public = e.app.url.clone();
    let other = spawn_app_with(|s| {
        s.database_url = db;
        s.public_url = Some(public);
    })
    .await;
    e.idp
        .next_user("ann@corp.example", "ann@corp.example", true, &[])
        .await;
    let (verifier, challenge) = pkce_pair();
    let url = format!(
        "{}?redirect_uri={}&state=s1&code_challenge={challenge}&code_challenge_method=S256",
        e.app.u("/api/auth/sso/corp/authorize"),
        urlencode(APP_REDIRECT)
    );
    let browser = Browser::new();
    let at_callback = browser.walk(&url, Some(&callback_of(&e.app, "corp"))).await;
    let replayed = at_callback.url.replacen(&e.app.url, &other.url, 1);
    let back = browser.walk(&replayed, Some(APP_REDIRECT)).await;
    let code = query_param(&back.url, "code").unwrap_or_else(|| panic!("{back:?}"));
    let r = other
        .client
        .post(other.u("/api/auth/sso/token"))
        .json(&json!({"code": code, "code_verifier": verifier, "redirect_uri": APP_REDIRECT}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Used up on every server.
    let (_, c) = api_code(e.exchange(&code, &verifier, APP_REDIRECT).await).await;
    assert_eq!(c, "invalid_grant");
}
