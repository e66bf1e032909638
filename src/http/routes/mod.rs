//! The route handlers, one file per area: each reads what its route takes
//! (extractors), calls the domain, and shapes the answer.

pub mod admin;
pub mod admin_mcp;
pub mod admin_models;
pub mod agent_chat;
pub mod agent_data;
pub mod agent_messages;
pub mod agents;
pub mod agui;
pub mod limits;
pub mod mcp;
pub mod messages;
pub mod prices;
pub mod responses;
pub mod signins;
pub mod sso;
pub mod system;
pub mod usage;
pub mod users;
pub mod v1;
