//! `/v1/agents/{agent}/messages`: the agent turn read in Messages terms.
