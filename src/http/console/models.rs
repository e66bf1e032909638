//! Providers and models: the providers with their attempt and failure
//! counters, every model with its targets and their state in this server
//! (healthy, failing, resting until when, requests in flight), its routing
//! and fallbacks; adding, changing and deleting through the admin API's
//! functions (`http::admin`, `http::admin_models`) and their checks.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use maud::{html, Markup};
use serde_json::{json, Value};

use super::forms::{admin_only, body_of, list_field, redirect, DoneQuery};
use super::guard::{ConsoleAdmin, ConsoleError, ConsoleUser, Out, Posted};
use super::layout::{button_form, csrf, done_note, enc, page, when};
use crate::app::AppState;
use crate::models::routing::{mono_ms, Cause, TargetState, FAILURES_TO_REST};
use crate::models::{spec_of, ModelForm, ModelPatch, ModelSpec, NewProvider};
use crate::store::catalog::TargetRow;
use crate::store::now_ms;

/// How a target's state reads: a CSS class and a sentence. `now` is the
/// wall clock, to turn the rest's remaining time into a time of day.
pub fn state_text(s: &TargetState, now: i64) -> (&'static str, String) {
    match (s.healthy, s.rest_ends_in_ms) {
        (true, _) if s.failures == 0 => ("healthy", "healthy".into()),
        (true, _) => (
            "failing",
            format!(
                "healthy, {} failure(s) in a row ({} rest it)",
                s.failures, FAILURES_TO_REST
            ),
        ),
        (false, Some(d)) if d > 0 => (
            "resting",
            format!(
                "resting until {} ({} failures in a row)",
                when(now.saturating_add(d)),
                s.failures
            ),
        ),
        (false, _) => (
            "resting",
            format!(
                "rest over, waiting for its trial request ({} failures in a row)",
                s.failures
            ),
        ),
    }
}

/// Every model, as the API reads it (its targets, routing, fallbacks), with
/// when it was created.
async fn all_models(app: &AppState) -> Result<Vec<(ModelSpec, i64)>, ConsoleError> {
    let rows = app.store.list_models().await?;
    let mut targets: HashMap<String, Vec<TargetRow>> = HashMap::new();
    for t in app.store.list_model_targets().await? {
        targets.entry(t.model_id.clone()).or_default().push(t);
    }
    Ok(rows
        .iter()
        .filter_map(|m| {
            spec_of(m, targets.remove(&m.id).unwrap_or_default()).map(|s| (s, m.created_at))
        })
        .collect())
}

/// Targets that are not healthy now, for the overview: (model, target,
/// what its state reads).
pub async fn unhealthy_targets(
    app: &AppState,
) -> Result<Vec<(String, String, String)>, ConsoleError> {
    let (mono, wall) = (mono_ms(), now_ms());
    let mut out = Vec::new();
    for (m, _) in all_models(app).await? {
        for t in &m.targets {
            let s = app
                .routing
                .health
                .get(&t.provider, &t.upstream_model)
                .state(mono);
            if !s.healthy {
                out.push((
                    m.id.clone(),
                    format!("{}/{}", t.provider, t.upstream_model),
                    state_text(&s, wall).1,
                ));
            }
        }
    }
    Ok(out)
}

/// A model's targets with their state in this server.
fn targets_table(app: &AppState, spec: &ModelSpec) -> Markup {
    let (mono, wall) = (mono_ms(), now_ms());
    html! {
        table.targets {
            thead { tr { th { "Provider" } th { "Upstream model" } th { "Weight" } th { "State" } th { "In flight" } } }
            tbody {
                @for t in &spec.targets {
                    @let s = app.routing.health.get(&t.provider, &t.upstream_model).state(mono);
                    @let (class, text) = state_text(&s, wall);
                    tr data-target=(format!("{}/{}", t.provider, t.upstream_model)) {
                        td { (t.provider) }
                        td { code { (t.upstream_model) } }
                        td { (t.weight) }
                        td { span class=(format!("state {class}")) { (text) } }
                        td { (s.in_flight) }
                    }
                }
            }
        }
    }
}

pub async fn models(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<DoneQuery>,
) -> Out {
    let providers = app.store.list_providers().await?;
    let models = all_models(&app).await?;
    let body = html! {
        h1 { "Providers and models" }
        (done_note(q.done.as_deref()))
        h2 #providers { "Providers" }
        p.muted { "Attempts and failures since this server started (all its models)." }
        table {
            thead { tr { th { "Name" } th { "Type" } th { "Base URL" } th { "Timeout" } th { "API key" } th { "Attempts" } th { "Failures" } th {} } }
            tbody {
                @for p in &providers {
                    @let stats = app.routing.stats.get(&p.name);
                    @let failures: Vec<(Cause, u64)> = Cause::ALL.iter().map(|c| (*c, stats.failures(*c))).filter(|(_, n)| *n > 0).collect();
                    tr data-provider=(p.name) {
                        td { (p.name) } td { (p.kind) } td { code { (p.base_url) } } td { (p.timeout_s) " s" }
                        td { @if p.api_key.is_some() { "set" } @else { "—" } }
                        td { (stats.attempts()) }
                        td.failures {
                            @if failures.is_empty() { "0" } @else {
                                @for (i, (c, n)) in failures.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    (n) " " (c.as_str())
                                }
                            }
                        }
                        td { (button_form(&user, &format!("/console/admin/providers/{}/delete", enc(&p.name)), "Delete", "danger")) }
                    }
                }
            }
        }
        form.row method="post" action="/console/admin/providers" {
            (csrf(&user))
            label { "Name" input name="name" required; }
            label { "Type" select name="type" { option value="openai" { "openai" } option value="anthropic" { "anthropic" } option value="tei" { "tei" } option value="cohere" { "cohere" } } }
            label { "Base URL" input name="base_url" placeholder="http://127.0.0.1:8000/v1" required; }
            label { "API key (optional)" input type="password" name="api_key" autocomplete="off"; }
            label { "Timeout (s)" input type="number" name="timeout_s" min="1" max="3600" value="120"; }
            label { "Anthropic version (anthropic only)" input name="anthropic_version" placeholder="2023-06-01"; }
            label { "Beta headers (anthropic only: forward, drop, or allowed names, comma-separated)" input name="beta_headers" placeholder="forward"; }
            button type="submit" { "Add provider" }
        }
        h2 { "Models" }
        p.muted { "Target states are this server's: a target rests after " (FAILURES_TO_REST) " failures in a row, then gets one trial request." }
        @if models.is_empty() { p.empty { "No models yet." } }
        @for (m, created) in &models {
            section.model id=(format!("model-{}", m.id)) data-model=(m.id) {
                h3 { a href=(format!("/console/admin/models/{}", enc(&m.id))) { (m.id) } }
                p.muted {
                    (m.kind.as_str()) " · routing " code { (m.routing.as_str()) }
                    " · at most " (m.max_attempts) " attempt(s)"
                    @if !m.aliases.is_empty() { " · aliases: " span.aliases { (m.aliases.join(", ")) } }
                    " · fallbacks: " span.fallbacks { @if m.fallbacks.is_empty() { "none" } @else { (m.fallbacks.join(" → ")) } }
                    " · created " (when(*created))
                }
                (targets_table(&app, m))
            }
        }
        h2 #new-model { "New model" }
        (model_form(&user, None, &providers.iter().map(|p| p.name.clone()).collect::<Vec<_>>(), &models.iter().map(|(m, _)| m.id.clone()).collect::<Vec<_>>()))
    };
    Ok(page(
        &user,
        "Providers and models",
        "/console/admin/models",
        body,
    ))
}

/// Rows of target fields (`provider_N`, `upstream_model_N`, `weight_N`): the
/// model's targets and two blank rows to add more. A row whose upstream
/// model is blank is left out (that removes a target).
fn target_rows(current: &[crate::models::TargetSpec], providers: &[String]) -> Markup {
    let blank = crate::models::TargetSpec {
        provider: providers.first().cloned().unwrap_or_default(),
        upstream_model: String::new(),
        weight: 1,
    };
    let rows: Vec<&crate::models::TargetSpec> = current.iter().chain([&blank, &blank]).collect();
    html! {
        table.target-form {
            thead { tr { th { "Provider" } th { "Upstream model (blank: none)" } th { "Weight" } } }
            tbody {
                @for (i, t) in rows.iter().enumerate() {
                    tr {
                        td { select name=(format!("provider_{i}")) aria-label="Provider" {
                            @for p in providers { option value=(p) selected[*p == t.provider] { (p) } }
                        } }
                        td { input name=(format!("upstream_model_{i}")) value=(t.upstream_model) aria-label="Upstream model"; }
                        td { input name=(format!("weight_{i}")) value=(t.weight) size="4" inputmode="numeric" aria-label="Weight"; }
                    }
                }
            }
        }
    }
}

/// The add form (no model) or the change form of a model.
fn model_form(
    user: &ConsoleUser,
    model: Option<&ModelSpec>,
    providers: &[String],
    all: &[String],
) -> Markup {
    let action = match model {
        Some(m) => format!("/console/admin/models/{}", enc(&m.id)),
        None => "/console/admin/models".into(),
    };
    let routing = model.map(|m| m.routing.as_str()).unwrap_or("weighted");
    html! {
        form.stack method="post" action=(action) {
            (csrf(user))
            @if model.is_none() {
                label { "Id (what clients send)" input name="id" required; }
                label { "Kind" select name="kind" { option value="chat" { "chat" } option value="embeddings" { "embeddings" } option value="scoring" { "scoring" } } }
            }
            fieldset {
                legend { "Targets" }
                (target_rows(model.map(|m| m.targets.as_slice()).unwrap_or(&[]), providers))
            }
            label { "Routing" select name="routing" {
                @for r in ["weighted", "least_busy"] { option value=(r) selected[r == routing] { (r) } }
            } }
            label { "Fallbacks (model ids of the same kind, in order, comma-separated)"
                input name="fallbacks" value=(model.map(|m| m.fallbacks.join(", ")).unwrap_or_default()) list="model-ids";
            }
            datalist id="model-ids" { @for id in all { option value=(id) {} } }
            label { "Attempts at most (1 to 10, fallbacks included)"
                input name="max_attempts" value=(model.map(|m| m.max_attempts).unwrap_or(3)) size="4" inputmode="numeric";
            }
            label { "Aliases (other names clients may send, comma-separated; at most 32; one trailing * matches a prefix)"
                input name="aliases" value=(model.map(|m| m.aliases.join(", ")).unwrap_or_default());
            }
            label { "Default max_tokens for anthropic targets (1 to 1,000,000)"
                input name="max_tokens_default" value=(model.map(|m| m.max_tokens_default).unwrap_or(crate::models::routing::form::DEFAULT_MAX_TOKENS)) size="8" inputmode="numeric";
            }
            button type="submit" { @if model.is_some() { "Save model" } @else { "Add model" } }
        }
    }
}

/// The form's target rows as the API's `targets`; a weight that is not a
/// number is passed on as text so the API's check names it.
fn targets_json(posted: &Posted) -> Value {
    let mut out = Vec::new();
    for i in 0..100 {
        let Some(provider) = posted.form.get(&format!("provider_{i}")) else {
            break;
        };
        let upstream = posted.get(&format!("upstream_model_{i}")).trim();
        if upstream.is_empty() {
            continue;
        }
        let w = posted.get(&format!("weight_{i}")).trim();
        let weight = match w.parse::<i64>() {
            _ if w.is_empty() => Value::Null,
            Ok(n) => json!(n),
            Err(_) => json!(w),
        };
        out.push(json!({"provider": provider, "upstream_model": upstream, "weight": weight}));
    }
    Value::Array(out)
}

fn number_or_text(s: &str) -> Value {
    match s.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) if s.trim().is_empty() => Value::Null,
        Err(_) => json!(s.trim()),
    }
}

pub async fn create_model(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    let body: ModelForm = body_of(json!({
        "id": posted.get("id").trim(), "kind": posted.get("kind"),
        "targets": targets_json(&posted), "routing": posted.opt("routing"),
        "fallbacks": list_field(posted.get("fallbacks")),
        "max_attempts": number_or_text(posted.get("max_attempts")),
        "aliases": list_field(posted.get("aliases")),
        "max_tokens_default": number_or_text(posted.get("max_tokens_default")),
    }))?;
    crate::http::routes::admin_models::add_model(&app, &body).await?;
    redirect("/console/admin/models?done=created")
}

/// One model: its targets' state and the form that changes it.
pub async fn model(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Path(id): Path<String>,
    Query(q): Query<DoneQuery>,
) -> Out {
    let (m, created) = all_models(&app)
        .await?
        .into_iter()
        .find(|(m, _)| m.id == id)
        .ok_or_else(|| {
            ConsoleError::new(StatusCode::NOT_FOUND, "There is no model with this id.")
        })?;
    let providers: Vec<String> = app
        .store
        .list_providers()
        .await?
        .into_iter()
        .map(|p| p.name)
        .collect();
    let all: Vec<String> = app
        .store
        .list_models()
        .await?
        .into_iter()
        .filter(|x| x.id != id && x.kind == m.kind.as_str())
        .map(|x| x.id)
        .collect();
    let base = format!("/console/admin/models/{}", enc(&id));
    let body = html! {
        h1 { "Model " (m.id) }
        (done_note(q.done.as_deref()))
        p.muted { (m.kind.as_str()) " · created " (when(created)) " · fallbacks: " @if m.fallbacks.is_empty() { "none" } @else { (m.fallbacks.join(" → ")) } }
        h2 { "Targets now" }
        (targets_table(&app, &m))
        h2 { "Change" }
        (model_form(&user, Some(&m), &providers, &all))
        h2 { "Delete" }
        p.muted { "Only a model no agent chats with and no model falls back on." }
        (button_form(&user, &format!("{base}/delete"), "Delete model", "danger"))
        p { a href="/console/admin/models" { "← Providers and models" } }
    };
    Ok(page(&user, "Model", "/console/admin/models", body))
}

pub async fn change_model(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    let body: ModelPatch = body_of(json!({
        "targets": targets_json(&posted), "routing": posted.opt("routing"),
        "fallbacks": list_field(posted.get("fallbacks")),
        "max_attempts": number_or_text(posted.get("max_attempts")),
        "aliases": list_field(posted.get("aliases")),
        "max_tokens_default": number_or_text(posted.get("max_tokens_default")),
    }))?;
    crate::http::routes::admin_models::change_model(&app, &id, &body).await?;
    redirect(&format!("/console/admin/models/{}?done=updated", enc(&id)))
}

pub async fn create_provider(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    let body: NewProvider = body_of(json!({
        "name": posted.get("name").trim(), "type": posted.get("type"), "base_url": posted.get("base_url"),
        "api_key": posted.opt("api_key"), "timeout_s": number_or_text(posted.get("timeout_s")),
        "anthropic_version": posted.opt("anthropic_version"),
        "beta_headers": beta_field(posted.get("beta_headers")),
    }))?;
    crate::http::routes::admin::add_provider(&app, &body).await?;
    redirect("/console/admin/models?done=created")
}

/// The form's `beta_headers`: empty (not given), `forward`, `drop`, or a list.
fn beta_field(s: &str) -> Value {
    match s.trim() {
        "" => Value::Null,
        "forward" | "drop" => json!(s.trim()),
        list => json!(list_field(list)),
    }
}

pub async fn delete_provider(
    State(app): State<AppState>,
    Path(name): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    crate::http::routes::admin::remove_provider(&app, &name).await?;
    redirect("/console/admin/models?done=deleted")
}

pub async fn delete_model(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    crate::http::routes::admin_models::remove_model(&app, &id).await?;
    redirect("/console/admin/models?done=deleted")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(healthy: bool, failures: u32, rest: Option<i64>) -> TargetState {
        TargetState {
            healthy,
            in_flight: 0,
            failures,
            rest_ends_in_ms: rest,
        }
    }

    #[test]
    fn a_target_state_reads_healthy_failing_resting_or_awaiting_its_trial() {
        assert_eq!(state_text(&state(true, 0, None), 0).0, "healthy");
        assert_eq!(state_text(&state(true, 2, None), 0).0, "failing");
        let (class, text) = state_text(&state(false, 3, Some(30_000)), 0);
        assert_eq!(class, "resting");
        assert!(
            text.starts_with("resting until 1970-01-01 00:00:30 UTC"),
            "{text}"
        );
        let (_, text) = state_text(&state(false, 3, Some(-5)), 0);
        assert!(text.contains("waiting for its trial"), "{text}");
    }
}
