//! What agent chat adds around the relay: PII restore (also across stream
//! chunks), approvals for `write`/`execute` tool calls in `ask` mode, and
//! AG-UI events. Plain answers and streams get the same treatment.
//!
//! The AG-UI endpoint uses the same hooks [`AgentHooks::events_only`]: its
//! answer is the AG-UI events alone (plain `data:` messages), and there they
//! describe the answer as the client gets it, PII values restored, since
//! the events are the answer; `CUSTOM` events never carry values.
//!
//! A Messages answer passed through to an `anthropic` provider goes through
//! the same rules, its blocks and events read as the chunks above
//! ([`messages`]).

mod messages;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gatehouse_pii::{Counts, StreamRestorer, Vault};
use serde_json::{json, Map, Value};

use crate::agents::tools::{ToolClass, ToolMode};
use crate::error::Error;
use crate::proxy::chat::{ChatHooks, ChunkAction};
use crate::store::agent_data::{new_approval_id, ApprovalRow};
use crate::store::{now_ms, Store};
use crate::wire::agui::AgUi;
use crate::wire::chat::tool_calls_of_response;
use crate::wire::sse::SseFrame;
use crate::wire::ToolCall;

/// Who is chatting and under which rules.
pub struct AgentChatContext {
    pub store: Store,
    /// How long an approval waits for its answer, seconds.
    pub approval_ttl: i64,
    pub agent: String,
    pub model_alias: String,
    pub user_id: String,
    pub device_id: String,
    pub conversation_id: Option<String>,
    pub mode: ToolMode,
    pub classes: Arc<HashMap<String, ToolClass>>,
    pub held: Vec<String>,
    pub pii_counts: Counts,
    /// Present in `tokenize_reversible` mode.
    pub vault: Option<Arc<Vault>>,
    /// Present when the client asked for AG-UI events: (threadId, runId).
    pub ag_ui: Option<(String, String)>,
}

#[derive(Default)]
struct CallAcc {
    id: String,
    name: String,
    args: String,
}

pub struct AgentHooks {
    ctx: AgentChatContext,
    content: HashMap<u64, StreamRestorer>,
    args: HashMap<(u64, u64), StreamRestorer>,
    calls: BTreeMap<u64, CallAcc>,
    agui: Option<AgUi>,
    started: bool,
    meta: Map<String, Value>,
    /// Tools whose calls carry `{"input": ...}` (Responses custom tools):
    /// their approvals show the input.
    custom: Vec<String>,
    /// The answer is the AG-UI events alone (see the module documentation).
    events_only: bool,
    /// A Messages stream passed through ([`messages`]).
    passed: messages::Passed,
}

fn agui_frame(ev: Value) -> SseFrame {
    SseFrame::Event {
        event: "ag-ui".into(),
        data: ev.to_string(),
    }
}

fn agui_data(ev: Value) -> SseFrame {
    SseFrame::json(&ev)
}

/// How an AG-UI event is framed: `event: ag-ui` beside OpenAI chunks, a
/// plain `data:` message when the events are the whole answer.
fn framer(events_only: bool) -> fn(Value) -> SseFrame {
    if events_only {
        agui_data
    } else {
        agui_frame
    }
}

impl AgentHooks {
    pub fn new(ctx: AgentChatContext) -> AgentHooks {
        let agui = ctx.ag_ui.clone().map(|(t, r)| AgUi::new(t, r));
        AgentHooks {
            ctx,
            content: HashMap::new(),
            args: HashMap::new(),
            calls: BTreeMap::new(),
            agui,
            started: false,
            meta: Map::new(),
            custom: Vec::new(),
            events_only: false,
            passed: messages::Passed::default(),
        }
    }

    /// Names the request's custom tools (Responses): an approval for a call
    /// of one carries its `input` as its arguments.
    pub fn with_custom_tools(mut self, names: Vec<String>) -> AgentHooks {
        self.custom = names;
        self
    }

    /// Answers with the AG-UI events alone (the AG-UI endpoint): no OpenAI
    /// chunk, no approvals chunk, no error message, no `[DONE]`; the text
    /// and tool-call events carry what the client would read in the chunks.
    /// Needs AG-UI ids (`AgentChatContext::ag_ui`).
    pub fn events_only(mut self) -> AgentHooks {
        self.events_only = true;
        self
    }

    fn needs_approval(&self, tool: &str) -> bool {
        self.ctx.mode == ToolMode::Ask
            && self
                .ctx
                .classes
                .get(tool)
                .copied()
                .unwrap_or(ToolClass::Execute)
                != ToolClass::Read
    }

    /// Creates (durably) the approvals this answer's tool calls need. `calls`
    /// carry the arguments as the model gave them (with PII tokens, which is
    /// what the database keeps); the client sees them restored.
    async fn create_approvals(&self, calls: &[ToolCall]) -> Result<Vec<Value>, Error> {
        let now = now_ms();
        let expires = now + self.ctx.approval_ttl * 1000;
        let rows: Vec<ApprovalRow> = calls
            .iter()
            .filter(|c| self.needs_approval(&c.name))
            .map(|c| ApprovalRow {
                id: new_approval_id(),
                agent: self.ctx.agent.clone(),
                user_id: self.ctx.user_id.clone(),
                device_id: self.ctx.device_id.clone(),
                tool_call_id: c.id.clone(),
                tool: c.name.clone(),
                arguments: if self.custom.contains(&c.name) {
                    crate::wire::responses::answer::custom_input(&c.arguments)
                } else {
                    c.arguments.clone()
                },
                status: "pending".into(),
                reason: None,
                conversation_id: self.ctx.conversation_id.clone(),
                created_at: now,
                expires_at: expires,
                source: "chat".into(),
                server: None,
                used_at: None,
                decided_at: None,
            })
            .collect();
        if rows.is_empty() {
            return Ok(vec![]);
        }
        self.ctx.store.create_approvals(&rows).await?;
        Ok(rows
            .iter()
            .map(|a| {
                let arguments = match &self.ctx.vault {
                    Some(vault) => vault.restore_json(&a.arguments),
                    None => a.arguments.clone(),
                };
                json!({"id": a.id, "tool_call_id": a.tool_call_id, "tool": a.tool, "arguments": arguments,
                       "status": "pending", "expires_at": crate::time::rfc3339(a.expires_at)})
            })
            .collect())
    }

    /// A plain answer's side of the turn, in any dialect: PII restored by
    /// `restore`, approvals for `calls` (as the model gave them) in a
    /// top-level `approvals`.
    async fn answer_rules(
        &self,
        answer: &mut Value,
        calls: &[ToolCall],
        restore: fn(&mut Value, &Vault),
    ) -> Result<(), Error> {
        if let Some(vault) = &self.ctx.vault {
            restore(answer, vault);
        }
        if self.ctx.mode == ToolMode::Ask {
            let approvals = self.create_approvals(calls).await?;
            if !approvals.is_empty() {
                answer["approvals"] = Value::Array(approvals);
            }
        }
        Ok(())
    }

    fn restore_delta(
        &mut self,
        choice_index: u64,
        delta: &mut Map<String, Value>,
        finishing: bool,
    ) {
        let Some(vault) = self.ctx.vault.clone() else {
            return;
        };
        let r = self
            .content
            .entry(choice_index)
            .or_insert_with(|| StreamRestorer::new(Arc::clone(&vault), false));
        let mut text = match delta.get("content") {
            Some(Value::String(s)) => r.push(s),
            _ => String::new(),
        };
        if finishing {
            text.push_str(&r.finish());
        }
        if delta.get("content").is_some_and(Value::is_string) || !text.is_empty() {
            delta.insert("content".into(), Value::String(text));
        }
        if let Some(Value::Array(tcs)) = delta.get_mut("tool_calls") {
            for tc in tcs.iter_mut() {
                let idx = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
                let r = self
                    .args
                    .entry((choice_index, idx))
                    .or_insert_with(|| StreamRestorer::new(Arc::clone(&vault), true));
                if let Some(Value::String(a)) = tc.pointer_mut("/function/arguments") {
                    *a = r.push(a);
                }
            }
        }
        if finishing {
            // Release whatever the argument restorers still hold for this choice.
            let mut tail: Vec<(u64, String)> = vec![];
            for ((c, i), r) in self.args.iter_mut() {
                if *c == choice_index {
                    let rest = r.finish();
                    if !rest.is_empty() {
                        tail.push((*i, rest));
                    }
                }
            }
            if !tail.is_empty() {
                let tcs = delta
                    .entry("tool_calls")
                    .or_insert_with(|| Value::Array(vec![]));
                if let Value::Array(list) = tcs {
                    for (i, rest) in tail {
                        list.push(json!({"index": i, "function": {"arguments": rest}}));
                    }
                }
            }
        }
    }

    fn accumulate(&mut self, choice_index: u64, delta: &Map<String, Value>) {
        if choice_index != 0 {
            return;
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let idx = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
            let acc = self.calls.entry(idx).or_default();
            if let Some(id) = tc.get("id").and_then(Value::as_str) {
                acc.id = id.to_string();
            }
            if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                acc.name.push_str(n);
            }
            if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                acc.args.push_str(a);
            }
        }
    }

    fn start_frames(&mut self, before: &mut Vec<SseFrame>) {
        if self.started {
            return;
        }
        self.started = true;
        let Some(agui) = &self.agui else { return };
        let frame = framer(self.events_only);
        before.push(frame(agui.run_started()));
        if !self.ctx.held.is_empty() {
            before.push(frame(
                agui.custom("service.held_tools", json!({"tools": self.ctx.held})),
            ));
        }
        if !self.ctx.pii_counts.is_empty() {
            before.push(frame(agui.custom(
                "service.pii",
                json!({"counts": crate::pii::counts_json(&self.ctx.pii_counts)}),
            )));
        }
    }
}

impl AgentHooks {
    /// The frames that end a stream that went well (see `on_stream_end`).
    async fn end_frames(&mut self, usage: Option<&Value>) -> Vec<SseFrame> {
        let mut frames = vec![];
        self.start_frames(&mut frames);
        let frame = framer(self.events_only);
        // Text still held by a restorer (a stream that never sent finish_reason).
        let mut leftover = String::new();
        for r in self.content.values_mut() {
            leftover.push_str(&r.finish());
        }
        if self.events_only {
            // The events are the answer: they take what the restorers held,
            // text and arguments alike.
            let mut delta = json!({});
            if !leftover.is_empty() {
                delta["content"] = json!(leftover);
            }
            let tails: Vec<Value> = self
                .args
                .iter_mut()
                .filter(|((c, _), _)| *c == 0)
                .filter_map(|((_, i), r)| {
                    let rest = r.finish();
                    (!rest.is_empty()).then(|| json!({"index": i, "function": {"arguments": rest}}))
                })
                .collect();
            if !tails.is_empty() {
                delta["tool_calls"] = Value::Array(tails);
            }
            if let (Some(agui), false) = (self.agui.as_mut(), delta == json!({})) {
                let c =
                    json!({"id": self.meta.get("id"), "choices": [{"index": 0, "delta": delta}]});
                frames.extend(agui.on_chunk(&c).into_iter().map(frame));
            }
        } else if !leftover.is_empty() {
            let mut c = Value::Object(self.meta.clone());
            c["object"] = json!("chat.completion.chunk");
            c["choices"] =
                json!([{"index": 0, "delta": {"content": leftover}, "finish_reason": null}]);
            // AG-UI already described this text, as tokens, when it arrived.
            frames.push(SseFrame::json(&c));
        }
        let calls: Vec<ToolCall> = self
            .calls
            .values()
            .map(|c| ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.args.clone(),
            })
            .collect();
        let approvals = match self.create_approvals(&calls).await {
            Ok(a) => a,
            Err(e) => {
                if let Some(agui) = self.agui.as_mut() {
                    frames.extend(agui.error(&e.message, &e.code).into_iter().map(frame));
                }
                if !self.events_only {
                    frames.push(SseFrame::json(&e.openai_body()));
                }
                return frames;
            }
        };
        if let Some(agui) = self.agui.as_mut() {
            let extra = approvals
                .iter()
                .map(|a| agui.custom("service.approval_requested", json!({"id": a["id"], "tool_call_id": a["tool_call_id"], "tool": a["tool"], "expires_at": a["expires_at"]})))
                .collect();
            frames.extend(
                agui.finish(usage, &self.ctx.model_alias, extra)
                    .into_iter()
                    .map(frame),
            );
        }
        if !approvals.is_empty() && !self.events_only {
            let mut c = Value::Object(self.meta.clone());
            c["object"] = json!("chat.completion.chunk");
            c["choices"] = json!([]);
            c["approvals"] = Value::Array(approvals);
            frames.push(SseFrame::json(&c));
        }
        frames
    }
}

impl ChatHooks for AgentHooks {
    /// Restoring PII tokens edits every answer; approvals concern only an
    /// answer with tool calls. A key spelled with escapes
    /// (`"tool\u005fcalls"`) would hide from the byte search, so an answer
    /// with any escape takes the tree path too.
    fn edits_answer(&self, answer: &[u8]) -> bool {
        let find = |pat: &[u8]| memchr::memmem::find(answer, pat).is_some();
        self.ctx.vault.is_some()
            || (self.ctx.mode == ToolMode::Ask && (find(b"tool_calls") || find(b"\\u")))
    }

    async fn on_response(&mut self, response: &mut Value) -> Result<(), Error> {
        // The calls as the model gave them: tokens, not values, are stored.
        let calls = tool_calls_of_response(response);
        self.answer_rules(response, &calls, crate::pii::restore_response)
            .await
    }

    fn on_chunk(&mut self, chunk: &mut Value, before: &mut Vec<SseFrame>) -> ChunkAction {
        self.start_frames(before);
        if self.meta.is_empty() {
            for k in ["id", "created", "model"] {
                if let Some(v) = chunk.get(k) {
                    self.meta.insert(k.into(), v.clone());
                }
            }
        }
        // AG-UI events beside the chunks describe the chunk as the model
        // sent it: in tokenize_reversible mode they carry tokens, never the
        // values. Alone, they are the answer: restored.
        let as_sent = match (&self.agui, &self.ctx.vault, self.events_only) {
            (Some(_), Some(_), false) => Some(chunk.clone()),
            _ => None,
        };
        if let Some(Value::Array(choices)) = chunk.get_mut("choices") {
            let mut work = vec![];
            for (pos, choice) in choices.iter().enumerate() {
                let idx = choice
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let finishing = choice.get("finish_reason").is_some_and(|f| !f.is_null());
                work.push((pos, idx, finishing));
            }
            for (pos, idx, finishing) in work {
                let Some(delta) = choices[pos].get_mut("delta").and_then(Value::as_object_mut)
                else {
                    continue;
                };
                let mut d = std::mem::take(delta);
                // Accumulated before restoring: approvals keep the tokens.
                self.accumulate(idx, &d);
                self.restore_delta(idx, &mut d, finishing);
                if let Some(slot) = choices[pos].get_mut("delta") {
                    *slot = Value::Object(d);
                }
            }
        }
        if let Some(agui) = self.agui.as_mut() {
            let described = as_sent.as_ref().unwrap_or(chunk);
            let frame = framer(self.events_only);
            before.extend(agui.on_chunk(described).into_iter().map(frame));
        }
        if self.events_only {
            return ChunkAction::Drop;
        }
        ChunkAction::Send
    }

    async fn on_stream_end(&mut self, usage: Option<&Value>, out: &mut Vec<u8>) {
        for f in self.end_frames(usage).await {
            f.write_to(out);
        }
    }

    fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
        let mut frames = vec![];
        self.start_frames(&mut frames);
        let frame = framer(self.events_only);
        if let Some(agui) = self.agui.as_mut() {
            frames.extend(
                agui.error(&error.message, &error.code)
                    .into_iter()
                    .map(frame),
            );
        }
        frames
    }

    fn openai_frames(&self) -> bool {
        !self.events_only
    }
}
