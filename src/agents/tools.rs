//! Tool rules of agent chat: which offered tools reach the upstream, given
//! the session's tool mode, each tool's class, the agent's tool contract and
//! the administrator's decisions.

//!
//! Reading the tools out of a request body is the wire's business
//! (`crate::wire::chat`); this file holds only the rule.

use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolClass {
    Read,
    Write,
    Execute,
}

impl ToolClass {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            "execute" => Some(Self::Execute),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Execute => "execute",
        }
    }
}

pub use crate::agents::agent::ToolMode;

/// An administrator's view of a tool of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStatus {
    Contract,
    Accepted,
    Held,
    Rejected,
}

impl ToolStatus {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "contract" => Some(Self::Contract),
            "accepted" => Some(Self::Accepted),
            "held" => Some(Self::Held),
            "rejected" => Some(Self::Rejected),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Contract => "contract",
            Self::Accepted => "accepted",
            Self::Held => "held",
            Self::Rejected => "rejected",
        }
    }
}

/// A set of tool names, built per request: a fast hash (seeded per
/// process) rather than SipHash, for short names in small sets.
type Names<'a> = HashSet<&'a str, foldhash::fast::RandomState>;

/// What the store knows of an MCP tool seen for an agent: its status and
/// `mcp::agent::tool_hash` when it was last seen (and so when an admin
/// decided).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenTool {
    pub status: ToolStatus,
    pub hash: String,
}

/// Everything the decision needs, as plain data.
pub struct ToolPolicy<'a> {
    pub mode: ToolMode,
    /// Classes from the device's latest manifest; a missing tool counts as `execute`.
    pub classes: &'a HashMap<String, ToolClass>,
    pub contract: &'a [String],
    /// Administrator decisions (accepted / rejected) by tool name.
    pub decisions: &'a HashMap<String, ToolStatus>,
    pub allow_local_mcp: bool,
}

/// `S` is how the names were offered: `String`, or `&str` lent by a
/// request's [`OfferedTools`].
#[derive(Debug, PartialEq, Eq)]
pub struct ToolDecision<S = String> {
    /// Tools that go upstream, in offered order.
    pub keep: Vec<S>,
    /// Tools held back by the contract, in offered order (for `X-Service-Held-Tools`).
    pub held: Vec<S>,
}

impl ToolPolicy<'_> {
    pub fn class_of(&self, name: &str) -> ToolClass {
        self.classes
            .get(name)
            .copied()
            .unwrap_or(ToolClass::Execute)
    }

    /// Whether a tool outside the contract is held.
    pub fn is_held(&self, name: &str) -> bool {
        let contract: Names = self.contract.iter().map(String::as_str).collect();
        self.is_held_in(&contract, name)
    }

    fn is_held_in(&self, contract: &Names, name: &str) -> bool {
        if self.allow_local_mcp || contract.is_empty() || contract.contains(name) {
            return false;
        }
        self.decisions.get(name) != Some(&ToolStatus::Accepted)
    }

    pub fn decide<S: AsRef<str> + Clone>(&self, offered: &[S]) -> ToolDecision<S> {
        let mut d = ToolDecision {
            keep: Vec::with_capacity(offered.len()),
            held: Vec::new(),
        };
        let contract: Names = self.contract.iter().map(String::as_str).collect();
        let mut held_seen = Names::default();
        for offered_name in offered {
            let name = offered_name.as_ref();
            if self.is_held_in(&contract, name) {
                if held_seen.insert(name) {
                    d.held.push(offered_name.clone());
                }
                continue;
            }
            let allowed = match self.mode {
                ToolMode::Off => false,
                ToolMode::ReadOnly => self.class_of(name) == ToolClass::Read,
                ToolMode::Ask | ToolMode::Auto => true,
            };
            if allowed {
                d.keep.push(offered_name.clone());
            }
        }
        d
    }

    /// Whether a call of this tool needs the user's approval.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.mode == ToolMode::Ask && self.class_of(name) != ToolClass::Read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn classes() -> HashMap<String, ToolClass> {
        [
            ("read_file", ToolClass::Read),
            ("write_file", ToolClass::Write),
            ("run", ToolClass::Execute),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    #[test]
    fn each_mode_keeps_the_right_tools() {
        let classes = classes();
        let decisions = HashMap::new();
        let offered = names(&["read_file", "write_file", "run", "unknown"]);
        let keep = |mode| {
            ToolPolicy {
                mode,
                classes: &classes,
                contract: &[],
                decisions: &decisions,
                allow_local_mcp: false,
            }
            .decide(&offered)
            .keep
        };
        assert_eq!(keep(ToolMode::Off), Vec::<String>::new());
        assert_eq!(keep(ToolMode::ReadOnly), names(&["read_file"]));
        assert_eq!(keep(ToolMode::Ask), offered);
        assert_eq!(keep(ToolMode::Auto), offered);
    }

    #[test]
    fn unknown_tools_count_as_execute() {
        let classes = classes();
        let d = HashMap::new();
        let p = ToolPolicy {
            mode: ToolMode::Ask,
            classes: &classes,
            contract: &[],
            decisions: &d,
            allow_local_mcp: false,
        };
        assert_eq!(p.class_of("mystery"), ToolClass::Execute);
        assert!(p.needs_approval("mystery"));
        assert!(p.needs_approval("write_file"));
        assert!(!p.needs_approval("read_file"));
    }

    #[test]
    fn tools_outside_a_contract_are_held_unless_accepted_or_local_mcp() {
        let classes = classes();
        let contract = names(&["read_file"]);
        let mut decisions = HashMap::new();
        decisions.insert("run".to_string(), ToolStatus::Rejected);
        let offered = names(&["read_file", "write_file", "run"]);
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &contract,
            decisions: &decisions,
            allow_local_mcp: false,
        };
        let d = p.decide(&offered);
        assert_eq!(d.keep, names(&["read_file"]));
        assert_eq!(d.held, names(&["write_file", "run"]));
        decisions.insert("write_file".to_string(), ToolStatus::Accepted);
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &contract,
            decisions: &decisions,
            allow_local_mcp: false,
        };
        assert_eq!(p.decide(&offered).held, names(&["run"]));
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &contract,
            decisions: &decisions,
            allow_local_mcp: true,
        };
        assert_eq!(
            p.decide(&offered),
            ToolDecision {
                keep: offered.clone(),
                held: vec![]
            }
        );
    }

    #[test]
    fn empty_contract_holds_nothing() {
        let classes = classes();
        let d = HashMap::new();
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &[],
            decisions: &d,
            allow_local_mcp: false,
        };
        assert!(p.decide(&names(&["x", "y"])).held.is_empty());
    }
}
