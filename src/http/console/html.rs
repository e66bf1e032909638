//! The page shell: the document head every page has, and a page without
//! navigation (sign-in, errors), which needs no signed-in user.

use axum::response::Html;
use maud::{html, Markup, DOCTYPE};

pub fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · Gatehouse" }
            link rel="stylesheet" href="/console/static/console.css";
            link rel="icon" href="/console/static/favicon.svg" type="image/svg+xml";
        }
    }
}

/// A page without navigation (sign-in, errors).
pub fn bare(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title))
                body.bare { main { (body) } }
            }
        }
        .into_string(),
    )
}
