//! The page frame and small helpers every page uses. maud escapes every
//! `(value)` it writes; nothing here uses `PreEscaped` on data.

use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use super::guard::ConsoleUser;
use super::html::head;

const ADMIN_NAV: [(&str, &str); 9] = [
    ("/console/", "Overview"),
    ("/console/admin/users", "Users"),
    ("/console/admin/models", "Providers & models"),
    ("/console/admin/sso", "SSO"),
    ("/console/admin/agents", "Agents"),
    ("/console/admin/sign-ins", "Sign-ins"),
    ("/console/admin/mcp", "MCP servers"),
    ("/console/admin/usage", "Usage"),
    ("/console/admin/prices", "Prices"),
];
const USER_NAV: [(&str, &str); 2] = [
    ("/console/keys", "My API keys"),
    ("/console/sign-ins", "My sign-ins"),
];

/// A page of the signed-in console: navigation, the user, sign-out.
pub fn page(user: &ConsoleUser, title: &str, current: &str, body: Markup) -> Response {
    let nav = |items: &[(&str, &str)]| {
        html! {
            @for (href, label) in items {
                @if *href == current {
                    a.current href=(href) aria-current="page" { (label) }
                } @else {
                    a href=(href) { (label) }
                }
            }
        }
    };
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title))
                body {
                    header {
                        a.brand href="/console/" { "Gatehouse" }
                        nav {
                            @if user.is_admin() { (nav(&ADMIN_NAV)) }
                            (nav(&USER_NAV))
                        }
                        form.signout method="post" action="/console/logout" {
                            span.who { (user.session.user.email) }
                            (csrf(user))
                            button type="submit" { "Sign out" }
                        }
                    }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
    .into_response()
}

/// The hidden CSRF field every form carries.
pub fn csrf(user: &ConsoleUser) -> Markup {
    html! { input type="hidden" name="csrf" value=(user.session.csrf); }
}

/// A one-button form that posts to `action` (end, delete, accept...).
pub fn button_form(user: &ConsoleUser, action: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf(user))
            button class=(class) type="submit" { (label) }
        }
    }
}

/// A time as people read it (UTC, to the second).
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

pub fn opt_when(ms: Option<i64>) -> String {
    ms.map(when).unwrap_or_else(|| "—".into())
}

/// A fixed message for `?done=`: never text from the query itself.
pub fn done_note(done: Option<&str>) -> Markup {
    let text = match done {
        Some("created") => "Created.",
        Some("updated") => "Saved.",
        Some("deleted") => "Deleted.",
        Some("ended") => "Sign-in ended.",
        Some("price-ended") => "Price ended: later requests for this pair are unpriced.",
        Some("accepted") => "Tool accepted: it reaches the model from now on.",
        Some("rejected") => "Tool rejected: it stays held.",
        Some("approved") => {
            "Approved: the call may go ahead (an MCP call once, when it is made again)."
        }
        Some("denied") => "Denied: the call is answered as denied.",
        _ => return html! {},
    };
    html! { p.note role="status" { (text) } }
}

/// A path segment or query value, percent-encoded.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
