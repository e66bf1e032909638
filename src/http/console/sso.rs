//! Single sign-on providers (admins): list, add (the issuer's discovery
//! document is read and checked first), delete. The same `crate::sso::Sso`
//! calls as `/api/admin/sso`, so the console and the API accept and refuse
//! the same things with the same messages. The client secret is never shown.

use axum::extract::{Path, Query, State};
use maud::html;
use serde_json::{json, Value};

use super::forms::{admin_only, body_of, list_field, redirect, DoneQuery};
use super::guard::{ConsoleAdmin, Out, Posted};
use super::layout::{button_form, csrf, done_note, enc, page};
use crate::app::AppState;
use crate::error::Error;
use crate::sso::NewSsoProvider;

pub async fn providers(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<DoneQuery>,
) -> Out {
    let list = app.sso.list(&app.store).await.map_err(Error::from)?;
    let body = html! {
        h1 { "Single sign-on" }
        (done_note(q.done.as_deref()))
        p { "OpenID Connect providers people can sign in with, here and in agent apps. Register the redirect URI shown with each one at the provider." }
        @if list.is_empty() { p.empty { "No single sign-on providers yet: people sign in with a password." } } @else {
            table id="sso" {
                thead { tr { th { "Name" } th { "Button" } th { "Issuer" } th { "Client id" } th { "Domains" } th { "Admin group" } th { "New users" } th { "Redirect URI" } th { "From" } th {} } }
                tbody {
                    @for p in &list {
                        @let v = p.view(&app.public_url);
                        tr data-sso=(v.name) {
                            td { (v.name) }
                            td { (v.display_name) }
                            td { code { (v.issuer) } }
                            td { code { (v.client_id) } }
                            td { @if v.allowed_domains.is_empty() { "any" } @else { (v.allowed_domains.join(", ")) } }
                            td { (v.admin_group.clone().unwrap_or_else(|| "—".into())) }
                            td { @if v.create_users { "created" } @else { "must exist" } }
                            td { code { (v.redirect_uri) } }
                            td { (v.source) }
                            td { (button_form(&user, &format!("/console/admin/sso/{}/delete", enc(&v.name)), "Delete", "danger")) }
                        }
                    }
                }
            }
            p.muted { "A provider from the configuration file comes back at the next start unless it is removed there too. Users a provider created stay when it is deleted." }
        }
        h2 { "New provider" }
        form.stack method="post" action="/console/admin/sso" {
            (csrf(&user))
            label { "Name (a-z, 0-9, _ and -)" input name="name" required pattern="[a-z0-9_\\-]{1,64}"; }
            label { "Button label (optional)" input name="display_name"; }
            label { "Issuer URL" input name="issuer" type="url" placeholder="https://login.example.com/realms/corp" required; }
            label { "Client id" input name="client_id" required autocomplete="off"; }
            label { "Client secret" input name="client_secret" type="password" required autocomplete="off"; }
            label { "Allowed e-mail domains (comma-separated; empty: any)" input name="allowed_domains"; }
            label { "Admin group (optional: members become admins)" input name="admin_group"; }
            label.check { input type="checkbox" name="create_users" value="true" checked; " create users on their first sign-in" }
            label { "Agent app redirect URIs (comma-separated, optional)" input name="app_redirect_uris"; }
            button type="submit" { "Add provider" }
        }
    };
    Ok(page(&user, "Single sign-on", "/console/admin/sso", body))
}

fn opt_list(s: &str) -> Value {
    let l = list_field(s);
    if l.is_empty() {
        Value::Null
    } else {
        json!(l)
    }
}

pub async fn create(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    let body: NewSsoProvider = body_of(json!({
        "name": posted.get("name").trim(),
        "issuer": posted.get("issuer").trim(),
        "client_id": posted.get("client_id").trim(),
        "client_secret": posted.get("client_secret"),
        "display_name": posted.opt("display_name"),
        "allowed_domains": opt_list(posted.get("allowed_domains")),
        "admin_group": posted.opt("admin_group"),
        "create_users": posted.get("create_users") == "true",
        "app_redirect_uris": opt_list(posted.get("app_redirect_uris")),
    }))?;
    app.sso.add(&app.store, &body).await.map_err(Error::from)?;
    redirect("/console/admin/sso?done=created")
}

pub async fn delete(State(app): State<AppState>, Path(name): Path<String>, posted: Posted) -> Out {
    admin_only(&posted)?;
    app.sso
        .delete(&app.store, &name)
        .await
        .map_err(Error::from)?;
    redirect("/console/admin/sso?done=deleted")
}
