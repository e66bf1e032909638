//! The web console's server-side rules: the session cookie's flags, the CSRF
//! token and origin check on every change, the Content-Security-Policy, and
//! device-sent text shown escaped. Also the admin sign-ins list the console
//! reads (filters optional). Real servers, a real HTTP client.

use crate::common;

use common::scene::Scene;
use common::*;
use reqwest::header::{CONTENT_SECURITY_POLICY, LOCATION, SET_COOKIE};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

fn no_redirects() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// `name=value` of a Set-Cookie header for `name`.
fn set_cookie<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
}

fn value_of(cookie: &str) -> String {
    cookie
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .unwrap_or_default()
}

/// The value of `name="csrf"` in a page.
fn csrf_in(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("csrf field") + 19;
    html[at..].split('"').next().unwrap_or("").to_string()
}

/// A browser-like console session: the cookie and the page's CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

/// Posts the sign-in form (with the token of a freshly loaded form) asking
/// to go on to `next`; returns the answer.
async fn post_sign_in(app: &TestApp, email: &str, password: &str, next: &str) -> reqwest::Response {
    let c = no_redirects();
    let r = c.get(app.u("/console/login")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let pre = value_of(set_cookie(&r, "gatehouse_console_pre").expect("pre cookie"));
    let page = r.text().await.unwrap();
    c.post(app.u("/console/login"))
        .header("cookie", format!("gatehouse_console_pre={pre}"))
        .form(&[
            ("csrf", csrf_in(&page).as_str()),
            ("username", email),
            ("password", password),
            ("next", next),
        ])
        .send()
        .await
        .unwrap()
}

async fn console_sign_in(app: &TestApp, email: &str, password: &str) -> Session {
    let r = post_sign_in(app, email, password, "/console/keys").await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "sign-in of {email}");
    assert_eq!(r.headers()[LOCATION], "/console/keys");
    let cookie = format!(
        "gatehouse_console={}",
        value_of(set_cookie(&r, "gatehouse_console").expect("session cookie"))
    );
    let page = get_page(app, &cookie, "/console/keys").await.1;
    Session {
        cookie,
        csrf: csrf_in(&page),
    }
}

async fn get_page(app: &TestApp, cookie: &str, path: &str) -> (StatusCode, String) {
    let r = no_redirects()
        .get(app.u(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn post_form(
    app: &TestApp,
    s: &Session,
    path: &str,
    origin: Option<&str>,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = no_redirects()
        .post(app.u(path))
        .header("cookie", &s.cookie)
        .form(form);
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn console_pages_forbid_inline_scripts_and_are_not_cached() {
    let app = spawn_app().await;
    let r = app
        .client
        .get(app.u("/console/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let csp = r.headers()[CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let page = r.text().await.unwrap();
    assert!(!page.contains("<script"), "the console needs no script");
    assert!(page.len() < 100 * 1024);
}

#[tokio::test]
async fn session_cookie_is_httponly_lax_and_secure_only_behind_https() {
    let app = spawn_app().await;
    let c = no_redirects();
    for (proto, secure) in [(None, false), (Some("https"), true)] {
        let mut req = c.get(app.u("/console/login"));
        if let Some(p) = proto {
            req = req.header("x-forwarded-proto", p);
        }
        let r = req.send().await.unwrap();
        let pre = set_cookie(&r, "gatehouse_console_pre").unwrap().to_string();
        let page = r.text().await.unwrap();
        let mut req = c
            .post(app.u("/console/login"))
            .header(
                "cookie",
                format!("gatehouse_console_pre={}", value_of(&pre)),
            )
            .form(&[
                ("csrf", csrf_in(&page).as_str()),
                ("username", ADMIN_EMAIL),
                ("password", ADMIN_PASSWORD),
            ]);
        if let Some(p) = proto {
            req = req.header("x-forwarded-proto", p);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let cookie = set_cookie(&r, "gatehouse_console").unwrap();
        assert!(cookie.contains("; HttpOnly"), "{cookie}");
        assert!(cookie.contains("; SameSite=Lax"), "{cookie}");
        assert!(cookie.contains("; Path=/console"), "{cookie}");
        assert_eq!(cookie.contains("; Secure"), secure, "{cookie}");
    }
}

#[tokio::test]
async fn a_wrong_password_signs_nobody_in() {
    let app = spawn_app().await;
    let c = no_redirects();
    let r = c.get(app.u("/console/login")).send().await.unwrap();
    let pre = value_of(set_cookie(&r, "gatehouse_console_pre").unwrap());
    let page = r.text().await.unwrap();
    let r = c
        .post(app.u("/console/login"))
        .header("cookie", format!("gatehouse_console_pre={pre}"))
        .form(&[
            ("csrf", csrf_in(&page).as_str()),
            ("username", ADMIN_EMAIL),
            ("password", "wrong-password"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(set_cookie(&r, "gatehouse_console").is_none());
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("The e-mail or password is wrong."));
}

#[tokio::test]
async fn sign_in_from_another_site_is_refused() {
    let app = spawn_app().await;
    // No token from our page (login CSRF), or a foreign origin: refused.
    let r = no_redirects()
        .post(app.u("/console/login"))
        .header("origin", "http://evil.example")
        .form(&[("username", ADMIN_EMAIL), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(set_cookie(&r, "gatehouse_console").is_none());
}

#[tokio::test]
async fn a_change_without_the_sessions_token_or_from_another_origin_changes_nothing() {
    let app = spawn_app().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let own = app.url.clone();
    for (csrf, origin) in [
        ("", None),
        ("not-the-token", None),
        (s.csrf.as_str(), Some("http://evil.example")),
    ] {
        let r = post_form(
            &app,
            &s,
            "/console/keys",
            origin,
            &[("csrf", csrf), ("name", "k")],
        )
        .await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
    let admin = app.admin_token().await;
    let keys: Vec<Value> = app.get("/api/api-keys", &admin).await.json().await.unwrap();
    assert!(keys.is_empty(), "a refused form created a key");
    let r = post_form(
        &app,
        &s,
        "/console/keys",
        Some(&own),
        &[("csrf", &s.csrf), ("name", "k")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let page = r.text().await.unwrap();
    assert!(page.contains("gtk_"), "the new key is shown once");
    let keys: Vec<Value> = app.get("/api/api-keys", &admin).await.json().await.unwrap();
    assert_eq!(keys.len(), 1);
}

#[tokio::test]
async fn signing_out_ends_the_session_for_good() {
    let app = spawn_app().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = post_form(&app, &s, "/console/logout", None, &[("csrf", &s.csrf)]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cleared = set_cookie(&r, "gatehouse_console").unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // The old cookie, replayed, opens nothing.
    let r = no_redirects()
        .get(app.u("/console/keys"))
        .header("cookie", &s.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(r.headers()[LOCATION]
        .to_str()
        .unwrap()
        .starts_with("/console/login"));
}

#[tokio::test]
async fn a_non_admin_is_kept_out_of_admin_pages() {
    let app = spawn_app().await;
    app.user("ann@example.com").await;
    let s = console_sign_in(&app, "ann@example.com", "user-password-1").await;
    for path in [
        "/console/admin/users",
        "/console/admin/models",
        "/console/admin/agents",
        "/console/admin/sign-ins",
        "/console/admin/usage",
        "/console/admin/usage.csv",
    ] {
        assert_eq!(
            get_page(&app, &s.cookie, path).await.0,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    let r = post_form(
        &app,
        &s,
        "/console/admin/users",
        None,
        &[
            ("csrf", &s.csrf),
            ("email", "eve@example.com"),
            ("password", "eve-password-1"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Their own pages work; the overview sends them to their keys.
    assert_eq!(
        get_page(&app, &s.cookie, "/console/sign-ins").await.0,
        StatusCode::OK
    );
    let r = no_redirects()
        .get(app.u("/console/"))
        .header("cookie", &s.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[LOCATION], "/console/keys");
}

const EVIL: &str = "<script>alert('x')</script><img src=x onerror=alert(1)>";

#[tokio::test]
async fn what_a_device_sends_is_shown_as_text() {
    let scene = Scene::new()
        .with_model("chat-1", "up")
        .with_agent(
            "evil-agent",
            json!({"name": "Evil", "tool_contract": ["known"]}),
        )
        .user("ann@example.com", EVIL)
        .signed_in()
        .await;
    let app = &scene.app;
    let access = scene.access.as_str();
    let r = app
        .put(
            "/v1/agents/evil-agent/manifest",
            access,
            &json!({"app_name": EVIL, "app_version": "1", "sdk": "x", "tools": [
                {"name": "evil_tool", "description": EVIL, "parameters": {"type": "object"}, "class": "write"}
            ]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = app
        .post(
            "/v1/agents/evil-agent/events",
            access,
            &json!({"events": [{"type": "x<b>y</b>", "data": {"html": EVIL}}]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let s = console_sign_in(app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    for path in [
        "/console/admin/agents/evil-agent",
        "/console/admin/agents/evil-agent/events",
        "/console/admin/sign-ins",
    ] {
        let (status, page) = get_page(app, &s.cookie, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            !page.contains("<script>alert"),
            "{path} runs the device's script"
        );
        assert!(
            !page.contains("<img src=x"),
            "{path} renders the device's markup"
        );
        assert!(
            !page.contains("<b>y</b>"),
            "{path} renders the device's markup"
        );
        assert!(
            page.contains("&lt;script&gt;"),
            "{path} does not show the text"
        );
    }
}

#[tokio::test]
async fn admin_sign_ins_list_every_live_one_newest_first_and_filters_by_user_and_agent() {
    let app = spawn_app().await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-1", "chat", "up")
        .await;
    let admin = app.admin_token().await;
    for address in ["agent-a", "agent-b"] {
        let r = app
            .post(
                "/api/admin/agents",
                &admin,
                &json!({"address": address, "name": address, "model": "chat-1"}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let (_, ann) = app.user("ann@example.com").await;
    let (_, bob) = app.user("bob@example.com").await;
    let mut devices = Vec::new();
    for (token, agent) in [
        (&ann, "agent-a"),
        (&bob, "agent-a"),
        (&bob, "agent-b"),
        (&ann, "agent-b"),
    ] {
        let v: Value = app
            .post(
                "/api/agent-tokens",
                token,
                &json!({"agent": agent, "device_label": "d"}),
            )
            .await
            .json()
            .await
            .unwrap();
        devices.push(v["device_id"].as_str().unwrap().to_string());
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Ann ends her last one: it leaves the live list.
    let r = app
        .delete(&format!("/api/agent-tokens/{}", devices[3]), &ann)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    let list = |q: &'static str| {
        let app = &app;
        let admin = admin.clone();
        async move {
            let r = app.get(&format!("/api/admin/sign-ins{q}"), &admin).await;
            assert_eq!(r.status(), StatusCode::OK, "{q}");
            r.json::<Vec<Value>>().await.unwrap()
        }
    };
    let all = list("").await;
    let ids: Vec<&str> = all
        .iter()
        .map(|e| e["device_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            devices[2].as_str(),
            devices[1].as_str(),
            devices[0].as_str()
        ]
    );
    let users: Vec<&str> = all.iter().map(|e| e["user"].as_str().unwrap()).collect();
    assert_eq!(
        users,
        ["bob@example.com", "bob@example.com", "ann@example.com"]
    );

    let of_a = list("?agent=agent-a").await;
    assert_eq!(of_a.len(), 2);
    assert!(of_a.iter().all(|e| e["agent"] == "agent-a"));

    let bob_b = list("?user=bob@example.com&agent=agent-b").await;
    assert_eq!(bob_b.len(), 1);
    assert_eq!(bob_b[0]["device_id"], devices[2].as_str());

    // A user filter shows that user's history, ended ones included.
    let ann_all = list("?user=ANN@example.com").await;
    assert_eq!(ann_all.len(), 2);
    assert_eq!(ann_all[0]["end_reason"], "signed_out");

    assert_eq!(
        api_code(app.get("/api/admin/sign-ins?agent=Bad Agent", &admin).await).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
}

#[tokio::test]
async fn ending_a_sign_in_in_the_console_refuses_its_token() {
    let scene = Scene::new()
        .with_model("chat-1", "up")
        .with_agent("agent-a", json!({"name": "A"}))
        .user("ann@example.com", "laptop")
        .signed_in()
        .await;
    let app = &scene.app;
    let (access, device) = (scene.access.as_str(), scene.device_id.as_str());
    let s = console_sign_in(app, "ann@example.com", "user-password-1").await;
    let (_, page) = get_page(app, &s.cookie, "/console/sign-ins").await;
    assert!(page.contains("laptop"));
    let r = post_form(
        app,
        &s,
        &format!("/console/sign-ins/{device}/end"),
        None,
        &[("csrf", &s.csrf)],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        v1_code(app.get("/v1/agents/agent-a/profile", access).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
}

#[tokio::test]
async fn overview_and_usage_pages_chart_recorded_requests_and_export_csv() {
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let app = spawn_app().await;
    app.add_model("openai", &stub.openai_base_url(), "chat-1", "chat", "up")
        .await;
    let admin = app.admin_token().await;
    let key = app.api_key(&admin, json!({"name": "k"})).await;
    for _ in 0..3 {
        let r = app
            .post(
                "/v1/chat/completions",
                &key,
                &json!({"model": "chat-1", "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    // Usage records are written in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows: Vec<Value> = app
            .get("/api/admin/usage", &admin)
            .await
            .json()
            .await
            .unwrap();
        if rows.first().is_some_and(|r| r["requests"] == 3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "usage not recorded: {rows:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    for range in ["", "?range=7d", "?range=30d"] {
        let (status, page) = get_page(&app, &s.cookie, &format!("/console/{range}")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            page.contains("<strong>3</strong> requests"),
            "{range}: {page}"
        );
        assert!(page.contains("<svg"), "charts are inline SVG");
    }
    let (status, page) = get_page(&app, &s.cookie, "/console/admin/usage?group_by=model").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("chat-1"));
    let (status, page) = get_page(&app, &s.cookie, "/console/admin/usage?from=2026-13-01").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    let r = no_redirects()
        .get(app.u("/console/admin/usage.csv?group_by=model"))
        .header("cookie", &s.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    assert!(r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment"));
    let csv = r.text().await.unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("model,requests,prompt_tokens,completion_tokens,errors,cost,unpriced_requests")
    );
    assert!(lines.next().unwrap().starts_with("\"chat-1\",3,"), "{csv}");
}

#[tokio::test]
async fn pages_stay_small_and_paged_with_10000_events_and_1000_sign_ins() {
    let app = spawn_app().await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-1", "chat", "up")
        .await;
    let admin = app.admin_token().await;
    app.post(
        "/api/admin/agents",
        &admin,
        &json!({"address": "busy", "name": "Busy", "model": "chat-1"}),
    )
    .await;
    let (_, ann) = app.user("ann@example.com").await;
    let mut access = String::new();
    for i in 0..1000 {
        let v: Value = app
            .post(
                "/api/agent-tokens",
                &ann,
                &json!({"agent": "busy", "device_label": format!("device {i}")}),
            )
            .await
            .json()
            .await
            .unwrap();
        access = v["access_token"].as_str().unwrap().to_string();
    }
    for batch in 0..100 {
        let events: Vec<Value> = (0..100)
            .map(|i| json!({"type": if i % 2 == 0 { "even" } else { "odd" }, "data": {"n": batch * 100 + i}}))
            .collect();
        let r = app
            .post(
                "/v1/agents/busy/events",
                &access,
                &json!({"events": events}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    for path in [
        "/console/",
        "/console/admin/agents/busy",
        "/console/admin/agents/busy/events",
        "/console/admin/sign-ins",
        "/console/admin/sign-ins?agent=busy&user=ann@example.com",
    ] {
        let started = std::time::Instant::now();
        let (status, page) = get_page(&app, &s.cookie, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(page.len() < 100 * 1024, "{path}: {} bytes", page.len());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(3),
            "{path} is slow"
        );
    }
    // Sign-ins: 50 a page, newest first; following "Older" reaches the first one.
    let (_, page) = get_page(&app, &s.cookie, "/console/sign-ins").await;
    assert!(!page.contains("ann")); // the admin has no sign-ins of their own
    let mut path = "/console/admin/sign-ins?user=&agent=busy".to_string();
    let mut pages = 0;
    loop {
        let (_, page) = get_page(&app, &s.cookie, &path).await;
        pages += 1;
        if pages == 1 {
            assert!(page.contains(">device 999<"));
        }
        match page.find("href=\"/console/admin/sign-ins?user=&amp;agent=busy&amp;before=") {
            Some(at) => {
                let href = &page[at + 6..];
                path = href[..href.find('"').unwrap()].replace("&amp;", "&");
            }
            None => {
                assert!(page.contains(">device 0<"));
                break;
            }
        }
    }
    assert_eq!(pages, 20);
    // Events: oldest first, filtered by type, 50 a page with a next link.
    let (_, page) = get_page(
        &app,
        &s.cookie,
        "/console/admin/agents/busy/events?type=odd",
    )
    .await;
    assert_eq!(page.matches("<tr>").count(), 51, "50 rows and the head");
    assert!(page.contains("{&quot;n&quot;:1}"));
    assert!(!page.contains("{&quot;n&quot;:0}"));
    assert!(page.contains("Next page"));
}

#[tokio::test]
async fn agent_settings_saved_in_the_console_go_through_the_agent_rules() {
    let app = spawn_app().await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-1", "chat", "up")
        .await;
    app.add_model(
        "openai",
        "http://127.0.0.1:9/v1",
        "emb-1",
        "embeddings",
        "up",
    )
    .await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = post_form(
        &app,
        &s,
        "/console/admin/agents",
        None,
        &[
            ("csrf", &s.csrf),
            ("address", "helper"),
            ("name", "Helper"),
            ("model", "chat-1"),
            ("tool_contract", "a, b"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let form = |model: &'static str| {
        vec![
            ("csrf", s.csrf.clone()),
            ("name", "Helper 2".to_string()),
            ("model", model.to_string()),
            ("default_tool_mode", "read_only".to_string()),
            ("tool_contract", "a".to_string()),
            ("pii_mode", "redact".to_string()),
            ("pii_terms", "Acme, Zeta".to_string()),
            ("instructions", "Be brief.".to_string()),
            ("allowed_users", "ann@example.com".to_string()),
        ]
    };
    let f = form("emb-1");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = post_form(&app, &s, "/console/admin/agents/helper", None, &pairs).await;
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "an embeddings model is refused"
    );
    assert!(r.text().await.unwrap().contains("chat model"));
    let f = form("chat-1");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = post_form(&app, &s, "/console/admin/agents/helper", None, &pairs).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let admin = app.admin_token().await;
    let agent: Value = app
        .get("/api/admin/agents/helper", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(agent["name"], "Helper 2");
    assert_eq!(agent["default_tool_mode"], "read_only");
    assert_eq!(agent["tool_contract"], json!(["a"]));
    assert_eq!(agent["pii"]["mode"], "redact");
    assert_eq!(agent["pii"]["terms"], json!(["Acme", "Zeta"]));
    assert_eq!(agent["instructions"], "Be brief.");
    assert_eq!(agent["allowed_users"], json!(["ann@example.com"]));
    assert_eq!(agent["allow_local_mcp"], false);
}

#[tokio::test]
async fn an_admin_sets_a_password_and_the_users_console_sessions_end() {
    let app = spawn_app().await;
    let (ann_id, _) = app.user("ann@example.com").await;
    let ann = console_sign_in(&app, "ann@example.com", "user-password-1").await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = post_form(
        &app,
        &s,
        "/console/admin/users/password",
        None,
        &[
            ("csrf", &s.csrf),
            ("user_id", &ann_id),
            ("password", "a-new-password-2"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        get_page(&app, &ann.cookie, "/console/keys").await.0,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        app.login("ann@example.com", "a-new-password-2")
            .await
            .status(),
        StatusCode::OK
    );
    // Unknown console pages answer with a page, under the same headers.
    let r = no_redirects()
        .get(app.u("/console/no-such-page"))
        .header("cookie", &s.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.headers().contains_key(CONTENT_SECURITY_POLICY));
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("There is no such console page."));
}

// ---- limits, models and single sign-on in the console ----

const USER_PASSWORD: &str = "user-password-1";

fn chat_body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

/// The first `<tr data-limit="name">` row of a limits page.
fn limit_row<'a>(page: &'a str, name: &str) -> &'a str {
    let at = page
        .find(&format!("data-limit=\"{name}\""))
        .unwrap_or_else(|| panic!("no {name} row: {page}"));
    let rest = &page[at..];
    &rest[..rest.find("</tr>").unwrap_or(rest.len())]
}

#[tokio::test]
async fn a_key_limit_set_in_the_console_is_enforced_by_the_api_and_shown_with_its_use() {
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let app = spawn_app().await;
    app.add_model("openai", &stub.openai_base_url(), "chat-1", "chat", "up")
        .await;
    let (_, ann) = app.user("ann@example.com").await;
    let key = app.api_key(&ann, json!({"name": "backend"})).await;
    let keys: Vec<Value> = app.get("/api/api-keys", &ann).await.json().await.unwrap();
    let id = keys[0]["id"].as_str().unwrap().to_string();

    let s = console_sign_in(&app, "ann@example.com", USER_PASSWORD).await;
    let (status, page) = get_page(&app, &s.cookie, "/console/keys").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(&format!("/console/keys/{id}/limits")),
        "{page}"
    );
    let path = format!("/console/keys/{id}/limits");
    let r = post_form(
        &app,
        &s,
        &path,
        None,
        &[
            ("csrf", &s.csrf),
            ("requests_per_minute", "2"),
            ("tokens_per_minute", ""),
            ("tokens_per_day", " 100000 "),
            ("max_parallel", ""),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    // The API sees what the console set...
    let v: Value = app
        .get(&format!("/api/api-keys/{id}/limits"), &ann)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["limits"],
        json!({"requests_per_minute": 2, "tokens_per_minute": null, "tokens_per_day": 100000, "max_parallel": null, "budget_per_day": null, "budget_per_month": null})
    );
    // ...and enforces it: two requests this minute, the third refused.
    for _ in 0..2 {
        let r = app
            .post("/v1/chat/completions", &key, &chat_body("chat-1"))
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = app
        .post("/v1/chat/completions", &key, &chat_body("chat-1"))
        .await;
    assert_eq!(
        v1_code(r).await,
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited".into())
    );
    // The console shows the limit with this minute's use.
    let (_, page) = get_page(&app, &s.cookie, &path).await;
    let row = limit_row(&page, "requests_per_minute");
    assert!(row.contains("value=\"2\""), "{row}");
    assert!(row.contains("<span class=\"count\">2</span> of 2"), "{row}");
    let (_, keys_page) = get_page(&app, &s.cookie, "/console/keys").await;
    assert!(
        keys_page.contains("2 requests/min · 100000 tokens/day"),
        "{keys_page}"
    );

    // "Remove all limits": the key is unlimited again.
    let r = post_form(&app, &s, &path, None, &[("csrf", &s.csrf), ("clear", "1")]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = app
        .post("/v1/chat/completions", &key, &chat_body("chat-1"))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_bad_limit_in_the_console_shows_the_apis_message_and_changes_nothing() {
    let app = spawn_app().await;
    let (_, ann) = app.user("ann@example.com").await;
    app.api_key(&ann, json!({"name": "k", "limits": {"max_parallel": 3}}))
        .await;
    let keys: Vec<Value> = app.get("/api/api-keys", &ann).await.json().await.unwrap();
    let id = keys[0]["id"].as_str().unwrap().to_string();
    let s = console_sign_in(&app, "ann@example.com", USER_PASSWORD).await;
    let path = format!("/console/keys/{id}/limits");
    for bad in ["0", "-5", "1.5", "many"] {
        let r = post_form(
            &app,
            &s,
            &path,
            None,
            &[
                ("csrf", &s.csrf),
                ("requests_per_minute", bad),
                ("max_parallel", "9"),
            ],
        )
        .await;
        // The form again (a page, not a failed load), with the API's own
        // message and the typed value kept in the field.
        assert_eq!(r.status(), StatusCode::OK, "{bad}");
        let page = r.text().await.unwrap();
        assert!(
            page.contains("<p class=\"error\" role=\"alert\">"),
            "{page}"
        );
        assert!(
            page.contains("'limits.requests_per_minute' must be a positive whole number"),
            "{bad}: {page}"
        );
        assert!(limit_row(&page, "requests_per_minute").contains(&format!("value=\"{bad}\"")));
    }
    let r = app
        .patch(
            &format!("/api/api-keys/{id}"),
            &ann,
            &json!({"limits": {"requests_per_minute": 0}}),
        )
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let v: Value = app
        .get(&format!("/api/api-keys/{id}/limits"), &ann)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["limits"]["max_parallel"], 3, "nothing changed: {v}");
    // Someone else's key: not found, whatever its id.
    let (_, bob) = app.user("bob@example.com").await;
    let _ = bob;
    let b = console_sign_in(&app, "bob@example.com", USER_PASSWORD).await;
    let (status, _) = get_page(&app, &b.cookie, &path).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let r = post_form(
        &app,
        &b,
        &path,
        None,
        &[("csrf", &b.csrf), ("max_parallel", "1")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn admins_set_user_and_agent_limits_in_the_console_and_the_api_applies_them() {
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let app = spawn_app().await;
    app.add_model("openai", &stub.openai_base_url(), "chat-1", "chat", "up")
        .await;
    let admin = app.admin_token().await;
    let (ann_id, ann) = app.user("ann@example.com").await;
    let key = app.api_key(&ann, json!({"name": "k"})).await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;

    // A user's limit, for all of their keys.
    let (_, users) = get_page(&app, &s.cookie, "/console/admin/users").await;
    let path = format!("/console/admin/users/{ann_id}/limits");
    assert!(users.contains(&path), "{users}");
    let r = post_form(
        &app,
        &s,
        &path,
        None,
        &[("csrf", &s.csrf), ("requests_per_minute", "1")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let v: Value = app
        .get(&format!("/api/admin/users/{ann_id}/limits"), &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["limits"]["requests_per_minute"], 1, "{v}");
    assert_eq!(
        app.post("/v1/chat/completions", &key, &chat_body("chat-1"))
            .await
            .status(),
        StatusCode::OK
    );
    let r = app
        .post("/v1/chat/completions", &key, &chat_body("chat-1"))
        .await;
    assert_eq!(
        v1_code(r).await,
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited".into())
    );
    let (_, page) = get_page(&app, &s.cookie, &path).await;
    assert!(
        limit_row(&page, "requests_per_minute").contains("<span class=\"count\">1</span> of 1"),
        "{page}"
    );
    let r = post_form(
        &app,
        &s,
        &path,
        None,
        &[("csrf", &s.csrf), ("tokens_per_day", "0")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("'limits.tokens_per_day' must be a positive whole number"));

    // An agent's limits.
    app.post(
        "/api/admin/agents",
        &admin,
        &json!({"address": "desk", "name": "Desk", "model": "chat-1"}),
    )
    .await;
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/agents/desk").await;
    assert!(page.contains("/console/admin/agents/desk/limits"), "{page}");
    let r = post_form(
        &app,
        &s,
        "/console/admin/agents/desk/limits",
        None,
        &[
            ("csrf", &s.csrf),
            ("max_parallel", "2"),
            ("tokens_per_minute", "5000"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let v: Value = app
        .get("/api/admin/agents/desk", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["limits"]["max_parallel"], 2, "{v}");
    assert_eq!(v["limits"]["tokens_per_minute"], 5000, "{v}");
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/agents/desk").await;
    assert!(page.contains("5000 tokens/min · 2 at once"), "{page}");
    let r = post_form(
        &app,
        &s,
        "/console/admin/agents/desk/limits",
        None,
        &[("csrf", &s.csrf), ("clear", "1")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let v: Value = app
        .get("/api/admin/agents/desk", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["limits"]["max_parallel"], Value::Null, "{v}");

    // Not for users who are not admins.
    let a = console_sign_in(&app, "ann@example.com", USER_PASSWORD).await;
    let r = post_form(&app, &a, &path, None, &[("csrf", &a.csrf), ("clear", "1")]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        get_page(&app, &a.cookie, "/console/admin/agents/desk/limits")
            .await
            .0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn a_target_shows_resting_after_its_upstream_fails_and_targets_and_fallbacks_change_in_the_console(
) {
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let app = spawn_app().await;
    app.add_model("openai", &stub.openai_base_url(), "chat-ok", "chat", "up")
        .await;
    let admin = app.admin_token().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    // A provider nobody answers on, added in the console.
    let r = post_form(
        &app,
        &s,
        "/console/admin/providers",
        None,
        &[
            ("csrf", &s.csrf),
            ("name", "dead"),
            ("type", "openai"),
            ("base_url", "http://127.0.0.1:9/v1"),
            ("timeout_s", "5"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = post_form(
        &app,
        &s,
        "/console/admin/models",
        None,
        &[
            ("csrf", &s.csrf),
            ("id", "chat-dead"),
            ("kind", "chat"),
            ("provider_0", "dead"),
            ("upstream_model_0", "up"),
            ("weight_0", "1"),
            ("provider_1", "dead"),
            ("upstream_model_1", ""),
            ("weight_1", "1"),
            ("routing", "weighted"),
            ("fallbacks", ""),
            ("max_attempts", "1"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models").await;
    assert!(page.contains("data-target=\"dead/up\""), "{page}");
    assert!(
        page.contains("<span class=\"state healthy\">healthy</span>"),
        "{page}"
    );

    let key = app.api_key(&admin, json!({"name": "k"})).await;
    for _ in 0..3 {
        let r = app
            .post("/v1/chat/completions", &key, &chat_body("chat-dead"))
            .await;
        assert!(r.status().is_server_error(), "{}", r.status());
    }
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models/chat-dead").await;
    assert!(
        page.contains("<span class=\"state resting\">resting until "),
        "{page}"
    );
    assert!(page.contains("(3 failures in a row)"), "{page}");
    // The overview lists it under "Needs attention".
    let (_, page) = get_page(&app, &s.cookie, "/console/").await;
    assert!(
        page.contains("Target <code>dead/up</code> of model"),
        "{page}"
    );
    // The provider's failures, by cause.
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models").await;
    assert!(page.contains("3 connect"), "{page}");

    // A second target and a fallback, set in the console.
    let r = post_form(
        &app,
        &s,
        "/console/admin/models/chat-dead",
        None,
        &[
            ("csrf", &s.csrf),
            ("provider_0", "dead"),
            ("upstream_model_0", "up"),
            ("weight_0", "1"),
            ("provider_1", "p-chat-ok"),
            ("upstream_model_1", "up"),
            ("weight_1", "3"),
            ("provider_2", "dead"),
            ("upstream_model_2", ""),
            ("weight_2", "1"),
            ("routing", "least_busy"),
            ("fallbacks", "chat-ok"),
            ("max_attempts", "3"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let v: Value = app
        .get("/api/admin/models/chat-dead", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["targets"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["targets"][1]["weight"], 3, "{v}");
    assert_eq!(v["routing"], "least_busy");
    assert_eq!(v["fallbacks"], json!(["chat-ok"]));
    assert_eq!(v["max_attempts"], 3);
    // The resting target is passed over: the request is answered.
    let r = app
        .post("/v1/chat/completions", &key, &chat_body("chat-dead"))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models").await;
    assert!(
        page.contains("chat-ok</span>") || page.contains(">chat-ok<"),
        "{page}"
    );

    // The API's checks: a bad weight and an unknown fallback are refused with its message.
    let r = post_form(
        &app,
        &s,
        "/console/admin/models/chat-dead",
        None,
        &[
            ("csrf", &s.csrf),
            ("provider_0", "dead"),
            ("upstream_model_0", "up"),
            ("weight_0", "1"),
            ("fallbacks", "nope"),
            ("max_attempts", "3"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let page = r.text().await.unwrap();
    assert!(page.contains("nope"), "{page}");
    let v: Value = app
        .get("/api/admin/models/chat-dead", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["fallbacks"], json!(["chat-ok"]), "nothing changed");

    // Model ids may hold a slash: its page and links still work.
    let r = app
        .post(
            "/api/admin/models",
            &admin,
            &json!({"id": "org/chat", "kind": "chat", "provider": "p-chat-ok", "upstream_model": "up"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models").await;
    assert!(
        page.contains("href=\"/console/admin/models/org%2Fchat\""),
        "{page}"
    );
    let (status, page) = get_page(&app, &s.cookie, "/console/admin/models/org%2Fchat").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Model org/chat"), "{page}");
}

/// A minimal OpenID Connect issuer: its discovery document and key set,
/// enough for the gateway's discovery checks when a provider is added.
async fn discovery_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let doc = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/auth"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    });
    let jwks = json!({"keys": [{
        "kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "e": "AQAB",
        "n": "wwECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn-AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq-wsbKztLW2t7i5uru8vb6_wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t_g4eLj5OXm5-jp6uvs7e7v8PHy8_T19vf4-fr7_P3-_w",
    }]});
    let router = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(doc) }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || async move { axum::Json(jwks) }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    issuer
}

#[tokio::test]
async fn sso_providers_are_added_listed_and_deleted_in_the_console_under_the_apis_rules() {
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    let issuer = discovery_server().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let (status, page) = get_page(&app, &s.cookie, "/console/admin/sso").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("No single sign-on providers yet"), "{page}");
    let form = |name: &'static str, issuer: String| {
        vec![
            ("csrf", s.csrf.clone()),
            ("name", name.to_string()),
            ("display_name", "Corp <b>SSO</b>".to_string()),
            ("issuer", issuer),
            ("client_id", "gatehouse".to_string()),
            ("client_secret", "very-secret-value".to_string()),
            ("allowed_domains", "corp.example, example.com".to_string()),
            ("admin_group", "".to_string()),
            ("create_users", "true".to_string()),
        ]
    };
    let send = |f: Vec<(&'static str, String)>| {
        let app = &app;
        let cookie = s.cookie.clone();
        async move {
            no_redirects()
                .post(app.u("/console/admin/sso"))
                .header("cookie", cookie)
                .form(&f)
                .send()
                .await
                .unwrap()
        }
    };
    let r = send(form("corp", issuer.clone())).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let list: Vec<Value> = app
        .get("/api/admin/sso", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        list[0]["allowed_domains"],
        json!(["corp.example", "example.com"])
    );
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/sso").await;
    assert!(
        page.contains(&format!("{}/api/auth/sso/corp/callback", app.url)),
        "{page}"
    );
    assert!(page.contains("Corp &lt;b&gt;SSO&lt;/b&gt;"), "{page}");
    assert!(
        !page.contains("very-secret-value"),
        "the secret is never shown"
    );
    // The sign-in page offers it.
    let (_, login) = get_page(&app, "", "/console/login").await;
    assert!(login.contains("/api/auth/sso/corp/authorize"), "{login}");

    // The API's rules: the same name again, an issuer not on https, a bad name.
    let r = send(form("corp", issuer.clone())).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = send(form("other", "http://sso.example.com".into())).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("must use https"));
    let r = send(form("Bad Name", issuer.clone())).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);

    let r = post_form(
        &app,
        &s,
        "/console/admin/sso/corp/delete",
        None,
        &[("csrf", &s.csrf)],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let list: Vec<Value> = app
        .get("/api/admin/sso", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert!(list.is_empty());
}

#[tokio::test]
async fn a_key_created_in_the_console_may_carry_limits_checked_by_the_apis_rules() {
    let app = spawn_app().await;
    let (_, ann) = app.user("ann@example.com").await;
    let s = console_sign_in(&app, "ann@example.com", USER_PASSWORD).await;
    let r = post_form(
        &app,
        &s,
        "/console/keys",
        None,
        &[
            ("csrf", &s.csrf),
            ("name", "bad"),
            ("requests_per_minute", "0"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("'limits.requests_per_minute' must be a positive whole number"));
    let keys: Vec<Value> = app.get("/api/api-keys", &ann).await.json().await.unwrap();
    assert!(keys.is_empty(), "no key was created: {keys:?}");
    let r = post_form(
        &app,
        &s,
        "/console/keys",
        None,
        &[
            ("csrf", &s.csrf),
            ("name", "good"),
            ("requests_per_minute", "30"),
            ("tokens_per_day", ""),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let keys: Vec<Value> = app.get("/api/api-keys", &ann).await.json().await.unwrap();
    assert_eq!(
        keys[0]["limits"],
        json!({"requests_per_minute": 30, "tokens_per_minute": null, "tokens_per_day": null, "max_parallel": null, "budget_per_day": null, "budget_per_month": null})
    );
}

#[tokio::test]
async fn a_next_that_is_not_a_plain_console_path_goes_to_the_overview() {
    let app = spawn_app().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    // As decoded from the query or the form (`%0D%0A` arrives as CR LF).
    let unsafe_next = [
        "/console/\r\nSet-Cookie: x=1",
        "/console/\t",
        "/console/\u{7f}",
        "/console/caf\u{e9}",
        "/console/a b",
        "/console/../api/users/me",
        "/console/x/../../api/users/me",
        "/console/%2e%2e/api/users/me",
        "/console/%2E./api/users/me",
        "/console//evil.example/",
        "/console/\\evil.example",
        "//evil.example/console/",
        "https://evil.example/console/",
        "/api/users/me",
        "",
    ];
    // Signed in already: the sign-in form sends the browser straight on.
    for next in unsafe_next {
        let r = no_redirects()
            .get(app.u("/console/login"))
            .query(&[("next", next)])
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{next:?}");
        assert_eq!(r.headers()[LOCATION], "/console/", "{next:?}");
    }
    // Signing in with it in the form: the session is made, and the way on is the overview.
    for next in unsafe_next {
        let r = post_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD, next).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{next:?}");
        assert_eq!(r.headers()[LOCATION], "/console/", "{next:?}");
        assert!(set_cookie(&r, "gatehouse_console").is_some(), "{next:?}");
    }
    // No page answers 500 for what the client put in its address.
    let odd = "%0D%0A%00%FF%22%3C%2E%2E";
    for path in [
        format!("/console/login?next={odd}"),
        format!("/console/?range={odd}"),
        format!("/console/keys/{odd}/limits"),
        format!("/console/admin/users/{odd}/limits"),
        format!("/console/admin/models/{odd}"),
        format!("/console/admin/agents/{odd}"),
        format!("/console/admin/agents/{odd}/events?device={odd}&type={odd}&before={odd}"),
        format!("/console/admin/agents/{odd}/limits"),
        format!("/console/admin/sign-ins?user={odd}&agent={odd}&before={odd}"),
        format!("/console/sign-ins?before={odd}"),
        format!("/console/admin/usage?from={odd}&to={odd}&group_by={odd}"),
        format!("/console/admin/usage.csv?from={odd}&group_by={odd}"),
        format!("/console/{odd}"),
    ] {
        let (status, _) = get_page(&app, &s.cookie, &path).await;
        assert!(status.as_u16() < 500, "{path}: {status}");
    }
    // A console path with its query is kept (percent-escapes and all).
    for next in [
        "/console/admin/usage?group_by=model&range=7d",
        "/console/keys",
        "/console/admin/agents/a%20b",
    ] {
        let r = no_redirects()
            .get(app.u("/console/login"))
            .query(&[("next", next)])
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()[LOCATION], next);
    }
}

#[tokio::test]
async fn a_fresh_install_shows_the_next_steps_and_its_empty_charts_say_no_requests_yet() {
    let app = spawn_app().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let (status, page) = get_page(&app, &s.cookie, "/console/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Get started"), "{page}");
    for link in [
        "href=\"/console/admin/models#providers\"",
        "href=\"/console/admin/models#new-model\"",
        "href=\"/console/keys\"",
        "href=\"/openapi.json\"",
    ] {
        assert!(page.contains(link), "{link}: {page}");
    }
    // The address clients use, as this request reached the server.
    assert!(page.contains(&format!("{}/v1", app.url)), "{page}");
    assert_eq!(page.matches("No requests yet.").count(), 3, "{page}");
    assert!(!page.contains("<svg"), "no axes without requests: {page}");

    // Each step done is marked so, until all are done and the steps go.
    let stub = gatehouse_stub_upstream::Stub::start().await;
    app.add_model("openai", &stub.openai_base_url(), "chat-1", "chat", "up")
        .await;
    let (_, page) = get_page(&app, &s.cookie, "/console/").await;
    assert!(page.contains("Get started"), "no key yet: {page}");
    assert_eq!(page.matches("<li class=\"done\"").count(), 2, "{page}");
    let admin = app.admin_token().await;
    let key = app.api_key(&admin, json!({"name": "first"})).await;
    let (_, page) = get_page(&app, &s.cookie, "/console/").await;
    assert!(!page.contains("Get started"), "{page}");
    assert_eq!(page.matches("No requests yet.").count(), 3, "{page}");

    // The first request: the charts draw it.
    let r = app
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "chat-1", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, page) = get_page(&app, &s.cookie, "/console/").await;
        if page.contains("<strong>1</strong> requests") {
            assert_eq!(page.matches("<svg").count(), 3, "{page}");
            assert!(!page.contains("No requests yet."), "{page}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not recorded: {page}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_anthropic_provider_and_a_models_aliases_are_set_in_the_console_under_the_apis_rules() {
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models").await;
    assert!(
        page.contains("<option value=\"anthropic\">anthropic</option>"),
        "{page}"
    );
    assert!(page.contains("name=\"anthropic_version\"") && page.contains("name=\"beta_headers\""));
    let r = post_form(
        &app,
        &s,
        "/console/admin/providers",
        None,
        &[
            ("csrf", &s.csrf),
            ("name", "claude"),
            ("type", "anthropic"),
            ("base_url", "https://api.anthropic.com"),
            ("api_key", "sk-ant-console"),
            ("timeout_s", "60"),
            ("anthropic_version", "2024-10-22"),
            ("beta_headers", "beta-a, beta-b"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let v: Value = app
        .get("/api/admin/providers/claude", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            v["type"].clone(),
            v["anthropic_version"].clone(),
            v["beta_headers"].clone()
        ),
        (
            json!("anthropic"),
            json!("2024-10-22"),
            json!(["beta-a", "beta-b"])
        )
    );
    // The settings are anthropic's only: the API's error comes back.
    let r = post_form(
        &app,
        &s,
        "/console/admin/providers",
        None,
        &[
            ("csrf", &s.csrf),
            ("name", "plain"),
            ("type", "openai"),
            ("base_url", "http://127.0.0.1:9/v1"),
            ("beta_headers", "drop"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("beta_headers"));

    let model_form = |aliases: &'static str, max: &'static str| {
        vec![
            ("csrf", s.csrf.clone()),
            ("id", "sonnet".to_string()),
            ("kind", "chat".to_string()),
            ("provider_0", "claude".to_string()),
            ("upstream_model_0", "claude-sonnet-4-5".to_string()),
            ("weight_0", "1".to_string()),
            ("routing", "weighted".to_string()),
            ("fallbacks", String::new()),
            ("max_attempts", "3".to_string()),
            ("aliases", aliases.to_string()),
            ("max_tokens_default", max.to_string()),
        ]
    };
    let f = model_form("claude-sonnet-*, sonnet-latest", "8192");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = post_form(&app, &s, "/console/admin/models", None, &pairs).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models/sonnet").await;
    assert!(
        page.contains("value=\"claude-sonnet-*, sonnet-latest\""),
        "{page}"
    );
    assert!(page.contains("value=\"8192\""), "{page}");
    // A star inside a name is refused with the API's message; emptying the field removes them.
    let f = model_form("a*b", "8192");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = post_form(&app, &s, "/console/admin/models/sonnet", None, &pairs).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("aliases"));
    let f = model_form("", "1000000");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = post_form(&app, &s, "/console/admin/models/sonnet", None, &pairs).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let v: Value = app
        .get("/api/admin/models/sonnet", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (v["aliases"].clone(), v["max_tokens_default"].clone()),
        (json!([]), json!(1000000))
    );
}

#[tokio::test]
async fn the_provider_list_shows_and_sets_how_responses_requests_reach_it() {
    let app = spawn_app().await;
    let s = console_sign_in(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = post_form(
        &app,
        &s,
        "/console/admin/providers",
        None,
        &[
            ("csrf", &s.csrf),
            ("name", "up"),
            ("type", "openai"),
            ("base_url", "http://127.0.0.1:9/v1"),
            ("timeout_s", "5"),
            ("responses", "native"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, page) = get_page(&app, &s.cookie, "/console/admin/models").await;
    assert!(
        page.contains("<option value=\"native\" selected>native</option>"),
        "{page}"
    );
    let r = post_form(
        &app,
        &s,
        "/console/admin/providers/up/responses",
        None,
        &[("csrf", &s.csrf), ("responses", "bridge")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let admin = app.admin_token().await;
    let p: serde_json::Value = app
        .get("/api/admin/providers/up", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p["responses"], "bridge");
    let r = post_form(
        &app,
        &s,
        "/console/admin/providers/up/responses",
        None,
        &[("csrf", &s.csrf), ("responses", "sideways")],
    )
    .await;
    assert_ne!(r.status(), StatusCode::SEE_OTHER, "a bad mode is refused");
    let p: serde_json::Value = app
        .get("/api/admin/providers/up", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p["responses"], "bridge");
}
