//! Credentials: login tokens, API keys, agent sign-ins.

mod keys;
mod login;
mod sign_in;
