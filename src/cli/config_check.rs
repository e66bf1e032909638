//! `gatehouse config check [FILE]`: the `GATEHOUSE_CONFIG` file checked as
//! `serve` would apply it, without starting and without a database. Every
//! problem is listed, each naming its entry (`name`, `id` or `address`) or
//! the wrong value. References are resolved within the file: a model's
//! provider and an agent's model must be defined in it.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::json;

use super::{CliError, CliResult};
use crate::config::FileConfig;
use crate::models::{CatalogSnapshot, ModelForm, ModelKind, NewProvider, RoutingState};

/// What a file holds once it has no problems.
#[derive(Debug, PartialEq, Eq)]
pub struct Counts {
    pub providers: usize,
    pub models: usize,
    pub agents: usize,
    pub prices: usize,
    pub mcp_servers: usize,
}

fn tables<'a>(doc: &'a toml::Table, key: &str, problems: &mut Vec<String>) -> Vec<&'a toml::Value> {
    match doc.get(key) {
        None => Vec::new(),
        Some(toml::Value::Array(items)) => items.iter().collect(),
        Some(_) => {
            problems.push(format!("`{key}` must be an array of tables ([[{key}]])"));
            Vec::new()
        }
    }
}

/// How a problem names an entry: the value of `field`, else its place.
fn label(entry: &toml::Value, field: &str, i: usize) -> String {
    entry
        .get(field)
        .and_then(|v| v.as_str())
        .map_or_else(|| format!("#{}", i + 1), str::to_string)
}

/// Checks the text of a config file; `Err` lists every problem.
pub fn check_text(text: &str) -> Result<Counts, Vec<String>> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| {
        let at = e.span().map_or(String::new(), |span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: ")
        });
        vec![format!("not a TOML file: {at}{}", e.message().trim_end())]
    })?;
    let mut problems = Vec::new();

    // Names an entry declares even when the entry itself is wrong: a
    // reference to one is not reported again (one mistake, one problem).
    let declared = |key: &str, field: &str| -> HashSet<String> {
        doc.get(key)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|e| e.get(field).and_then(|v| v.as_str()).map(str::to_string))
            .collect()
    };
    let declared_providers = declared("providers", "name");
    let declared_models = declared("models", "id");

    let mut providers = Vec::new();
    let mut provider_names = HashSet::new();
    for (i, entry) in tables(&doc, "providers", &mut problems)
        .into_iter()
        .enumerate()
    {
        let who = format!("provider {}", label(entry, "name", i));
        match entry.clone().try_into::<NewProvider>() {
            Err(e) => problems.push(format!("{who}: {}", e.message())),
            Ok(p) => match p.validate() {
                Err(e) => problems.push(format!("{who}: {}", e.message)),
                Ok(row) if !provider_names.insert(row.name.clone()) => {
                    problems.push(format!("{who}: this name is used twice"))
                }
                Ok(row) => providers.push(row),
            },
        }
    }

    // Fallbacks may name any model of the file, in any order: kinds first.
    let model_tables = tables(&doc, "models", &mut problems);
    let mut forms = Vec::new();
    for (i, entry) in model_tables.into_iter().enumerate() {
        let who = format!("model {}", label(entry, "id", i));
        let parsed = entry
            .clone()
            .try_into::<ModelForm>()
            .map_err(|e| e.message().to_string());
        forms.push((who, parsed));
    }
    let kinds: HashMap<String, ModelKind> = forms
        .iter()
        .filter_map(|(_, m)| m.as_ref().ok())
        .filter_map(|m| Some((m.id.clone(), ModelKind::parse(&m.kind)?)))
        .collect();
    let mut models = Vec::new();
    let mut targets = Vec::new();
    let mut model_ids = HashSet::new();
    let mut specs = Vec::new();
    for (who, m) in forms {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{who}: {e}"));
                continue;
            }
        };
        let known = |p: &str| provider_names.contains(p) || declared_providers.contains(p);
        match m.validate(known, |id| kinds.get(id).copied()) {
            Err(e) => problems.push(format!("{who}: {e}")),
            Ok(spec) if !model_ids.insert(spec.id.clone()) => {
                problems.push(format!("{who}: this id is used twice"))
            }
            Ok(spec) => specs.push((who, spec)),
        }
    }
    for (who, spec) in &specs {
        let others = specs
            .iter()
            .filter(|(_, o)| o.id != spec.id)
            .map(|(_, o)| (o.id.as_str(), o.aliases.as_slice()));
        let provider_type = |p: &str| {
            providers
                .iter()
                .find(|r: &&crate::store::catalog::ProviderRow| r.name == p)
                .and_then(|r| crate::models::ProviderType::parse(&r.kind))
        };
        match spec.check_catalog(others, provider_type) {
            Err(e) => problems.push(format!("{who}: {e}")),
            Ok(()) => {
                let (row, t) = crate::models::rows_of(spec);
                models.push(row);
                targets.extend(t);
            }
        }
    }

    let catalog = CatalogSnapshot::build(
        providers.clone(),
        models.clone(),
        targets,
        &RoutingState::new(std::time::Duration::ZERO),
    );
    let now = crate::store::now_ms();
    // MCP servers before agents: an agent's `mcp` grant names them.
    let declared_mcp = declared("mcp_servers", "name");
    let mut mcp_names = HashSet::new();
    for (i, entry) in tables(&doc, "mcp_servers", &mut problems)
        .into_iter()
        .enumerate()
    {
        let raw = match serde_json::to_value(entry) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("mcp server #{}: {e}", i + 1));
                continue;
            }
        };
        let who = format!(
            "mcp server {}",
            crate::mcp::servers::file_server_label(&raw, i)
        );
        match crate::mcp::servers::parse_new(&raw, crate::mcp::servers::Source::Config, true, now) {
            Err(e) => problems.push(format!("{who}: {}", e.message)),
            Ok(s) if !mcp_names.insert(s.name.clone()) => {
                problems.push(format!("{who}: this name is used twice"))
            }
            Ok(_) => {}
        }
    }
    let mut agents = 0;
    let mut addresses = HashSet::new();
    for (i, entry) in tables(&doc, "agents", &mut problems)
        .into_iter()
        .enumerate()
    {
        let raw = match serde_json::to_value(entry) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("agent #{}: {e}", i + 1));
                continue;
            }
        };
        let who = format!("agent {}", crate::agents::file_agent_label(&raw, i));
        let model = raw.get("model").and_then(|m| m.as_str()).unwrap_or("");
        // A server declared with a problem of its own is not reported again here.
        let mcp_known = |s: &str| mcp_names.contains(s) || declared_mcp.contains(s);
        match crate::agents::parse_file_agent(&raw, &catalog, now, mcp_known) {
            Err(e)
                if e.param.as_deref() == Some("model")
                    && declared_models.contains(model)
                    && catalog.model(model).is_none() => {}
            Err(e) => problems.push(format!("{who}: {}", e.message)),
            Ok(a) if !addresses.insert(a.address.to_string()) => {
                problems.push(format!("{who}: this address is used twice"))
            }
            Ok(_) => agents += 1,
        }
    }

    // Prices name a provider of the file (no database here) and a pair once.
    let mut prices = 0;
    let mut pairs = HashSet::new();
    for (i, entry) in tables(&doc, "prices", &mut problems)
        .into_iter()
        .enumerate()
    {
        let raw = match serde_json::to_value(entry) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("price #{}: {e}", i + 1));
                continue;
            }
        };
        let who = crate::spend::price::file_price_label(&raw, i);
        match crate::spend::price::file_price(&raw) {
            Err(e) => problems.push(format!("{who}: {}", e.message)),
            Ok((p, _, _)) if !provider_names.contains(&p) && !declared_providers.contains(&p) => {
                problems.push(format!(
                    "{who}: there is no provider named '{p}' in the file"
                ))
            }
            Ok((p, m, _)) if !pairs.insert((p.clone(), m.clone())) => {
                problems.push(format!("{who}: this pair is priced twice"))
            }
            Ok(_) => prices += 1,
        }
    }

    // What the entries above do not cover (an unknown section, a table in
    // the wrong place) fails here exactly as it would at start.
    if problems.is_empty() {
        if let Err(e) = toml::from_str::<FileConfig>(text) {
            problems.push(e.message().to_string());
        }
    }
    if problems.is_empty() {
        Ok(Counts {
            providers: providers.len(),
            models: models.len(),
            agents,
            prices,
            mcp_servers: mcp_names.len(),
        })
    } else {
        Err(problems)
    }
}

/// Runs the check on `file`, else on `GATEHOUSE_CONFIG`.
pub fn run(file: Option<&Path>, configured: Option<&Path>) -> CliResult {
    let Some(path) = file.or(configured) else {
        return Err(CliError::usage(
            "name a config file (gatehouse config check FILE) or set GATEHOUSE_CONFIG",
        ));
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::failed(format!("cannot read {}: {e}", path.display())))?;
    match check_text(&text) {
        Ok(c) => super::print_json(&json!({
            "file": path.display().to_string(),
            "ok": true,
            "providers": c.providers,
            "models": c.models,
            "agents": c.agents,
            "prices": c.prices,
            "mcp_servers": c.mcp_servers,
        })),
        Err(problems) => {
            super::print_json(&json!({
                "file": path.display().to_string(),
                "ok": false,
                "problems": problems,
            }))?;
            Err(CliError::failed(format!(
                "{}: {} problem{}: {}",
                path.display(),
                problems.len(),
                if problems.len() == 1 { "" } else { "s" },
                problems.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[providers]]
name = "p"
type = "openai"
base_url = "http://127.0.0.1:9/v1"

[[models]]
id = "m"
kind = "chat"
provider = "p"
upstream_model = "u"

[[agents]]
address = "a"
name = "A"
model = "m"

[[prices]]
provider = "p"
upstream_model = "org/u"
input = "1.00"
output = "2"
tiers = [{ above_prompt_tokens = 1000, input = "2", output = "4" }]
"#;

    #[test]
    fn a_consistent_file_is_counted() {
        assert_eq!(
            check_text(GOOD).unwrap(),
            Counts {
                providers: 1,
                models: 1,
                agents: 1,
                prices: 1,
                mcp_servers: 0,
            }
        );
    }

    /// GOOD with `line` added to its agent's table.
    fn with_agent_line(line: &str) -> String {
        GOOD.replace("model = \"m\"\n", &format!("model = \"m\"\n{line}"))
    }

    const MCP: &str = r#"
[[mcp_servers]]
name = "alpha"
url = "http://127.0.0.1:9001/mcp"
timeout_s = 60
headers = { Authorization = "Bearer up-secret" }
tools = ["*"]
tool_classes = { write_note = "write" }
"#;

    #[test]
    fn mcp_servers_are_counted_and_agents_may_grant_them() {
        let grant = "mcp = { servers = [\"alpha\"], tools = { alpha = [\"get_*\"] } }\n";
        let text = format!("{}{MCP}", with_agent_line(grant));
        assert_eq!(check_text(&text).expect("valid").mcp_servers, 1);
    }

    #[test]
    fn each_mcp_server_problem_names_the_server_and_never_a_header_value() {
        let text = format!(
            "{MCP}\n[[mcp_servers]]\nname = \"beta\"\nurl = \"http://x\"\ntimeout_s = 3601\n\
             \n[[mcp_servers]]\nname = \"gamma\"\nurl = \"http://x\"\ntool_classes = {{ write_note = \"delete\" }}\n\
             \n[[mcp_servers]]\nname = \"delta\"\nurl = \"http://x\"\nheaders = {{ \"Bad Name\" = \"s3cr3t\" }}\n\
             \n[[mcp_servers]]\nname = \"alpha\"\nurl = \"http://y\"\n\
             \n[[mcp_servers]]\nname = \"Bad_Name\"\nurl = \"http://y\"\ncolour = 1\n"
        );
        let problems = check_text(&text).unwrap_err();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].starts_with("mcp server beta: ") && problems[0].contains("timeout_s"));
        assert!(
            problems[1].starts_with("mcp server gamma: ") && problems[1].contains("write_note")
        );
        assert!(problems[2].starts_with("mcp server delta: ") && problems[2].contains("Bad Name"));
        assert!(!problems[2].contains("s3cr3t"));
        assert_eq!(problems[3], "mcp server alpha: this name is used twice");
        assert!(problems[4].starts_with("mcp server Bad_Name: ") && problems[4].contains("colour"));
    }

    #[test]
    fn an_agent_granting_an_unknown_mcp_server_is_a_problem() {
        let text = format!(
            "{}{MCP}",
            with_agent_line("mcp = { servers = [\"nowhere\"] }\n")
        );
        let problems = check_text(&text).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("agent a: ") && problems[0].contains("nowhere"));
    }

    #[test]
    fn price_problems_name_the_pair_and_the_field() {
        let text = format!(
            "{GOOD}\n{}",
            r#"
[[prices]]
provider = "p"
upstream_model = "v"
input = "1"
output = 2

[[prices]]
provider = "p"
upstream_model = "w"
input = "1"
output = "1"
tiers = [{ above_prompt_tokens = 5, input = "1", output = "1" }, { above_prompt_tokens = 5, input = "1", output = "1" }]

[[prices]]
provider = "nobody"
upstream_model = "x"
input = "1"
output = "1"

[[prices]]
provider = "p"
upstream_model = "org/u"
input = "1000000.000000001"
output = "1"
"#
        );
        let problems = check_text(&text).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(
            problems[0].starts_with("price p/v: 'output'"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("price p/w: 'tiers[1].above_prompt_tokens'"),
            "{problems:?}"
        );
        assert!(problems[2].starts_with("price nobody/x: "), "{problems:?}");
        assert!(
            problems[3].starts_with("price p/org/u: 'input'"),
            "{problems:?}"
        );
    }

    #[test]
    fn every_problem_is_listed_naming_its_entry() {
        let text = r#"
[[providers]]
name = "p"
type = "grpc"
base_url = "http://x"

[[models]]
id = "m"
kind = "chat"
provider = "nowhere"
upstream_model = "u"

[[models]]
kind = "chat"
provider = "p"
upstream_model = "u"

[[agents]]
address = "a"
name = "A"
model = "m"
colour = "blue"
"#;
        let problems = check_text(text).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].starts_with("provider p: ") && problems[0].contains("type"));
        assert!(problems[1].starts_with("model m: ") && problems[1].contains("nowhere"));
        assert!(problems[2].starts_with("model #2: ") && problems[2].contains("id"));
        assert!(problems[3].starts_with("agent a: ") && problems[3].contains("colour"));
    }

    #[test]
    fn the_responses_mode_is_checked_naming_the_provider() {
        let native = GOOD.replace(
            "type = \"openai\"",
            "type = \"openai\"\nresponses = \"native\"",
        );
        assert!(check_text(&native).is_ok());
        let sideways = GOOD.replace(
            "type = \"openai\"",
            "type = \"openai\"\nresponses = \"sideways\"",
        );
        let problems = check_text(&sideways).unwrap_err();
        assert!(
            problems[0].starts_with("provider p: ") && problems[0].contains("'responses'"),
            "{problems:?}"
        );
        let tei = "[[providers]]\nname = \"t\"\ntype = \"tei\"\nbase_url = \"http://x\"\nresponses = \"bridge\"\n";
        let problems = check_text(tei).unwrap_err();
        assert!(
            problems[0].starts_with("provider t: ") && problems[0].contains("'responses'"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_wrong_entry_is_one_problem_not_one_per_reference_to_it() {
        let text = GOOD.replace("type = \"openai\"", "type = \"grpc\"");
        let problems = check_text(&text).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("provider p: "), "{problems:?}");
    }

    #[test]
    fn text_that_is_not_toml_is_one_problem_with_its_place() {
        let problems = check_text("[[providers]]\nname = \n").unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("not a TOML file: line 2, column 8: "),
            "{problems:?}"
        );
    }

    #[test]
    fn an_unknown_section_is_refused_as_at_start() {
        let problems = check_text("[[gateways]]\nname = \"x\"\n").unwrap_err();
        assert!(problems[0].contains("gateways"), "{problems:?}");
    }

    #[test]
    fn names_used_twice_are_problems() {
        let text = format!(
            "{GOOD}\n[[providers]]\nname = \"p\"\ntype = \"tei\"\nbase_url = \"http://y\"\n"
        );
        let problems = check_text(&text).unwrap_err();
        assert_eq!(problems, ["provider p: this name is used twice"]);
    }

    #[test]
    fn anthropic_providers_and_aliases_are_checked_as_at_start() {
        let good = r#"
[[providers]]
name = "claude"
type = "anthropic"
base_url = "https://api.anthropic.com"
beta_headers = ["interleaved-thinking-2025-05-14"]

[[models]]
id = "sonnet"
kind = "chat"
provider = "claude"
upstream_model = "claude-sonnet-4-5"
aliases = ["claude-sonnet-*"]
max_tokens_default = 8192
"#;
        assert_eq!(check_text(good).unwrap().models, 1);
        let bad = r#"
[[providers]]
name = "claude"
type = "anthropic"
base_url = "https://api.anthropic.com"
beta_headers = "keep"

[[providers]]
name = "claude2"
type = "anthropic"
base_url = "https://api.anthropic.com"

[[models]]
id = "emb"
kind = "embeddings"
provider = "claude2"
upstream_model = "x"

[[models]]
id = "a"
kind = "chat"
provider = "claude2"
upstream_model = "x"
aliases = ["shared"]

[[models]]
id = "b"
kind = "chat"
provider = "claude2"
upstream_model = "y"
aliases = ["shared"]
"#;
        let problems = check_text(bad).unwrap_err();
        for (entry, says) in [
            ("provider claude", "beta_headers"),
            ("model emb", "anthropic"),
            ("model a", "aliases"),
        ] {
            assert!(
                problems
                    .iter()
                    .any(|p| p.starts_with(&format!("{entry}: ")) && p.contains(says)),
                "no problem naming {entry} and {says}: {problems:?}"
            );
        }
    }
}
